"""`compile build`: one TensorRT engine per SKU x precision, all shape profiles in each.

Inputs are validated before any build (exit 2/3); every target is then built, or taken
from the content-addressed cache, into ``DIR/<sku>/<precision>/`` through a staging
folder, so a folder holding ``engine.plan`` is always a finished, verified build.
A failed target keeps its ``build.log`` and does not stop the others.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec
from compiler.cache import (
    ENGINE_FILES,
    BuildCache,
    changed_since,
    check_writable_folder,
    hash_json,
    link_or_copy,
    replace_dir,
    staging_folder,
    stat_key,
    writable_folder,
    write_atomic,
)
from compiler.digest import MODEL_FACTS, claim_hash, finish_model_digest, hash_model_file, hash_model_file_mapped
from compiler.errors import STOP_SIGNALS, CompileError, Interrupted, InvalidInput, note_stop, on_stop_signals
from compiler.profiles import ShapeProfile, load_profiles, load_sku_catalog, profiles_problem, validate_profiles
from compiler.skim import skim_inputs

FORMAT_VERSION = 2
"""Of engine.json, layers.json and build.json, and part of every cache key: 2 added each kernel's precision."""
PRECISIONS = ("fp32", "fp16", "int8", "fp8")
FP8_MIN_CAPABILITY = (8, 9)


class EngineRecord(BaseModel):
    """engine.json: exactly what one plan file is."""

    format_version: int = FORMAT_VERSION
    sha256: str
    size_bytes: int
    model_sha256: str
    built_model_sha256: str
    calibration_sha256: str | None
    sku: str
    compute_capabilities: list[str]
    precision: str
    backend: dict[str, str]
    profiles: list[ShapeProfile]
    builder_options: dict[str, Any]
    build_seconds: float
    cache_hit: bool
    cache_key: str
    plan_header: dict[str, Any] | None
    builder_warnings: list[str] = []
    """The builder's warnings (also in build.log); kept here so a cache hit reports them too."""


class TargetStatus(BaseModel):
    sku: str
    precision: str
    status: str
    """ok, failed or cancelled."""
    path: str
    cache_hit: bool = False
    seconds: float = 0.0
    errors: list[str] = []
    warnings: list[str] = []
    """What went wrong without costing the result (an engine the build cache could not keep)."""


class BuildReport(BaseModel):
    """build.json: the status file of one `compile build` run."""

    format_version: int = FORMAT_VERSION
    model: str
    model_sha256: str
    out: str
    targets: list[TargetStatus]

    @property
    def failed(self) -> list[TargetStatus]:
        return [t for t in self.targets if t.status != "ok"]


class PendingDigest(Protocol):
    """A digest still being computed: a Future in this process, a :class:`_DigestRelay` in a worker."""

    def done(self) -> bool: ...

    def result(self) -> str: ...


@dataclass(frozen=True)
class BuildJob:
    """One target, with everything a worker process needs (a pending digest travels separately)."""

    sku: str
    precision: str
    backend: str
    spec: BuildSpec
    key_material: dict[str, Any]
    """Everything that determines the engine except the built model's digest."""
    cache_root: Path
    use_cache: bool
    target_dir: Path
    model_digest: str | PendingDigest | None
    """The source model's sha256, or a :class:`PendingDigest` while it is computed beside the build (None
    only on its way into a worker process, which puts its relay in)."""
    built_model_sha256: str | None
    """The digest of the model actually built; None when that is the source model itself (fp32)."""
    calibration_sha256: str | None
    source_stat: list[tuple[str, list[Any]]]
    """(path, stat key) of the source model and its external data files, taken before they were hashed."""
    built_stat: list[tuple[str, list[Any]]]
    """The same for the model actually built when that is another file (fp16, int8/fp8); empty otherwise."""

    @property
    def model_sha256(self) -> str:
        return self.model_digest if isinstance(self.model_digest, str) else self.model_digest.result()

    @property
    def built_sha256(self) -> str:
        return self.built_model_sha256 or self.model_sha256

    @property
    def cache_key(self) -> str:
        return _engine_key(self.key_material, self.built_sha256)

    @property
    def digest_pending(self) -> bool:
        return not isinstance(self.model_digest, str) and not self.model_digest.done()


