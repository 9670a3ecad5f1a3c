"""Producing one target of `compile build`: a cache hit or a build, made in a staging folder that replaces the
target's folder only when whole, so a folder holding ``engine.plan`` is always a finished, verified build.

The build itself runs wherever the caller's ``build`` function puts it (:mod:`compiler.engines.workers` runs it in a
child process, :mod:`compiler.backends.isolated`, so a builder that crashes fails its target and nothing else).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compiler.backends.isolated import BuiltPlan, Either
from compiler.core.digest import finish_model_digest, hash_model_file
from compiler.core.errors import CompileError
from compiler.core.files import changed_since, copy_file, replace_dir, staging_folder, write_atomic
from compiler.core.profiles import inconsistent_profiles
from compiler.core.records import CacheOutcome, EngineRecord, Kernel, LayersRecord, Progress, Status, TargetStatus
from compiler.core.reuse import with_warning
from compiler.engines.cache import ENGINE_FILES, BuildCache
from compiler.engines.jobs import BuildJob
from compiler.engines.remote_tier import explain_engine, fetch_engine, send_engine

Build = Callable[[BuildJob, Path, Progress | None, Any], BuiltPlan]
"""(job, staging folder, progress, cancel) -> the build's outcome, its files written into the staging folder."""


def produce(job: BuildJob, build: Build, progress: Progress | None, cancel: Any) -> TargetStatus:
    """Build one target (or take it from the cache) and replace its folder atomically.

    A cancelled build leaves the previous folder as it was; a failed one replaces it with just its build.log,
    so no stale plan looks like the result of this run.
    """
    started = time.perf_counter()
    try:
        with staging_folder(job.target_dir.parent, job.target_dir.name) as staging:
            status = _produce_in_place(job, build, staging, progress, cancel, started)
    except OSError as exc:  # no folder could be made next to the target's: this target fails, the others go on
        status = _status(
            job,
            Status.FAILED,
            started,
            errors=[
                f"could not make a folder in {job.target_dir.parent}: {exc.strerror or exc}; check that it is a "
                f"writable folder"
            ],
        )
    if progress:
        progress(f"{status.status}{' (cache hit)' if status.cache_hit else ''}", 1, 1)
    return status


def _produce_in_place(
    job: BuildJob, build: Build, staging: Path, progress: Progress | None, cancel: Any, started: float
) -> TargetStatus:
    """Make the target's files in ``staging``, then put that folder in the target's place."""
    try:
        status = _produce(job, build, staging, progress, cancel, started)
    except OSError as exc:  # a full disk or a quota: this target fails, the others go on
        _clear(staging, keep="build.log")
        status = _status(
            job,
            Status.FAILED,
            started,
            errors=[
                f"could not write the engine files: {exc}; free space under {job.target_dir.parent} and the build cache"
            ],
        )
    if status.status != Status.CANCELLED:
        try:
            replace_dir(job.target_dir, staging)
        except OSError as exc:  # the previous folder is back in place; this target fails, the others go on
            status = _status(
                job,
                Status.FAILED,
                started,
                errors=[f"could not put the engine files in place at {job.target_dir}: {exc}"],
            )
    return status


def _produce(
    job: BuildJob, build: Build, staging: Path, progress: Progress | None, cancel: Any, started: float
) -> TargetStatus:
    if job.refusal:  # nothing to build: the target fails with why, and only its build.log says so
        (staging / "build.log").write_text(job.refusal + "\n")
        return _unbuilt(job, staging, Status.FAILED, started, [job.refusal])
    cache = BuildCache(job.cache_root)
    if not job.use_cache:
        return _build(job, build, staging, progress, cancel, started, cache)
    if not job.digest_pending or job.remote_cache:  # a remote answers in far less than a build takes
        found, miss = _from_caches(job, staging, started, cache)
        return found or _build(job, build, staging, progress, cancel, started, cache, miss)
    # The model's digest is still being computed: build meanwhile, and stop the build if the digest
    # then names an engine the cache already has.
    in_cache = threading.Event()

    def watch() -> None:
        try:
            if _cached_entry(cache, job.cache_key):
                in_cache.set()
        except (OSError, CompileError):
            pass  # a digest that failed fails the build where the digest is needed, with its error

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    status = _build(job, build, staging, progress, Either(cancel, in_cache), started, cache)
    watcher.join()
    if status.status != Status.CANCELLED or not in_cache.is_set() or (cancel is not None and cancel.is_set()):
        return status
    _clear(staging)
    return _from_cache(job, staging, started, cache) or _build(job, build, staging, progress, cancel, started, cache)


