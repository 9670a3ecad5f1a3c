"""TensorRT's view of a model kept by key, with the profile-limits check: a parse and shape inference per profile
depend only on the model's bytes, the TensorRT edition and version, and the profiles, so they are kept under that
key in the local cache and, when the caller hands a remote tier, the remote cache: a re-release or a fresh CI runner
does neither again. An entry is refused (and made again) unless it names this key and this model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from compiler.backends import installed_versions
from compiler.backends.view import TensorRTView, parse_view
from compiler.core.files import default_cache_dir, hash_json, read_regular, write_atomic
from compiler.core.profiles import ProfileSet
from compiler.core.records import CacheOutcome
from compiler.core.reuse import Refused, RemoteTier, Reuse, temporary_folder, with_warning

if TYPE_CHECKING:
    from compiler.data.model import OnnxModel

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


def tensorrt_view(model: OnnxModel, backend_name: str) -> TensorRTView:
    """TensorRT's view of the model, from the local cache when this TensorRT version has parsed this very model
    (by digest) before: a re-release then skips the parse."""
    return inspected(model, backend_name, None, lambda: None)[0].tensorrt


def inspected(
    model: OnnxModel,
    backend_name: str,
    profiles: ProfileSet | None,
    limits: Callable[[], list[str] | None],
    tier: RemoteTier | None = None,
    root: Path | None = None,
) -> tuple[Inspection, CacheOutcome]:
    """TensorRT's view and the profile-limits check (``limits``) from the local cache (``root``, else the default)
    or ``tier``, else made and kept in both. Raises the backend's error when it cannot parse (not installed)."""
    version = installed_versions().get(backend_name)
    key = inspection_key(model.sha256, backend_name, str(version), profiles)
    reuse = Reuse(tier, KIND, key)
    outcome = CacheOutcome(source="miss", reason=f"{backend_name} is not installed")
    if version is not None:
        found, outcome = reuse.take(
            lambda: _parsed(_local(key, root), key, model.sha256),
            lambda folder, _: _fetched(folder, key, model.sha256, root),
            staging=lambda: temporary_folder("compile-inspect-"),
        )
        if found is not None:
            return found, outcome
    errors = limits()
    view = (
        inspected(model, backend_name, None, lambda: None, None, root)[0].tensorrt
        if profiles is not None
        else parse_view(model, backend_name)
    )
    entry = Inspection(key=key, model_sha256=model.sha256, tensorrt=view, profile_errors=errors)
    if version is not None and view.version == version:
        outcome = with_warning(outcome, _store(entry, reuse, root))
    return entry, outcome


def _parsed(path: Path, key: str, model_sha256: str) -> Inspection | None:
    """The entry at ``path``, or None when it is missing, unreadable or not one of this key and model."""
    try:
        data = read_regular(path, MAX_ENTRY_BYTES)  # a FIFO cannot block us
        found = Inspection.model_validate_json(data) if len(data) <= MAX_ENTRY_BYTES else None
    except (OSError, ValidationError, ValueError):
        return None
    return found if found and found.key == key and found.model_sha256 == model_sha256 else None


def _fetched(folder: Path, key: str, model_sha256: str, root: Path | None) -> Inspection:
    """The remote's entry, kept locally, refused unless it is one of this key and model."""
    found = _parsed(folder / FILE, key, model_sha256)
    if found is None:
        raise Refused(f"its {FILE} is of another model or key")
    _keep(key, (folder / FILE).read_bytes(), root)
    return found


def _store(entry: Inspection, reuse: Reuse, root: Path | None) -> str | None:
    """Keep what was made in the local cache and send it to the remote one: a warning line when the remote could
    not take it (a full or read-only local cache costs only the reuse)."""
    data = entry.model_dump_json().encode()
    _keep(entry.key, data, root)
    if not reuse.remote:
        return None
    with temporary_folder("compile-inspect-") as folder:
        (folder / FILE).write_bytes(data)
        return reuse.send(folder, [FILE])


def _local(key: str, root: Path | None) -> Path:
    return (root or default_cache_dir()) / KIND / f"{key}.json"


def _keep(key: str, data: bytes, root: Path | None) -> None:
    try:
        _local(key, root).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(_local(key, root), data)
    except OSError:
        pass