def _engine_key(material: dict[str, Any], model_digest: str | None) -> str:
    return hash_json({**material, "model": model_digest})


Progress = Callable[[int, str, int, int], None]
"""(job index, phase, steps done, steps total)."""


def build_engines(
    model: str | Path,
    profiles: str | Path,
    skus: str | list[str],
    precisions: str | list[str],
    out: str | Path,
    jobs: int = 1,
    progress: Progress | None = None,
    **options: Any,
) -> BuildReport:
    """Validate everything, then build (or reuse) every SKU x precision engine.

    ``options`` are those of :func:`plan_builds` (calibration, data, method, cache_dir, use_cache,
    backend, workspace_mb, optimization_level, calibration_progress).
    """
    planned = plan_builds(model, profiles, skus, precisions, out, **options)
    return execute_builds(planned, model, out, jobs, progress)


def execute_builds(planned: list[BuildJob], model: str | Path, out: str | Path, jobs: int = 1,
                   progress: Progress | None = None) -> BuildReport:
    """Run planned jobs (in ``jobs`` processes when > 1) and write ``OUT/build.json``."""
    cancel, received = threading.Event(), []
    with on_stop_signals(_cancel_on_stop(cancel, received)):
        statuses = _run(planned, jobs, progress, cancel)
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


def plan_builds(
    model: str | Path,
    profiles: str | Path,
    skus: str | list[str],
    precisions: str | list[str],
    out: str | Path,
    *,
    calibration: str | Path | None = None,
    data: str | Path | None = None,
    method: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    backend: str | None = None,
    workspace_mb: int | None = None,
    optimization_level: int | None = None,
    calibration_progress: Callable[[str, int, int], None] | None = None,
) -> list[BuildJob]:
    """Every check that can fail before a build, and the jobs that follow from them (the output folder is made,
    proven writable, last)."""
    skus, precisions = ([names] if isinstance(names, str) else list(names) for names in (skus, precisions))
    if not skus:
        raise InvalidInput("no --sku given; name at least one SKU from profiles/skus.yaml")
    if not precisions:
        raise InvalidInput("no --precision given; choose from " + ", ".join(PRECISIONS))
    for precision in precisions:
        if precision not in PRECISIONS:
            raise InvalidInput(f"unknown precision '{precision}'; choose from {', '.join(PRECISIONS)}")
    if workspace_mb is not None and workspace_mb < 1:
        raise InvalidInput(f"--workspace-mb {workspace_mb}: give at least 1 (MiB)")
    if optimization_level is not None and not 0 <= optimization_level <= 5:
        raise InvalidInput(f"--optimization-level {optimization_level}: give 0 to 5")
    if calibration is not None and data is not None:
        raise InvalidInput("--calibration and --data both given: pass --calibration DIR to build from a finished "
                           "calibration, or --data DATA.npz to calibrate now")
    if method is not None and data is None:
        raise InvalidInput(f"--method {method} chooses how --data is calibrated; pass --data DATA.npz or drop --method")
    cache = BuildCache(Path(cache_dir) if cache_dir else None)
    writable_folder(cache.root, "--cache-dir" if cache_dir else "build cache (set --cache-dir or COMPILE_CACHE_DIR)")
    model_stat = _stat_or_none(Path(model))  # before anything reads the model
    source = _model_facts(Path(model), model_stat, cache)
    profile_set = load_profiles(profiles)
    errors = validate_profiles(profile_set, source["inputs"])
    if errors:
        raise profiles_problem(profiles, errors, hint="see compile inspect --profiles")
    catalog = load_sku_catalog()
    targets = {sku: catalog.get(sku) for sku in dict.fromkeys(skus)}
    backends = {}
    for target in targets.values():
        name = backend or target.backend
        if name not in backends:
            backends[name] = load_backend(name)
        backends[name].check_targets((target.compute_capability,))
    for precision in precisions:
        if precision != "fp8":
            continue
        for sku, target in targets.items():
            if tuple(map(int, target.compute_capability.split("."))) < FP8_MIN_CAPABILITY:
                raise InvalidInput(f"fp8 needs compute capability 8.9 or newer; SKU '{sku}' is "
                                   f"{target.compute_capability}; drop fp8 or that SKU")
    # before the costly part (calibration, FP16 conversion); the folders are made only once it has passed
    check_writable_folder(Path(out), "--out")
    for sku in targets:
        for precision in precisions:
            check_writable_folder(Path(out) / sku / precision, "--out")
    digest = source["sha256"]
    prepared = {p: _prepare(p, Path(model), digest, calibration, data, method or "minmax", cache, calibration_progress)
                for p in dict.fromkeys(precisions)}
    source_stat = _files_stat(Path(model), model_stat, source["files"])
    jobs = []
    for sku, target in targets.items():
        backend_impl = backends[backend or target.backend]
        for precision in dict.fromkeys(precisions):
            built_model, built_sha, built_stat, calibration_sha = prepared[precision]
            spec = BuildSpec(
                model_path=built_model,
                profiles=tuple(profile_set.profiles),
                compute_capabilities=(target.compute_capability,),
                workspace_mb=workspace_mb,
                optimization_level=optimization_level,
                sku=sku,
                state_dir=cache.root,
            )
            material = {
                "format": FORMAT_VERSION,
                "profiles": [p.model_dump() for p in spec.profiles],
                "precision": precision,
                "compute_capabilities": spec.compute_capabilities,
                "backend": [backend_impl.name, backend_impl.version],
                "options": spec.options(),
            }
            jobs.append(BuildJob(
                sku=sku, precision=precision, backend=backend_impl.name, spec=spec, key_material=material,
                cache_root=cache.root, use_cache=use_cache, target_dir=Path(out) / sku / precision,
                model_digest=digest, built_model_sha256=built_sha, calibration_sha256=calibration_sha,
                source_stat=source_stat,
                built_stat=built_stat,
            ))
    writable_folder(Path(out), "--out")
    return jobs