def _cached_entry(cache: BuildCache, key: str) -> tuple[Path, EngineRecord] | None:
    """The cache's entry for ``key`` and its record when it is whole; a damaged one (a plan of another size,
    or rewritten in place in the cache) is evicted."""
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


def _from_caches(
    job: BuildJob, staging: Path, started: float, cache: BuildCache
) -> tuple[TargetStatus | None, CacheOutcome]:
    """The target from the local cache, else from the remote one (through the local cache); else why it missed."""
    hit = _from_cache(job, staging, started, cache)
    if hit is not None:
        return hit.model_copy(update={"cache": CacheOutcome(source="hit")}), CacheOutcome(source="hit")
    if job.remote_cache is None:
        return None, _missed(job, cache, "not in the local cache")
    outcome = fetch_engine(job, cache)
    if outcome.source == "remote" and (hit := _from_cache(job, staging, started, cache)) is not None:
        return hit.model_copy(update={"cache": outcome}), outcome
    return None, with_warning(_missed(job, cache, outcome.reason or ""), outcome.warning)


def _missed(job: BuildJob, cache: BuildCache, reason: str) -> CacheOutcome:
    """A miss, with ``--explain`` the input of the key that changed against the nearest cached engine."""
    if job.explain:
        reason = explain_engine(job, cache.root) or reason
    return CacheOutcome(source="miss", reason=reason)


def _from_cache(job: BuildJob, staging: Path, started: float, cache: BuildCache) -> TargetStatus | None:
    try:
        hit = _cached_entry(cache, job.cache_key)
        if hit is None:
            return None
        entry, record = hit
        for name in ENGINE_FILES:
            if name not in ("engine.json", "build.log"):
                copy_file(entry / name, staging / name)  # a copy (reflink): OUT and the cache never share a file
        # The log names the model its build parsed, perhaps another run's calibration folder since replaced: say
        # this run's too, where check looks for the model the engine was built from (same bytes, by the key).
        write_atomic(
            staging / "build.log",
            (entry / "build.log").read_bytes()
            + (
                f"[INFO] compile: taken from the build cache; this run's model (the same bytes):\n"
                f"[INFO] Input filename:   {job.spec.model_path}\n"
            ).encode(),
        )
    except FileNotFoundError:  # the entry went away meanwhile (a cache cleaner, a concurrent eviction): a miss
        _clear(staging)
        return None
    # The entry may have been built for another SKU of the same compute capability, or from another model
    # file or calibration run with the same bytes: the record says what this target was asked for. Its
    # build_seconds stay what the engine took to build (build.json has this run's seconds).
    record = record.model_copy(
        update={
            "sku": job.sku,
            "model_sha256": job.model_sha256,
            "calibration_sha256": job.calibration_sha256,
            "excluded": list(job.excluded),
            "cache_hit": True,
        }
    )
    write_atomic(staging / "engine.json", record.model_dump_json(indent=2).encode())
    warnings = _builder_warnings(record.builder_warnings) + _keep_model(job, cache)
    return _status(job, Status.OK, started, cache_hit=True, warnings=warnings)


def _build(
    job: BuildJob,
    build: Build,
    staging: Path,
    progress: Progress | None,
    cancel: Any,
    started: float,
    cache: BuildCache,
    miss: CacheOutcome | None = None,
) -> TargetStatus:
    built = build(job, staging, progress, cancel)
    if built.status != Status.OK:
        return _unbuilt(job, staging, built.status, started, built.errors or ["build failed"])
    refusal = inconsistent_profiles(built.warnings)
    if refusal:
        return _unbuilt(job, staging, Status.FAILED, started, [refusal], refused=True)
    try:
        cache_key = job.cache_key  # waits for the model's digest if it is still being computed
        changed = _changed_input(job)
    except OSError as exc:
        return _unbuilt(job, staging, Status.FAILED, started, [f"could not read the model to hash it: {exc}"])
    if changed:
        return _unbuilt(
            job,
            staging,
            Status.FAILED,
            started,
            [
                f"{changed} changed while its engine was built, so the plan may not be of the model recorded; run "
                f"compile build again"
            ],
        )
    write_atomic(staging / "layers.json", layers_record(built.layers).model_dump_json(indent=2).encode())
    record = EngineRecord(
        sha256=built.sha256,
        size_bytes=built.size_bytes,
        model_sha256=job.model_sha256,
        built_model_sha256=job.built_sha256,
        calibration_sha256=job.calibration_sha256,
        excluded=list(job.excluded),
        sku=job.sku,
        compute_capabilities=list(job.spec.compute_capabilities),
        precision=job.precision,
        backend={"name": job.backend, "version": built.backend_version},
        profiles=list(job.spec.profiles),
        builder_options=job.spec.options(),
        build_seconds=round(built.seconds, 3),
        cache_hit=False,
        cache_key=cache_key,
        plan_header=built.plan_header,
        builder_warnings=built.warnings,
    )
    write_atomic(staging / "engine.json", record.model_dump_json(indent=2).encode())
    warnings = _builder_warnings(built.warnings)
    if miss is not None and miss.warning:
        warnings.append(miss.warning)
    if job.use_cache:
        try:
            cache.store(cache_key, staging, built.sha256)
        except OSError as exc:  # a full cache volume: the engine itself is whole, only the next run rebuilds it
            warnings.append(f"not kept in the build cache {cache.root}: {exc}")
        warnings += _keep_model(job, cache)
        if job.remote_cache:
            warnings += filter(None, [send_engine(job.remote_cache, cache_key, staging, record)])
    status = _status(job, Status.OK, started, warnings=warnings)
    return status.model_copy(update={"cache": miss.model_copy(update={"warning": None}) if miss else None})


