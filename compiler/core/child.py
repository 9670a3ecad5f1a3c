"""Child processes with bounded output and a deadline: every child compile starts (a ModelOpt interpreter, the
``--metric`` worker, Polygraphy's lint, a Docker credential helper) goes through :func:`start`, so a child that
prints gigabytes costs :data:`KEEP` bytes of memory per stream and a child that hangs is killed at its deadline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KEEP = 64 << 10
"""Bytes of each stream kept (its end: where a child's error is)."""
_READ = 64 << 10


@dataclass(frozen=True)
class Finished:
    """How a child ended: its exit status (negative: the signal), the end of each stream, and whether the deadline
    killed it."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


class _Tail(threading.Thread):
    """Drains one pipe, keeping only its last ``keep`` bytes."""

    def __init__(self, pipe, keep: int) -> None:
        super().__init__(daemon=True, name="compile-child-output")
        self.pipe, self.keep, self.data = pipe, keep, bytearray()
        self.start()

    def run(self) -> None:
        try:
            while chunk := self.pipe.read1(_READ):
                self.data += chunk
                if len(self.data) > 2 * self.keep:  # trim in steps: amortised, never more than 2x kept
                    del self.data[: len(self.data) - self.keep]
        except (OSError, ValueError):  # closed under us: the child was killed and we stopped listening
            pass

    def text(self) -> str:
        return bytes(self.data[-self.keep :]).decode("utf-8", errors="replace") if self.keep else ""


class Child:
    """A running child whose output is being drained; :meth:`finish` waits for it within its deadline."""

    def __init__(
        self,
        command: Sequence[str],
        seconds: float,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        input_text: str | None = None,
        merge: bool = False,
        keep: int = KEEP,
    ) -> None:
        """``merge``: stderr into stdout (one stream, in order); ``keep=0``: output discarded (never piped)."""
        piped = subprocess.PIPE if keep else subprocess.DEVNULL
        self.deadline = time.monotonic() + seconds
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=piped,
            stderr=subprocess.STDOUT if merge and keep else piped,
            process_group=0,  # its own group: what it starts is ended with it
        )
        self._tails = [_Tail(pipe, keep) for pipe in (self.process.stdout, self.process.stderr) if pipe is not None]
        if input_text is not None:
            try:
                self.process.stdin.write(input_text.encode())
                self.process.stdin.close()
            except OSError:  # it exited without reading: its status says why
                pass

    def finish(self) -> Finished:
        """Wait until the child exits or the deadline passes (then it is killed); a stop (Ctrl-C) kills it too."""
        timed_out = False
        try:
            self.process.wait(max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
        except BaseException:
            self.kill()
            raise
        for tail in self._tails:
            tail.join(1.0)  # a grandchild may hold the pipe open: what was read by now is what we keep
        texts = [tail.text() for tail in self._tails] + ["", ""]
        return Finished(self.process.returncode, texts[0], texts[1], timed_out, time.monotonic() - self.started)

    def kill(self) -> None:
        self.process.kill()
        self._end_group()
        self.process.wait()

    def _end_group(self) -> None:
        """What the child started (a background job holding its pipes) ends with it; called before the child is
        reaped, so its pid (the group's id) cannot have been reused."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def run(command: Sequence[str], seconds: float, **kwargs) -> Finished:
    """Run ``command`` to its end or its deadline, keeping the end of its output (see :class:`Child`)."""
    return Child(command, seconds, **kwargs).finish()


def last_line(text: str) -> str:
    """The last non-empty line of a child's output (its error), cut to one printable line."""
    from compiler.core.text import printable

    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return printable(lines[-1][:300]) if lines else ""