def _stat_or_none(path: Path) -> list[Any] | None:
    try:
        return stat_key(path)
    except OSError:
        return None  # not a readable file: reading it raises the precise error


def _model_facts(path: Path, stat: list[Any] | None, cache: BuildCache) -> dict[str, Any]:
    """The model's inputs and sha256, read (by :func:`skim_inputs`, or a full safe load when the skim
    cannot vouch for the file) only when the file changed since last time.

    After a change the digest is left computing on another core (``"sha256"`` is then a Future):
    an fp32 build starts at once and looks the cache up when the digest is known. ``stat`` is the file's,
    taken before anything read it: a hash the CLI started ahead is taken up only if it started from it.
    """
    if not path.is_file():
        from compiler.model import load_model

        load_model(path)  # raises the precise error
    memo, facts = cache.recall(MODEL_FACTS, [path])
    if facts is not None:
        return facts
    # A thread of its own that ends with the digest: the CLI's exit waits for working threads, not idle ones.
    pool = ThreadPoolExecutor(1, thread_name_prefix="compile-digest")
    try:
        return _read_model(path, stat, cache, memo, pool)
    finally:
        pool.shutdown(wait=False)  # queued work still runs


def _read_model(path: Path, stat: list[Any] | None, cache: BuildCache, memo: Path, pool: ThreadPoolExecutor
                ) -> dict[str, Any]:
    """:func:`_model_facts` for a file read anew: the hash on ``pool`` (a second core; TensorRT builds on
    one), the inputs here.

    The hash reads a mapping of the file in one GIL-free update: read in chunks, it would need the GIL
    between chunks and wait for it behind the Python work that follows here (imports, validation), so
    it ran mostly after the --jobs workers had started, on a core they wanted. The CLI starts it earlier
    still (:func:`compiler.digest.hash_ahead`).
    """
    model_file = claim_hash(path, stat) or pool.submit(hash_model_file_mapped, path)
    inputs, external_files = skim_inputs(path), ()
    if inputs is None:
        # what the skim leaves to it (external data, anything unusual): the full safe load, with onnx
        # and numpy imported (~0.1 s) and every weight parsed into memory
        from compiler.inspection import input_dims, model_inputs
        from compiler.model import load_model

        source = load_model(path, infer_shapes=False, check=False, digest=False)
        inputs, external_files = input_dims(model_inputs(source)), source.external_files
        del source  # as large as the file: not to be held through the builds
    facts = {"inputs": inputs, "files": [str(f) for f in external_files]}

    def digest() -> str:
        sha = finish_model_digest(model_file.result(), external_files)
        cache.memorize(memo, {**facts, "sha256": sha})
        return sha

    return {**facts, "sha256": pool.submit(digest)}


