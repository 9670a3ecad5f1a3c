"""Errors that map to the command-line contract's exit codes.

Every failure a user can cause or fix is one of these; the CLI turns it into a
single ``error:`` line and the matching exit code. Anything else is a bug.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    INVALID_INPUT = 2
    ENVIRONMENT = 3
    CONFLICT = 4
    INTERNAL = 70
    """A bug in compile (sysexits.h EX_SOFTWARE): CI can tell it from a failed gate (1)."""


class CompileError(Exception):
    """Base of all expected failures; ``exit_code`` is what the CLI returns."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED


class CheckFailed(CompileError):
    """A check, gate or build failed (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED


class InvalidInput(CompileError):
    """The user gave a bad file, option or value (exit 2)."""

    exit_code = ExitCode.INVALID_INPUT


class EnvironmentProblem(CompileError):
    """A backend, GPU or store is missing or unreachable (exit 3)."""

    exit_code = ExitCode.ENVIRONMENT


class Conflict(CompileError):
    """A published version already exists with other content (exit 4)."""

    exit_code = ExitCode.CONFLICT


class Interrupted(CompileError):
    """Stopped by a signal: Ctrl-C (SIGINT) or SIGTERM (a cancelled CI job, a stopping container). The exit
    code is the shell's 128 + signal number, as if the signal had ended the process."""

    def __init__(self, signum: int) -> None:
        super().__init__("interrupted" if signum == signal.SIGINT else "terminated")
        self.exit_code = 128 + signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Ctrl-C, and what a cancelled CI job or a stopping container sends."""

_stops_received: list[int] = []


def note_stop(signum: int) -> None:
    """Remember that the user asked this process to stop, whatever the stop then breaks on its way out."""
    _stops_received.append(signum)


def stop_received() -> int | None:
    """The first stop signal this process received, if any: an error that a stop caused (an import it cut short,
    a library that wrapped the KeyboardInterrupt into its own error) is reported as the stop it was."""
    return _stops_received[0] if _stops_received else None


@contextmanager
def on_stop_signals(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Ctrl-C and SIGTERM go to ``handler`` for the duration of the block, then to what handled them before.
    Python runs signal handlers in the main thread only, so elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, signal.SIG_DFL if action is None else action)  # None: set outside Python


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while something is made and its cleanup set up: a stop raised between the two
    (right after ``mkdir``, before the ``try`` that removes the folder) would leave it behind. One that arrives
    meanwhile is raised again when the block ends, into code that now cleans up. (Blocking the signal with
    ``pthread_sigmask`` would not do: the kernel then hands it to another thread.)"""
    received: list[int] = []
    try:
        with on_stop_signals(lambda number, frame: received.append(number)):
            yield
    finally:
        if received:
            signal.raise_signal(received[0])
