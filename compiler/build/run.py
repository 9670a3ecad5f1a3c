"""Running the targets of `compile build`: each TensorRT build in a child process of its own (``--jobs`` of them
at once), stop signals, progress, and ``OUT/build.json``.

A child does only the build: it writes ``engine.plan`` and ``build.log`` into the target's staging folder and
reports back through a pipe. So a builder that crashes (SIGSEGV, an abort, the OOM killer) fails its target with
the signal named, while this process writes the other targets and build.json; and the parent keeps the cache,
the records and the model's digest, which it computes on a second core meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec
from compiler.build.plan import BuildJob, engine_key
from compiler.build.target import BuiltPlan, Either, failed, produce
from compiler.errors import STOP_SIGNALS, CompileError, Interrupted, note_stop, on_stop_signals
from compiler.files import write_atomic
from compiler.records import BuildReport, Kernel, Progress, Status, TargetStatus

JobProgress = Callable[[int, str, int, int], None]
"""(job index, phase, steps done, steps total)."""


def execute_builds(planned: list[BuildJob], model: str | Path, out: str | Path, jobs: int = 1,
                   progress: JobProgress | None = None) -> BuildReport:
    """Run planned jobs, ``jobs`` builds at once, and write ``OUT/build.json``."""
    cancel, received = threading.Event(), []
    children = _Children()
    with on_stop_signals(_cancel_on_stop(cancel, received)):
        try:
            statuses = _run(planned, jobs, progress, cancel, children)
        except BaseException:  # a second stop signal: end the builds now, not when their monitors next ask
            cancel.set()
            children.kill()
            raise
    try:
        digest = planned[0].model_sha256 if planned else ""
    except OSError:  # the model vanished while it was hashed; its targets say so
        digest = ""
    report = BuildReport(model=str(model), model_sha256=digest, out=str(out), targets=statuses)
    Path(out).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(out) / "build.json", report.model_dump_json(indent=2).encode())
    if received:
        raise Interrupted(received[0])
    return report


def run_job(job: BuildJob, progress: Progress | None, cancel: Any) -> TargetStatus:
    """One target, its build in a child process."""
    return produce(job, _Children().build, progress, cancel)


def _run(jobs: list[BuildJob], workers: int, progress: JobProgress | None, cancel: threading.Event,
         children: _Children) -> list[TargetStatus]:
    """Every job, at most ``workers`` at once; targets that share one engine wait for the first of them and take
    it from the cache. The main thread only waits, in short steps, so stop signals reach it at once."""
    statuses: dict[int, TargetStatus] = {}
    first, repeats = _engine_groups(jobs)

    def one(index: int) -> TargetStatus:
        report = (lambda phase, done, total: progress(index, phase, done, total)) if progress else None
        return produce(jobs[index], children.build, report, cancel)

    with ThreadPoolExecutor(max(1, min(workers, len(jobs))), thread_name_prefix="compile-target") as pool:
        running: dict[Future[TargetStatus], int] = {pool.submit(one, i): i for i in first}
        while running:
            done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                try:
                    statuses[index] = future.result()
                except CompileError as exc:
                    statuses[index] = failed(jobs[index], str(exc))
                for repeat in repeats.pop(index, []):  # now a cache hit
                    running[pool.submit(one, repeat)] = repeat
    return [statuses[i] for i in range(len(jobs))]


def _engine_groups(jobs: list[BuildJob]) -> tuple[list[int], dict[int, list[int]]]:
    """Targets that share one engine (SKUs of one compute capability, with the cache on): the first of each builds
    it, the others start when it is done and take it from the cache, rather than build it again beside it."""
    first: dict[str, int] = {}
    repeats: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        # the cache key without waiting for the source model's digest: None stands for it in every job of a plan
        engine = engine_key(job.key_material, job.built_model_sha256) if job.use_cache else str(index)
        if engine in first:
            repeats.setdefault(first[engine], []).append(index)
        else:
            first[engine] = index
    return list(first.values()), repeats


def _cancel_on_stop(cancel: threading.Event, received: list[int]) -> Callable[[int, Any], None]:
    """A stop signal asks the builders to stop through their progress monitors instead of killing mid-write
    (``received`` gets its number); a second one stops at once (the first one names the exit code)."""

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        note_stop(signum)
        received.append(signum)
        cancel.set()

    return handler


class _Children:
    """The build child processes of one run, so a second stop signal can end them all at once."""

    def __init__(self) -> None:
        self._live: set[Any] = set()
        self._lock = threading.Lock()

    def kill(self) -> None:
        with self._lock:
            for child in self._live:
                child.kill()

    def build(self, job: BuildJob, staging: Path, progress: Progress | None, cancel: Any) -> BuiltPlan:
        """Build ``job`` in a child process that writes ``engine.plan`` and ``build.log`` into ``staging``."""
        import multiprocessing

        # fork starts the child in milliseconds with TensorRT already imported (no CUDA context exists in this
        # process); spawn would import everything again, a second per build
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else "spawn")
        receiver, sender = context.Pipe(duplex=False)
        stop = context.Event()
        child = context.Process(target=_child, args=(sender, stop, job.backend, job.spec, staging, os.getpid()),
                                name=f"compile-build-{job.sku}-{job.precision}", daemon=True)
        with self._lock:
            child.start()
            self._live.add(child)
        sender.close()
        try:
            built = _follow(child, receiver, stop, progress, cancel)
            if not (staging / "build.log").exists():  # the child died before it could write its log
                (staging / "build.log").write_text("".join(f"[ERROR] {error}\n" for error in built.errors))
            return built
        finally:
            with self._lock:
                self._live.discard(child)
            if child.is_alive():
                child.kill()
            child.join()
            receiver.close()


def _follow(child: Any, receiver: Any, stop: Any, progress: Progress | None, cancel: Any) -> BuiltPlan:
    """Relay the child's progress and this run's cancel until the child reports its outcome or dies."""
    while True:
        if cancel is not None and cancel.is_set():
            stop.set()
        try:
            if not receiver.poll(0.1):
                continue
            kind, payload = receiver.recv()
        except (EOFError, OSError):  # the child died without a word
            child.join()
            return BuiltPlan(Status.FAILED, errors=[_death(child.exitcode)])
        if kind == "progress":
            if progress:
                progress(*payload)
        else:
            return payload


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = {"SIGKILL": " (the out-of-memory killer, or killed)", "SIGSEGV": " (a crash in the builder)",
               "SIGABRT": " (the builder aborted)"}.get(name, "")
        return f"the TensorRT builder process died of {name}{why}; run again (with fewer --jobs if memory is short)"
    return f"the TensorRT builder process exited with code {exitcode} without a result"


def _child(sender: Any, stop: Any, backend_name: str, spec: BuildSpec, staging: Path, parent: int) -> None:
    """The child's whole life: build, write the plan while hashing it, report, exit without Python's teardown.

    A parent killed outright (SIGKILL, the OOM killer) can take no result: the child then stops its build through
    the monitor and removes the staging folder it was writing into, rather than build on for nobody."""
    for signum in STOP_SIGNALS:  # the parent decides; it cancels through the monitor
        signal.signal(signum, signal.SIG_IGN)
    orphaned = threading.Event()
    threading.Thread(target=_watch_parent, args=(parent, orphaned), daemon=True).start()
    try:
        outcome = _build_plan(sender, stop, orphaned, backend_name, spec, staging)
    except OSError as exc:  # a full disk or a quota: this target fails, the others go on
        outcome = BuiltPlan(Status.FAILED, errors=[f"could not write the engine files: {exc}; free space under "
                                                   f"{staging.parent} and the build cache"])
    except BaseException as exc:  # a bug or a library's surprise: the target fails with it, the run goes on
        outcome = BuiltPlan(Status.FAILED, errors=[f"internal error in the builder: {type(exc).__name__}: {exc}"])
    try:
        sender.send(("outcome", outcome))
    except OSError:
        orphaned.set()
    if orphaned.is_set():
        shutil.rmtree(staging, ignore_errors=True)
    os._exit(0)


def _watch_parent(parent: int, orphaned: threading.Event) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    orphaned.set()


def _build_plan(sender: Any, stop: Any, orphaned: threading.Event, backend_name: str, spec: BuildSpec,
                staging: Path) -> BuiltPlan:
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
    (staging / "build.log").write_text("\n".join(outcome.log) + "\n")
    if outcome.plan is None:
        return BuiltPlan(Status.CANCELLED if outcome.cancelled else Status.FAILED,
                         errors=outcome.errors or ["build failed"])
    mismatch = backend.plan_mismatch(outcome.plan, spec.compute_capabilities)
    if mismatch:
        return BuiltPlan(Status.FAILED, errors=[f"plan header check failed: {mismatch}"])
    with ThreadPoolExecutor(1) as pool:  # hash on the second core while the plan is written
        sha = pool.submit(lambda: hashlib.sha256(outcome.plan).hexdigest())
        (staging / "engine.plan").write_bytes(outcome.plan)
        sha256 = sha.result()
    return BuiltPlan(Status.OK, sha256=sha256, size_bytes=len(outcome.plan), seconds=outcome.seconds,
                     plan_header=backend.plan_header(outcome.plan),
                     layers=[Kernel(**layer) for layer in outcome.layers], warnings=outcome.warnings,
                     backend_version=backend.version)