def _prepare(precision: str, model: Path, model_sha: str | PendingDigest, calibration: str | Path | None,
             data: str | Path | None, method: str, cache: BuildCache,
             calibration_progress: Callable[[str, int, int], None] | None
             ) -> tuple[Path, str | None, list[tuple[str, list[Any]]], str | None]:
    """The ONNX model this precision builds from: (path, its digest or None for the model itself, the stat of its
    files, the calibration record's sha256)."""
    if precision == "fp32":
        return model, None, [], None
    if not isinstance(model_sha, str):
        model_sha = model_sha.result()
    if precision == "fp16":
        converted = cache.root / "prepared" / model_sha / "fp16.onnx"
        if not converted.is_file():
            from calibration import convert_fp16

            convert_fp16(model, converted)  # writes a staging file and renames it into place
        return converted, *_prepared_digest(converted, cache), None
    if calibration is None and data is not None:
        from calibration import calibrate

        calibration = cache.root / "calibrations" / model_sha / f"{precision}-{method}"
        calibrate(model, data, calibration, precision=precision, method=method, staged=True,
                  progress=calibration_progress)
    if calibration is None:
        raise InvalidInput(f"{precision} needs calibration: pass --data DATA.npz to calibrate now, or run "
                           f"compile calibrate --precision {precision} and pass its folder with --calibration DIR")
    folder = Path(calibration)
    record_path, quantized = folder / "calibration.json", folder / "model.onnx"
    if not record_path.is_file() or not quantized.is_file():
        raise InvalidInput(f"{folder}: not a calibration folder (needs calibration.json and model.onnx "
                           f"from compile calibrate)")
    rerun = "re-run compile calibrate"
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{record_path}: unreadable ({exc}); {rerun}") from None
    if not isinstance(record, dict) or not isinstance(record.get("files", {}), dict):
        raise InvalidInput(f"{record_path}: not a record written by compile calibrate; {rerun}")
    if record.get("precision") != precision:
        raise InvalidInput(f"{record_path}: calibrated for precision '{record.get('precision')}', not "
                           f"'{precision}'; run compile calibrate --precision {precision}")
    if record.get("model_sha256") != model_sha:
        raise InvalidInput(f"{record_path}: was calibrated from another model (sha256 "
                           f"{str(record.get('model_sha256'))[:12]}…, this model is {model_sha[:12]}…); "
                           f"{rerun} on this model")
    digest, built_stat = _prepared_digest(quantized, cache)  # refuses external data outside the folder
    for path, _ in built_stat:
        recorded = record.get("files", {}).get(Path(path).name)
        if recorded is not None and cache.file_sha256(Path(path)) != recorded:
            raise InvalidInput(f"{path}: changed since compile calibrate wrote it (its sha256 is not the one "
                               f"{record_path.name} records); {rerun}")
    return quantized, digest, built_stat, cache.file_sha256(record_path)


def _prepared_digest(path: Path, cache: BuildCache) -> tuple[str, list[tuple[str, list[Any]]]]:
    """The digest of a model the build reads instead of the source (FP16, Q/DQ), external data included, and the
    stat of its files; read like the source model, so its external data may not leave its folder either."""
    path_stat = stat_key(path)  # before anything reads it
    facts = _model_facts(path, path_stat, cache)
    digest = facts["sha256"] if isinstance(facts["sha256"], str) else facts["sha256"].result()
    return digest, _files_stat(path, path_stat, facts["files"])


