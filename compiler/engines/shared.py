"""The build cache's remote tier (:mod:`compiler.cache.remote`) for engines and prepared (FP16) models: a local miss
asks the remote before building, an entry taken from it goes into the local cache whole and verified, and what is
built is sent there. The local cache itself (:mod:`compiler.engines.cache`) knows nothing of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.cache.explain import describe, engine_candidates, engine_material, nearest, profile_changes
from compiler.cache.remote import Damaged, EntryIndex, RemoteCache, open_remote
from compiler.core.errors import CompileError
from compiler.core.files import hash_json, staging_folder
from compiler.core.records import CacheOutcome, EngineRecord
from compiler.data.protobuf_inputs import skim_inputs
from compiler.engines.cache import ENGINE_FILES, BuildCache

PREPARED_FP16 = "fp16.onnx"


def explain_engine(job: Any, cache_root: Path) -> str:
    """``--explain``'s line for an engine the caches lack (``job``: its :class:`~compiler.engines.jobs.BuildJob`):
    what changed against the nearest cached engine."""
    from types import SimpleNamespace

    wanted = engine_material(
        SimpleNamespace(
            model_sha256=job.model_sha256,
            profiles=list(job.spec.profiles),
            compute_capabilities=job.spec.compute_capabilities,
            precision=job.precision,
            calibration_sha256=job.calibration_sha256,
            builder_options=job.spec.options(),
            backend={"name": job.backend, "version": job.key_material["backend"][1]},
            built_model_sha256=job.built_sha256,
        )
    )
    candidates = engine_candidates(cache_root)
    if job.remote_cache:
        candidates += open_remote(job.remote_cache).materials("engines")
    nearest_one = nearest(wanted, candidates)
    details = {}
    if nearest_one is not None:
        cached = dict(candidates)[nearest_one[0]]
        details["profiles"] = profile_changes(wanted["profiles"], cached["profiles"])
        details["backend version"] = f"{cached['backend version']} -> {wanted['backend version']}"
        details["builder options"] = f"{cached['builder options']} -> {wanted['builder options']}"
    return describe("engine", wanted, candidates, details)


def fetch_engine(job: Any, cache: BuildCache) -> tuple[CacheOutcome, str | None]:
    """Fill the local cache's entry for ``job`` (its :class:`~compiler.engines.jobs.BuildJob`) from the remote:
    ``remote`` when it is there now, else a miss with why; and the warning line of a damaged entry or a remote
    that did not answer."""
    key = job.cache_key
    remote = open_remote(job.remote_cache)
    try:
        header_reader = load_backend(job.backend)
    except CompileError as exc:  # no backend to read the plan's header with: nothing from the remote is used
        return CacheOutcome(source="miss", reason=f"the plan's header cannot be checked here ({exc})"), None
    try:
        with staging_folder(cache.entry(key).parent, f"remote-{key[:12]}") as staging:
            index = remote.fetch("engines", key, staging / "entry")
            if index is None:
                return CacheOutcome(source="miss", reason="in neither the local nor the remote cache"), None
            record = _engine_record(remote, key, staging / "entry", index)
            _check_plan_header(remote, key, staging / "entry" / "engine.plan", header_reader, job.spec)
            cache.store(key, staging / "entry", record.sha256)
    except Damaged as exc:
        return CacheOutcome(source="miss", reason="the remote entry was damaged"), str(exc)
    except CompileError as exc:
        return CacheOutcome(source="miss", reason="the remote cache did not answer"), remote.unreachable(
            "engines", key, exc
        )
    return CacheOutcome(source="remote"), None


def _engine_record(remote: RemoteCache, key: str, folder: Path, index: EntryIndex) -> EngineRecord:
    """The entry's engine.json, refused unless it is whole and describes this very key and plan."""
    missing = [name for name in ENGINE_FILES if name not in index.files or not (folder / name).is_file()]
    if missing:
        raise remote.damaged("engines", key, f"it lacks {missing[0]}")
    try:
        record = EngineRecord.model_validate_json((folder / "engine.json").read_bytes())
    except (ValidationError, ValueError):
        raise remote.damaged("engines", key, "its engine.json is not an engine record") from None
    if (
        record.cache_key != key
        or record.sha256 != index.files["engine.plan"].sha256
        or record.size_bytes != (folder / "engine.plan").stat().st_size
    ):
        raise remote.damaged("engines", key, "its engine.json describes another engine than its key and plan")
    return record


def _check_plan_header(remote: RemoteCache, key: str, plan: Path, backend: TensorRTBackend, spec: BuildSpec) -> None:
    """Refuse a plan whose own header is not of this runtime version and these compute capabilities: engine.json
    and the index are whatever the cache's writer made them, the header is what a runtime will read. The check is
    the one every build's plan passes (:meth:`TensorRTBackend.plan_mismatch`)."""
    with open(plan, "rb") as handle:
        head = handle.read(backend.plan_header_bytes)
    mismatch = backend.plan_mismatch(head, spec.compute_capabilities)
    if mismatch:
        raise remote.damaged("engines", key, f"its engine.plan is not for this target: {mismatch}")


def send_engine(uri: str, key: str, entry: Path, record: EngineRecord) -> str | None:
    """Send a local cache entry just built; a warning line when the remote could not take it."""
    return open_remote(uri).send_quietly(
        "engines",
        key,
        entry,
        list(ENGINE_FILES),
        material=engine_material(record),
        digests={"engine.plan": record.sha256},
    )


def prepared_key(model_sha256: str) -> str:
    return hash_json({"prepared": "fp16", "model": model_sha256})


def fetch_prepared(uri: str, source: Path, model_sha256: str, converted: Path) -> bool:
    """The FP16 conversion of the model ``source`` from the remote, renamed into its place in the local cache when
    whole and a model of ``source``'s inputs (an entry of other bytes would stay in the local cache and fail every
    build after)."""
    remote = open_remote(uri)
    key = prepared_key(model_sha256)
    with staging_folder(converted.parent, "remote-fp16") as folder:
        try:
            if remote.fetch("prepared", key, folder) is None:
                return False
            if not _same_inputs(source, folder / PREPARED_FP16):
                raise remote.damaged(
                    "prepared", key, f"its {PREPARED_FP16} is no model with the inputs of {source.name}"
                )
            (folder / PREPARED_FP16).replace(converted)
            return True
        except Damaged:
            return False
        except CompileError as exc:
            remote.unreachable("prepared", key, exc)
            return False


def _same_inputs(source: Path, fetched: Path) -> bool:
    """Whether ``fetched`` is an ONNX model (read by the safe loader) whose inputs are ``source``'s. Only that can
    be known without converting again: that it is the conversion is the cache writer's word (docs/ci-cache.md)."""
    from compiler.data.model import load_model

    try:
        theirs = load_model(fetched, infer_shapes=False, check=False, digest=False).input_dims()
        ours = skim_inputs(source) or load_model(source, infer_shapes=False, check=False, digest=False).input_dims()
    except CompileError:
        return False
    return theirs == ours


def send_prepared(uri: str, model_sha256: str, converted: Path) -> None:
    open_remote(uri).send_quietly("prepared", prepared_key(model_sha256), converted.parent, [converted.name])
