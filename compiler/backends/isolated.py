"""A TensorRT build in a child process of its own, for every command that builds (`build`, `inspect --build-check`).

The child only builds: it writes ``engine.plan`` (hashing it meanwhile) and ``build.log`` into a folder the caller
owns and reports back through a pipe. So a builder that crashes (TensorRT-RTX dies of SIGSEGV on some graphs; an
abort; the OOM killer) is one failed build with the signal named, never the death of the command.

Builders come from a fork server: a process of one thread that imports this module and TensorRT once per command,
then forks a builder per build in milliseconds. Forking the command itself would copy a process whose other threads
(onnxruntime's pools after a calibration, the build threads of --jobs) may hold locks the child then waits on for
good: calibrate-then-build-proof hung that way in CI. spawn would import everything again, a second per build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec
from compiler.core.errors import STOP_SIGNALS, CompileError
from compiler.core.plugins import backend_kind
from compiler.core.records import Kernel, Progress, Status

STOP_GRACE_SECONDS = 10.0
"""How long a builder may take to stop through its progress monitor once asked before it is killed: TensorRT
asks its monitor between steps, and a step can be long, but not this long."""
ORPHAN_GRACE_SECONDS = 30.0
"""How long a builder whose parent died may take to stop before it removes its folder and exits regardless."""


@dataclass
class BuiltPlan:
    """What a build left in its folder (``engine.plan``, ``build.log``) and told about it."""

    status: Status
    errors: list[str] = field(default_factory=list)
    sha256: str = ""
    size_bytes: int = 0
    seconds: float = 0.0
    plan_header: dict[str, Any] | None = None
    layers: list[Kernel] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    backend_version: str = ""


class _Flag:
    """A stop flag shared with a builder without a lock: a parent killed while holding a semaphore (what
    multiprocessing's Event takes on every look) would leave its child blocked on it for good."""

    def __init__(self, context: Any) -> None:
        self._value = context.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)


class Either:
    """Set when either of two flags is: a stop asked for, and a reason of the caller's own to stop."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.second.is_set() or (self.first is not None and self.first.is_set())


def block_stop_signals() -> None:
    """For threads that start builders: the fork server starts with its starting thread's signal mask and its
    builders with the server's, so Ctrl-C or SIGTERM to the process group stays pending in them until a builder
    ignores it (Python runs its handlers in the main thread, which keeps receiving them)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


class Builders:
    """The build child processes of one command, so a second stop signal can end them all at once."""

    def __init__(self) -> None:
        self._live: dict[Any, Any] = {}  # child -> the parent's end of its pipe
        self._lock = threading.Lock()
        self._killed = False

    def kill(self) -> None:
        """End every build now; their builds report cancelled."""
        with self._lock:
            self._killed = True
            for child in self._live:
                child.kill()

    def build(self, backend: str, spec: BuildSpec, folder: Path, progress: Progress | None, cancel: Any) -> BuiltPlan:
        """Build ``spec`` with ``backend`` in a child that writes ``engine.plan`` and ``build.log`` into ``folder``."""
        context = _builder_context(backend)
        stop = _Flag(context)
        with self._lock:
            if self._killed:
                return BuiltPlan(Status.CANCELLED, errors=["build cancelled"])
            receiver, sender = context.Pipe(duplex=False)
            child = context.Process(
                target=_child, args=(sender, stop, backend, spec, folder), name=f"compile-build-{spec.sku}", daemon=True
            )
            child.start()
            sender.close()
            self._live[child] = receiver
        try:
            built = _follow(child, receiver, stop, progress, cancel)
            if built is None:  # the child died without a word
                child.join()
                built = (
                    BuiltPlan(Status.CANCELLED, errors=["build cancelled"])
                    if self._killed or stop.is_set()
                    else BuiltPlan(Status.FAILED, errors=[_death(child.exitcode)])
                )
                with open(folder / "build.log", "a") as log:  # whatever the child wrote before it died
                    log.writelines(f"[ERROR] {error}\n" for error in built.errors)
            return built
        finally:
            with self._lock:
                del self._live[child]
            if child.is_alive():
                child.kill()
            child.join()
            receiver.close()