def _files_stat(model: Path, model_stat: list[Any] | None, external: list[str]) -> list[tuple[str, list[Any]]]:
    """(path, stat key) of a model, taken before it was read, and of its external data files: what
    :func:`_changed_input` compares after the build."""
    return [(str(model), model_stat), *((f, stat_key(Path(f))) for f in external)]


def _run(jobs: list[BuildJob], workers: int, progress: Progress | None, cancel: threading.Event
         ) -> list[TargetStatus]:
    if workers <= 1 or len(jobs) <= 1:
        return [run_job(job, (lambda p, d, t, i=i: progress(i, p, d, t)) if progress else None, cancel)
                for i, job in enumerate(jobs)]
    import multiprocessing

    # fork starts a worker in milliseconds with TensorRT already imported (no CUDA context exists
    # yet in this process); spawn re-imports everything, a second per worker.
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    # The workers start building while the model is still hashed; its digest follows them through a relay.
    pending = {job.model_digest for job in jobs if not isinstance(job.model_digest, str)}
    if len(pending) > 1:
        raise ValueError("execute_builds runs the jobs of one plan_builds call (one model digest)")
    digest = _DigestRelay(context) if pending else None
    events, shared_cancel = context.Queue(), context.Event()
    relay = threading.Thread(target=_relay, args=(events, progress, cancel, shared_cancel), daemon=True)
    relay.start()
    statuses: dict[int, TargetStatus] = {}
    # Python's advice for fork without exec: objects made so far leave the collector's reach, so a collection
    # in either process does not write to (and so copy) every page they share. Measured: --jobs 2 on two
    # ResNet-50 targets ~0.05 s faster (of ~1.3 s).
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context, initializer=_init_worker,
                                 initargs=(events if progress else None, shared_cancel, digest)) as pool:
            if digest is not None:
                threading.Thread(target=digest.publish, args=(*pending,), daemon=True).start()
            def submit(index: int) -> Any:
                job = jobs[index]
                return pool.submit(_worker, index, job if digest is None else replace(job, model_digest=None))

            first, repeats = _engine_groups(jobs)
            running = {submit(i): i for i in first}
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    index = running.pop(future)
                    try:
                        statuses[index] = future.result()
                    except BrokenProcessPool:  # a worker was killed (the OOM killer, a signal): the pool is done
                        shared_cancel.set()  # the surviving workers stop their builds through the monitor
                        statuses[index] = _worker_died(jobs[index])
                    for repeat in repeats.pop(index, []):  # now a cache hit
                        try:
                            running[submit(repeat)] = repeat
                        except BrokenProcessPool:
                            statuses[repeat] = _worker_died(jobs[repeat])
    finally:
        gc.unfreeze()
        events.put(None)
        relay.join()
    return [statuses[i] for i in range(len(jobs))]


def _engine_groups(jobs: list[BuildJob]) -> tuple[list[int], dict[int, list[int]]]:
    """Targets that share one engine (SKUs of one compute capability, with the cache on): the first of each builds
    it, the others start when it is done and take it from the cache, rather than build it again beside it."""
    first: dict[str, int] = {}
    repeats: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        # the cache key without waiting for the source model's digest: None stands for it in every job of a plan
        engine = _engine_key(job.key_material, job.built_model_sha256) if job.use_cache else str(index)
        if engine in first:
            repeats.setdefault(first[engine], []).append(index)
        else:
            first[engine] = index
    return list(first.values()), repeats


def _worker_died(job: BuildJob) -> TargetStatus:
    return _status(job, "failed", time.perf_counter(), errors=[
        "a build worker process died (killed by the out-of-memory killer or a signal) or was stopped with it; "
        "run again, with fewer --jobs if memory is short"])


def _relay(events: Any, progress: Progress | None, cancel: threading.Event, shared_cancel: Any) -> None:
    """Forward worker progress to the display and the user's Ctrl-C to the workers."""
    import queue

    while True:
        if cancel.is_set():
            shared_cancel.set()
        try:
            event = events.get(timeout=0.1)
        except queue.Empty:
            continue
        if event is None:
            return
        if progress:
            progress(*event)


