"""inspect's costly part cached: TensorRT's view of a model (a parse) and the profile-limits check (shape inference
per profile) depend only on the model's bytes, the TensorRT edition and version, and the profiles, so they are kept
under that key in the local cache and, when a stage is handed one, the remote cache: a re-release or a fresh CI
runner does neither again. An entry is refused (and made again) unless it names this key and this model."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from compiler.core.files import default_cache_dir, hash_json, read_regular, write_atomic
from compiler.core.profiles import ProfileSet
from compiler.core.records import CacheOutcome
from compiler.inspect.view import TensorRTView

if TYPE_CHECKING:
    from compiler.cache.tier import CacheTier

FORMAT = 1
KIND = "inspections"
FILE = "inspect.json"
MAX_ENTRY_BYTES = 16 << 20
"""An entry is a few KB per thousand nodes; a bigger file is not ours and is ignored."""


class Inspection(BaseModel):
    """One cache entry: TensorRT's view and the profile-limits check's errors (None: no profiles were given)."""

    format_version: int = FORMAT
    key: str
    model_sha256: str
    tensorrt: TensorRTView
    profile_errors: list[str] | None = None


def inspection_key(model_sha256: str, backend: str, version: str, profiles: ProfileSet | None) -> str:
    return hash_json(
        {
            "inspect": FORMAT,
            "model": model_sha256,
            "backend": backend,
            "version": version,
            "profiles": profiles.model_dump(mode="json") if profiles is not None else None,
        }
    )


def _parsed(data: bytes, key: str, model_sha256: str) -> Inspection | None:
    """The entry, or None when it is not one of this key and model."""
    try:
        found = Inspection.model_validate_json(data) if len(data) <= MAX_ENTRY_BYTES else None
    except (ValidationError, ValueError):
        return None
    return found if found and found.key == key and found.model_sha256 == model_sha256 else None


def _local(key: str, root: Path | None) -> Path:
    return (root or default_cache_dir()) / KIND / f"{key}.json"


def cached(
    key: str, model_sha256: str, shared: CacheTier | None = None, root: Path | None = None
) -> tuple[Inspection | None, CacheOutcome]:
    """The entry from the local cache (``root``, else the default: ``hit``), else from ``shared``'s remote cache
    (``remote``, then kept locally), else None and the miss's reason (with a warning line when a remote entry was
    refused)."""
    try:
        found = _parsed(read_regular(_local(key, root), MAX_ENTRY_BYTES), key, model_sha256)  # a FIFO cannot block us
    except OSError:  # missing or unreadable: a miss
        found = None
    if found is not None:
        return found, CacheOutcome(source="hit")
    if shared is None or shared.remote is None:
        return None, CacheOutcome(source="miss", reason="not in the local cache")
    with tempfile.TemporaryDirectory(prefix="compile-inspect-") as folder:
        outcome = shared.fetch(KIND, key, Path(folder))
        if outcome.source != "remote":
            return None, outcome
        data = (Path(folder) / FILE).read_bytes()
    found = _parsed(data, key, model_sha256)
    if found is None:
        return None, shared.refuse(KIND, key, "its inspect.json is of another model or key")
    _keep(key, data, root)
    return found, outcome


def store(entry: Inspection, shared: CacheTier | None = None, root: Path | None = None) -> str | None:
    """Keep what was made in the local cache and send it to the remote one: a warning line when the remote could
    not take it (a full or read-only local cache costs only the reuse)."""
    data = entry.model_dump_json().encode()
    _keep(entry.key, data, root)
    if shared is None or shared.remote is None:
        return None
    with tempfile.TemporaryDirectory(prefix="compile-inspect-") as folder:
        (Path(folder) / FILE).write_bytes(data)
        return shared.send(KIND, entry.key, Path(folder), [FILE])


def _keep(key: str, data: bytes, root: Path | None) -> None:
    try:
        _local(key, root).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(_local(key, root), data)
    except OSError:
        pass