def _keep_model(job: BuildJob, cache: BuildCache) -> list[str]:
    """The prepared model (FP16, Q/DQ) kept in the cache by digest, for check to find; a warning if it cannot be."""
    if not job.use_cache or job.prepared_sha256 is None or not job.built_stat:
        return []
    try:
        cache.keep_model(job.prepared_sha256, [Path(path) for path, _ in job.built_stat])
    except OSError as exc:
        return [f"the {job.precision} model was not kept in the build cache {cache.root}: {exc}"]
    return []


def _unbuilt(
    job: BuildJob, staging: Path, status: Status, started: float, errors: list[str], refused: bool = False
) -> TargetStatus:
    """A build that yields no engine: only its build.log stays, so no plan of it looks like a result."""
    _clear(staging, keep="build.log")
    return _status(job, status, started, errors=errors, refused=refused)


def layers_record(layers: list[Kernel]) -> LayersRecord:
    """layers.json: the kernels, with how many compute in each precision and how many write each output type."""
    return LayersRecord(
        kernels=len(layers),
        kernel_precisions=dict(Counter(layer.precision or "none" for layer in layers)),
        output_precisions=dict(Counter(dtype for layer in layers for dtype in layer.output_types)),
        layers=layers,
    )


def _changed_input(job: BuildJob) -> str | None:
    """A model file whose bytes changed since they were hashed, which would leave a plan its recorded digest and
    cache key do not describe. Files are re-read only when their stat moved, and a rewrite with the same bytes
    (concurrent runs preparing the same fp16 model) is no change."""
    for stats, digest in ((job.source_stat, job.model_sha256), (job.built_stat, job.prepared_sha256)):
        moved = changed_since(stats)
        if moved:
            model, *external = (Path(path) for path, _ in stats)
            if finish_model_digest(hash_model_file(model), tuple(external)) != digest:
                return moved[0]
    return None


def _status(
    job: BuildJob,
    status: Status,
    started: float,
    cache_hit: bool = False,
    errors: list[str] | None = None,
    warnings: list[str] | None = None,
    refused: bool = False,
) -> TargetStatus:
    return TargetStatus(
        sku=job.sku,
        precision=job.precision,
        status=status,
        path=str(job.target_dir),
        cache_hit=cache_hit,
        seconds=round(time.perf_counter() - started, 3),
        errors=errors or [],
        warnings=warnings or [],
        refused=refused,
    )


def failed(job: BuildJob, error: str, status: Status = Status.FAILED) -> TargetStatus:
    """A target that ended before anything was made for it."""
    return _status(job, status, time.perf_counter(), errors=[error])


def _clear(staging: Path, keep: str | None = None) -> None:
    """Remove what a staging folder holds so far (but ``keep``): the files of a result that is not to be."""
    for partial in staging.iterdir():
        if partial.name != keep:
            partial.unlink()


_INT64_BINDING = re.compile(r"Make sure input \S+ has Int64 binding")
"""What the ONNX parser says of every int64 input: those inputs are int64 by design (token ids) and TensorRT-RTX
binds them as such, so it is kept in build.log and engine.json but not repeated to the user."""


def _builder_warnings(warnings: list[str]) -> list[str]:
    return [f"builder: {warning}" for warning in warnings if not _INT64_BINDING.search(warning)]