class _DigestRelay:
    """The model's digest as the parent learns it, for worker processes started before that."""

    def __init__(self, context: Any) -> None:
        self._ready = context.Event()
        self._text = context.Array("c", 4096, lock=False)  # "sha256:<hex>" or "error:<why>"

    def publish(self, digest: PendingDigest) -> None:
        """Parent side: wait for the digest, then hand it (or why it failed) to every worker."""
        try:
            text = f"sha256:{digest.result()}"
        except Exception as exc:  # each worker reports it on its own target
            text = f"error:{exc}"
        self._text.value = text.encode()[: len(self._text) - 1]
        self._ready.set()

    def done(self) -> bool:
        return self._ready.is_set()

    def result(self) -> str:
        parent = os.getppid()
        while not self._ready.wait(1.0):
            if os.getppid() != parent:
                raise OSError("the compile process that was hashing the model has exited")
        kind, _, value = self._text.value.decode().partition(":")
        if kind != "sha256":
            raise OSError(value)
        return value


_worker_channel: dict[str, Any] = {}


def _init_worker(events: Any, cancel: Any, digest: _DigestRelay | None) -> None:
    for signum in STOP_SIGNALS:  # the parent decides; it cancels through the monitor
        signal.signal(signum, signal.SIG_IGN)
    orphaned, busy = threading.Event(), threading.Lock()
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(), orphaned, busy), daemon=True).start()
    _worker_channel.update(events=events, cancel=_Either(cancel, orphaned), digest=digest, busy=busy)


def _exit_when_orphaned(parent: int, orphaned: threading.Event, busy: threading.Lock) -> None:
    """A parent killed outright (SIGKILL, the OOM killer) can neither cancel its workers nor take their results:
    they stop the build at hand through its monitor, clean up and exit, rather than build on, put folders in
    place after the command has ended, or wait for work forever."""
    while os.getppid() == parent:
        time.sleep(0.2)
    orphaned.set()
    with busy:
        os._exit(1)


def _worker(index: int, job: BuildJob) -> TargetStatus:
    with _worker_channel["busy"]:
        return _work(index, job)


def _work(index: int, job: BuildJob) -> TargetStatus:
    if job.model_digest is None:
        job = replace(job, model_digest=_worker_channel["digest"])
    events, last = _worker_channel["events"], [0.0]

    def report(phase: str, done: int, total: int) -> None:
        # TensorRT reports ~1,000 steps per build and the display redraws 10 times a second: send what it
        # can show, not every step (each event costs both cores time that the builds want)
        now = time.monotonic()
        if done == total or now - last[0] >= 0.05:
            last[0] = now
            events.put((index, phase, done, total))

    return run_job(job, report if events is not None else None, _worker_channel["cancel"])


def run_job(job: BuildJob, progress: Callable[[str, int, int], None] | None, cancel: Any) -> TargetStatus:
    """Build one target (or take it from the cache) and replace its folder atomically.

    A cancelled build leaves the previous folder as it was; a failed one replaces it with
    just its build.log, so no stale plan looks like the result of this run.
    """
    started = time.perf_counter()
    try:
        with staging_folder(job.target_dir.parent, job.target_dir.name) as staging:
            status = _produce_in_place(job, staging, progress, cancel, started)
    except OSError as exc:  # no folder could be made next to the target's: this target fails, the others go on
        status = _status(job, "failed", started, errors=[f"could not make a folder in {job.target_dir.parent}: "
                                                         f"{exc.strerror or exc}; check that it is a writable folder"])
    if progress:
        progress(f"{status.status}{' (cache hit)' if status.cache_hit else ''}", 1, 1)
    return status