def _builder_context(backend: str) -> Any:
    """The fork server's context, preloading this module and the backend's TensorRT (spawn where there is none)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    kind = backend_kind(backend)
    context.set_forkserver_preload([__name__, *((kind.module, kind.package) if kind else ())])
    return context


def _follow(child: Any, receiver: Any, stop: _Flag, progress: Progress | None, cancel: Any) -> BuiltPlan | None:
    """Relay the child's progress and the caller's cancel until the child reports its outcome (returned) or dies
    (None); a child that does not stop within :data:`STOP_GRACE_SECONDS` of being asked is killed."""
    from multiprocessing.connection import wait

    stopping_since = None
    while True:
        if stopping_since is None and cancel is not None and cancel.is_set():
            stop.set()
            stopping_since = time.monotonic()
        if stopping_since is not None and time.monotonic() - stopping_since > STOP_GRACE_SECONDS:
            child.kill()
        ready = wait([receiver, child.sentinel], timeout=0.1)
        if receiver in ready:
            try:
                kind, payload = receiver.recv()
            except (EOFError, OSError):
                return None
            if kind == "outcome":
                return payload
            if progress:
                progress(*payload)
        elif child.sentinel in ready and not receiver.poll():
            return None


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:  # a real-time signal has no name
            name = f"signal {-exitcode}"
        why = {
            "SIGKILL": " (the out-of-memory killer, or killed)",
            "SIGSEGV": " (a crash in the builder)",
            "SIGABRT": " (the builder aborted)",
        }.get(name, "")
        return f"the TensorRT builder process died of {name}{why}; run again (with fewer --jobs if memory is short)"
    return f"the TensorRT builder process exited with code {exitcode} without a result"


def _child(sender: Any, stop: _Flag, backend: str, spec: BuildSpec, folder: Path) -> None:
    """The child's whole life: build, write the plan while hashing it, report, exit without Python's teardown.

    A command killed outright (SIGKILL, the OOM killer) can take no result: its fork server exits as the command's
    end of their pipe closes, and the child, whose parent that was, then stops its build through the monitor and
    removes the folder it was writing into, rather than build on for nobody."""
    orphaned = threading.Event()
    try:
        for signum in STOP_SIGNALS:  # the command decides; it cancels through the monitor
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        threading.Thread(target=_watch_parent, args=(os.getppid(), orphaned, folder), daemon=True).start()
        outcome = _build_plan(sender, stop, orphaned, backend, spec, folder)
    except OSError as exc:  # a full disk or a quota: this build fails, the others go on
        outcome = BuiltPlan(
            Status.FAILED,
            errors=[f"could not write the engine files: {exc}; free space under {folder.parent} and the build cache"],
        )
    except BaseException as exc:  # a bug or a library's surprise: the build fails with it, the command goes on
        outcome = BuiltPlan(Status.FAILED, errors=[f"internal error in the builder: {type(exc).__name__}: {exc}"])
    try:
        sender.send(("outcome", outcome))
    except OSError:
        orphaned.set()
    if orphaned.is_set():
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(0)


def _watch_parent(parent: int, orphaned: threading.Event, folder: Path) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    orphaned.set()
    time.sleep(ORPHAN_GRACE_SECONDS)  # the build did not stop through its monitor: stop regardless
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(1)


def _build_plan(
    sender: Any, stop: _Flag, orphaned: threading.Event, backend_name: str, spec: BuildSpec, folder: Path
) -> BuiltPlan:
    last = [0.0]

    def report(phase: str, done: int, total: int) -> None:
        # TensorRT reports ~1,000 steps per build and the display redraws 10 times a second: send what it can
        # show, not every step
        now = time.monotonic()
        if done == total or now - last[0] >= 0.05:
            last[0] = now
            try:
                sender.send(("progress", (phase, done, total)))
            except OSError:  # the parent is gone: no exception may escape into TensorRT's callback
                orphaned.set()

    try:
        backend = load_backend(backend_name)
        outcome = backend.build(spec, report, Either(stop, orphaned))
    except CompileError as exc:
        return BuiltPlan(Status.FAILED, errors=[str(exc)])
    (folder / "build.log").write_text("\n".join(outcome.log) + "\n")
    if outcome.plan is None:
        return BuiltPlan(
            Status.CANCELLED if outcome.cancelled else Status.FAILED, errors=outcome.errors or ["build failed"]
        )
    mismatch = backend.plan_mismatch(outcome.plan, spec.compute_capabilities)
    if mismatch:
        return BuiltPlan(Status.FAILED, errors=[f"plan header check failed: {mismatch}"])
    with ThreadPoolExecutor(1) as pool:  # hash on the second core while the plan is written
        sha = pool.submit(lambda: hashlib.sha256(outcome.plan).hexdigest())
        (folder / "engine.plan").write_bytes(outcome.plan)
        sha256 = sha.result()
    return BuiltPlan(
        Status.OK,
        sha256=sha256,
        size_bytes=len(outcome.plan),
        seconds=outcome.seconds,
        plan_header=backend.plan_header(outcome.plan),
        layers=[Kernel(**layer) for layer in outcome.layers],
        warnings=outcome.warnings,
        backend_version=backend.version,
    )
