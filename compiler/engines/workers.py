"""Running the targets of `compile build`: each TensorRT build in a child process of its own
(:mod:`compiler.backends.isolated`), ``--jobs`` of them at once, stop signals, progress, and ``OUT/build.json``.

The children only build; this process keeps the cache, the records and the model's digest, which it computes on
a second core meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from compiler.backends.isolated import Builders, BuiltPlan, block_stop_signals
from compiler.core.errors import CompileError, Interrupted, note_stop, on_stop_signals
from compiler.core.files import write_atomic
from compiler.core.records import BuildReport, Progress, Status, TargetStatus
from compiler.engines.jobs import BuildJob, engine_key
from compiler.engines.target import failed, produce

REMOTE_THREADS = 8
"""Targets asking the remote cache at once."""
JobProgress = Callable[[int, str, int, int], None]
"""(job index, phase, steps done, steps total)."""


def execute_builds(
    planned: list[BuildJob], model: str | Path, out: str | Path, jobs: int = 1, progress: JobProgress | None = None
) -> BuildReport:
    """Run planned jobs, ``jobs`` builds at once, and write ``OUT/build.json``.

    A stop signal asks every build to stop through its progress monitor; a second one kills them. Either way the
    run ends with build.json (the unfinished targets ``cancelled``, their previous folders untouched) and
    :class:`Interrupted`."""
    cancel, received = threading.Event(), []
    builders = Builders()
    with on_stop_signals(_cancel_on_stop(cancel, received, builders)):
        statuses = _run(planned, jobs, progress, cancel, builders)
    try:
        digest = planned[0].model_sha256 if planned else ""  # raises InvalidInput for a model protobuf refuses
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
    return produce(job, _builder(Builders()), progress, cancel)


def _builder(builders: Builders) -> Callable[[BuildJob, Path, Progress | None, Any], BuiltPlan]:
    return lambda job, staging, progress, cancel: builders.build(job.backend, job.spec, staging, progress, cancel)


def _run(
    jobs: list[BuildJob], workers: int, progress: JobProgress | None, cancel: threading.Event, builders: Builders
) -> list[TargetStatus]:
    """Every job, at most ``workers`` builds at once; targets that share one engine wait for the first of them and take
    it from the cache (or, once the run is cancelled, are cancelled without starting). The main thread only
    waits, in short steps, so stop signals reach it at once."""
    statuses: dict[int, TargetStatus] = {}
    first, repeats = _engine_groups(jobs)
    build = _at_most(workers, _builder(builders))
    # with a remote cache every target asks it at once (a few round trips each); builds stay ``workers`` at once
    threads = min(len(first), REMOTE_THREADS) if any(job.remote_cache for job in jobs) else workers

    def one(index: int) -> TargetStatus:
        report = (lambda phase, done, total: progress(index, phase, done, total)) if progress else None
        return produce(jobs[index], build, report, cancel)

    with ThreadPoolExecutor(
        max(1, min(max(workers, threads), len(jobs))),
        thread_name_prefix="compile-target",
        initializer=block_stop_signals,
    ) as pool:
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
                    if cancel.is_set():
                        statuses[repeat] = failed(jobs[repeat], "build cancelled", Status.CANCELLED)
                    else:
                        running[pool.submit(one, repeat)] = repeat
    return [statuses[i] for i in range(len(jobs))]


def _at_most(workers: int, build: Callable[..., BuiltPlan]) -> Callable[..., BuiltPlan]:
    """``build`` in at most ``workers`` threads at once (more may be asking the remote cache meanwhile)."""
    slots = threading.BoundedSemaphore(max(1, workers))

    def limited(*args: Any) -> BuiltPlan:
        with slots:
            return build(*args)

    return limited


def _engine_groups(jobs: list[BuildJob]) -> tuple[list[int], dict[int, list[int]]]:
    """Targets that share one engine (SKUs of one compute capability, with the cache on): the first of each builds
    it, the others start when it is done and take it from the cache, rather than build it again beside it."""
    first: dict[str, int] = {}
    repeats: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        # the cache key without waiting for the source model's digest: None stands for it in every job of a plan
        engine = engine_key(job.key_material, job.prepared_sha256) if job.use_cache else str(index)
        if engine in first:
            repeats.setdefault(first[engine], []).append(index)
        else:
            first[engine] = index
    return list(first.values()), repeats


def _cancel_on_stop(cancel: threading.Event, received: list[int], builders: Builders) -> Callable[[int, Any], None]:
    """A stop signal asks the builders to stop through their progress monitors instead of killing mid-write
    (``received`` gets its number); a second one kills them (the first one names the exit code)."""

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            builders.kill()
            return
        note_stop(signum)
        received.append(signum)
        cancel.set()

    return handler