def _produce_in_place(job: BuildJob, staging: Path, progress: Callable[[str, int, int], None] | None, cancel: Any,
                      started: float) -> TargetStatus:
    """Make the target's files in ``staging``, then put that folder in the target's place."""
    try:
        status = _produce(job, staging, progress, cancel, started)
    except OSError as exc:  # a full disk or a quota: this target fails, the others go on
        _clear(staging, keep="build.log")
        status = _status(job, "failed", started, errors=[f"could not write the engine files: {exc}; free space "
                                                         f"under {job.target_dir.parent} and the build cache"])
    if status.status != "cancelled":
        try:
            replace_dir(job.target_dir, staging)
        except OSError as exc:  # the previous folder is back in place; this target fails, the others go on
            status = _status(job, "failed", started, errors=[f"could not put the engine files in place at "
                                                             f"{job.target_dir}: {exc}"])
    return status


def _produce(job: BuildJob, staging: Path, progress: Callable[[str, int, int], None] | None, cancel: Any,
             started: float) -> TargetStatus:
    cache = BuildCache(job.cache_root)
    if not job.use_cache:
        return _build(job, staging, progress, cancel, started, cache)
    if not job.digest_pending:
        return _from_cache(job, staging, started, cache) or _build(job, staging, progress, cancel, started, cache)
    # The model's digest is still being computed: build meanwhile, and stop the build if the digest
    # then names an engine the cache already has.
    in_cache = threading.Event()

    def watch() -> None:
        try:
            if _cached_entry(cache, job.cache_key):
                in_cache.set()
        except OSError:
            pass  # a digest that failed fails the build where the digest is needed, with its error

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    status = _build(job, staging, progress, _Either(cancel, in_cache), started, cache)
    watcher.join()
    if status.status != "cancelled" or not in_cache.is_set() or (cancel is not None and cancel.is_set()):
        return status
    _clear(staging)
    return _from_cache(job, staging, started, cache) or _build(job, staging, progress, cancel, started, cache)


class _Either:
    """Set when either event is: the user's stop signal and the cache turning out to have the engine, or in a
    worker the parent's cancel and the parent being gone."""

    def __init__(self, first: Any, second: threading.Event) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.second.is_set() or (self.first is not None and self.first.is_set())


def _cached_entry(cache: BuildCache, key: str) -> tuple[Path, EngineRecord] | None:
    """The cache's entry for ``key`` and its record when it is whole; a damaged one (a plan of another size,
    or rewritten in place through a hard link in some OUT folder) is evicted."""
    entry = cache.lookup(key)
    if entry is None:
        return None
    try:
        record = EngineRecord.model_validate_json((entry / "engine.json").read_text())
    except ValueError:  # an engine.json damaged or cut short (ValidationError is a ValueError)
        record = None
    plan = entry / "engine.plan"
    if record and plan.stat().st_size == record.size_bytes and cache.plan_intact(plan, record.sha256):
        return entry, record
    cache.evict(key)
    return None


def _from_cache(job: BuildJob, staging: Path, started: float, cache: BuildCache) -> TargetStatus | None:
    try:
        hit = _cached_entry(cache, job.cache_key)
        if hit is None:
            return None
        entry, record = hit
        for name in ENGINE_FILES:
            if name != "engine.json":
                link_or_copy(entry / name, staging / name)
    except FileNotFoundError:  # the entry went away meanwhile (a cache cleaner, a concurrent eviction): a miss
        _clear(staging)
        return None
    # The entry may have been built for another SKU of the same compute capability, or from another model
    # file or calibration run with the same bytes: the record says what this target was asked for. Its
    # build_seconds stay what the engine took to build (build.json has this run's seconds).
    record = record.model_copy(update={
        "sku": job.sku, "model_sha256": job.model_sha256, "calibration_sha256": job.calibration_sha256,
        "cache_hit": True})
    write_atomic(staging / "engine.json", record.model_dump_json(indent=2).encode())
    return _status(job, "ok", started, cache_hit=True, warnings=_builder_warnings(record.builder_warnings))


