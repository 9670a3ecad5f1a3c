"""The build cache's remote tier for engines and prepared (FP16) models, through the one reuse protocol
(:class:`compiler.core.reuse.Reuse`): a local miss asks the remote before building, an entry taken from it goes
into the local cache whole and verified, and what is built is sent there. The local cache itself
(:mod:`compiler.engines.cache`) knows nothing of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.cache.explain import describe, engine_candidates, engine_material, nearest, profile_changes
from compiler.cache.remote import open_remote
from compiler.cache.reuse import open_tier
from compiler.core.errors import CompileError
from compiler.core.files import hash_json, staging_folder
from compiler.core.records import CacheOutcome, EngineRecord
from compiler.core.reuse import Refused, Reuse
from compiler.data.protobuf_inputs import skim_inputs
from compiler.engines.cache import ENGINE_FILES, BuildCache

PREPARED_FP16 = "fp16.onnx"


def _reuse(uri: str, kind: str, key: str) -> Reuse:
    return Reuse(open_tier(uri), kind, key)


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


def fetch_engine(job: Any, cache: BuildCache) -> CacheOutcome:
    """Fill the local cache's entry for ``job`` (its :class:`~compiler.engines.jobs.BuildJob`) from the remote:
    ``remote`` when it is there now, else a miss with why (and the warning line of a damaged entry or a remote
    that did not answer)."""
    key = job.cache_key
    try:
        header_reader = load_backend(job.backend)
    except CompileError as exc:  # no backend to read the plan's header with: nothing from the remote is used
        return CacheOutcome(source="miss", reason=f"the plan's header cannot be checked here ({exc})")
    _, outcome = _reuse(job.remote_cache, "engines", key).fetch(
        lambda folder, digests: _keep_engine(folder, digests, key, cache, header_reader, job.spec),
        staging=lambda: _entry_staging(cache.entry(key).parent, f"remote-{key[:12]}"),
    )
    return outcome


@contextmanager
def _entry_staging(parent: Path, name: str) -> Iterator[Path]:
    """A folder for the entry inside a staging folder next to the cache's entries: the cache renames it whole."""
    with staging_folder(parent, name) as staging:
        yield staging / "entry"


def _keep_engine(
    folder: Path, digests: dict[str, str], key: str, cache: BuildCache, backend: TensorRTBackend, spec: BuildSpec
) -> EngineRecord:
    """The fetched entry put in the local cache, refused unless it is whole, its engine.json describes this very
    key and plan, and the plan's own header is of this runtime and these compute capabilities."""
    record = _engine_record(folder, digests, key)
    _check_plan_header(folder / "engine.plan", backend, spec)
    cache.store(key, folder, record.sha256)
    return record


def _engine_record(folder: Path, digests: dict[str, str], key: str) -> EngineRecord:
    """The entry's engine.json, refused unless it is whole and describes this very key and plan."""
    missing = [name for name in ENGINE_FILES if name not in digests or not (folder / name).is_file()]
    if missing:
        raise Refused(f"it lacks {missing[0]}")
    try:
        record = EngineRecord.model_validate_json((folder / "engine.json").read_bytes())
    except (ValidationError, ValueError):
        raise Refused("its engine.json is not an engine record") from None
    if (
        record.cache_key != key
        or record.sha256 != digests["engine.plan"]
        or record.size_bytes != (folder / "engine.plan").stat().st_size
    ):
        raise Refused("its engine.json describes another engine than its key and plan")
    return record


def _check_plan_header(plan: Path, backend: TensorRTBackend, spec: BuildSpec) -> None:
    """Refuse a plan whose own header is not of this runtime version and these compute capabilities: engine.json
    and the index are whatever the cache's writer made them, the header is what a runtime will read. The check is
    the one every build's plan passes (:meth:`TensorRTBackend.plan_mismatch`)."""
    with open(plan, "rb") as handle:
        head = handle.read(backend.plan_header_bytes)
    mismatch = backend.plan_mismatch(head, spec.compute_capabilities)
    if mismatch:
        raise Refused(f"its engine.plan is not for this target: {mismatch}")


def send_engine(uri: str, key: str, entry: Path, record: EngineRecord) -> str | None:
    """Send a local cache entry just built; a warning line when the remote could not take it."""
    return _reuse(uri, "engines", key).send(
        entry, list(ENGINE_FILES), engine_material(record), {"engine.plan": record.sha256}
    )


def prepared_key(model: tuple[str, int]) -> str:
    """The entry of a model's FP16 conversion: the model's digest and the conversion's version."""
    return hash_json({"prepared": "fp16", "model": model[0], "conversion": model[1]})


def fetch_prepared(uri: str, source: Path, model: tuple[str, int], converted: Path) -> bool:
    """The FP16 conversion of the model ``source`` from the remote, renamed into its place in the local cache when
    whole and a model of ``source``'s inputs (an entry of other bytes would stay in the local cache and fail every
    build after)."""

    def keep(folder: Path, _: dict[str, str]) -> bool:
        if not _same_inputs(source, folder / PREPARED_FP16):
            raise Refused(f"its {PREPARED_FP16} is no model with the inputs of {source.name}")
        (folder / PREPARED_FP16).replace(converted)
        return True

    found, _ = _reuse(uri, "prepared", prepared_key(model)).fetch(
        keep, staging=lambda: staging_folder(converted.parent, "remote-fp16")
    )
    return found is not None


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


def send_prepared(uri: str, model: tuple[str, int], converted: Path) -> None:
    _reuse(uri, "prepared", prepared_key(model)).send(converted.parent, [converted.name])