def _build(job: BuildJob, staging: Path, progress: Callable[[str, int, int], None] | None, cancel: Any,
           started: float, cache: BuildCache) -> TargetStatus:
    backend = load_backend(job.backend)
    try:
        outcome = backend.build(job.spec, progress, cancel)
    except CompileError as exc:
        return _status(job, "failed", started, errors=[str(exc)])
    (staging / "build.log").write_text("\n".join(outcome.log) + "\n")
    if outcome.plan is None:
        return _status(job, "cancelled" if outcome.cancelled else "failed", started,
                       errors=outcome.errors or ["build failed"])
    mismatch = backend.plan_mismatch(outcome.plan, job.spec.compute_capabilities)
    if mismatch:
        return _status(job, "failed", started, errors=[f"plan header check failed: {mismatch}"])
    try:
        cache_key = job.cache_key  # waits for the model's digest if it is still being computed
        changed = _changed_input(job)
    except OSError as exc:
        return _status(job, "failed", started, errors=[f"could not read the model to hash it: {exc}"])
    if changed:
        return _status(job, "failed", started, errors=[f"{changed} changed while its engine was built, so the plan "
                                                       f"may not be of the model recorded; run compile build again"])
    with ThreadPoolExecutor(1) as pool:  # hash on the second core while the plan is written
        plan_sha = pool.submit(lambda: hashlib.sha256(outcome.plan).hexdigest())
        (staging / "engine.plan").write_bytes(outcome.plan)
        plan_sha = plan_sha.result()
    write_atomic(staging / "layers.json", json.dumps(_layers_document(outcome.layers), indent=2).encode())
    record = EngineRecord(
        sha256=plan_sha,
        size_bytes=len(outcome.plan),
        model_sha256=job.model_sha256,
        built_model_sha256=job.built_sha256,
        calibration_sha256=job.calibration_sha256,
        sku=job.sku,
        compute_capabilities=list(job.spec.compute_capabilities),
        precision=job.precision,
        backend={"name": backend.name, "version": backend.version},
        profiles=list(job.spec.profiles),
        builder_options=job.spec.options(),
        build_seconds=round(outcome.seconds, 3),
        cache_hit=False,
        cache_key=cache_key,
        plan_header=backend.plan_header(outcome.plan),
        builder_warnings=outcome.warnings,
    )
    write_atomic(staging / "engine.json", record.model_dump_json(indent=2).encode())
    warnings = _builder_warnings(outcome.warnings)
    if job.use_cache:
        try:
            cache.store(cache_key, staging, plan_sha)
        except OSError as exc:  # a full cache volume: the engine itself is whole, only the next run rebuilds it
            warnings.append(f"not kept in the build cache {cache.root}: {exc}")
    return _status(job, "ok", started, warnings=warnings)


def _changed_input(job: BuildJob) -> str | None:
    """A model file whose bytes changed since they were hashed, which would leave a plan its recorded digest and
    cache key do not describe. Files are re-read only when their stat moved, and a rewrite with the same bytes
    (concurrent runs preparing the same fp16 model) is no change."""
    for stats, digest in ((job.source_stat, job.model_sha256), (job.built_stat, job.built_model_sha256)):
        moved = changed_since(stats)
        if moved:
            model, *external = (Path(path) for path, _ in stats)
            if finish_model_digest(hash_model_file(model), tuple(external)) != digest:
                return moved[0]
    return None


def _status(job: BuildJob, status: str, started: float, cache_hit: bool = False,
            errors: list[str] | None = None, warnings: list[str] | None = None) -> TargetStatus:
    return TargetStatus(sku=job.sku, precision=job.precision, status=status, path=str(job.target_dir),
                        cache_hit=cache_hit, seconds=round(time.perf_counter() - started, 3), errors=errors or [],
                        warnings=warnings or [])


def _clear(staging: Path, keep: str | None = None) -> None:
    """Remove what a staging folder holds so far (but ``keep``): the files of a result that is not to be."""
    for partial in staging.iterdir():
        if partial.name != keep:
            partial.unlink()


def _builder_warnings(warnings: list[str]) -> list[str]:
    return [f"builder: {warning}" for warning in warnings]


def _layers_document(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """layers.json: the kernels, with how many compute in each precision and how many write each output type."""
    return {"format_version": FORMAT_VERSION, "kernels": len(layers),
            "kernel_precisions": dict(Counter(layer["precision"] for layer in layers if layer["precision"])),
            "output_precisions": dict(Counter(dtype for layer in layers for dtype in layer["output_types"])),
            "layers": layers}


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


