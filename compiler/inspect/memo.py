"""A re-inspection of a model that did not change: the whole report remembered (:mod:`compiler.core.memo`) by the
model file's stat, the path it was named by, the profiles' bytes and the TensorRT edition and version installed, and
kept only while its external data files keep their stat too. A re-release then inspects with a stat and a small
read: no onnx, numpy or TensorRT is imported and no model parsed (the model's digest is in the remembered report).
Only reports without a problem are remembered; a build check (a real build) and renamed dims are made afresh."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from compiler.backends import default_backend
from compiler.core.errors import CompileError
from compiler.core.files import NotRegularFile, default_cache_dir, read_regular, stat_key
from compiler.core.memo import memo_key, recalled, remember, unchanged
from compiler.core.records import CacheOutcome
from compiler.inspect.report import InspectReport

if TYPE_CHECKING:
    from compiler.core.reuse import RemoteTier
    from compiler.data.dims import DimRenames

FORMAT = 1
KIND = "inspect-reports"
MAX_PROFILES_BYTES = 1 << 20
"""A profiles file is a few KB; a bigger one is inspected afresh every time (its loader says what is wrong)."""


class Remembered(BaseModel):
    key: str
    files: list[tuple[str, list[Any]]]
    """The model's external data files, with their stat when the report was made."""
    report: InspectReport


def inspect_model(
    model_path: str | Path,
    profiles_path: str | Path | None = None,
    backend: str | None = None,
    build_sku: str | None = None,
    tier: RemoteTier | None = None,
    cache_dir: Path | None = None,
    dims: DimRenames | None = None,
) -> InspectReport:
    """:func:`compiler.inspect.summary.inspect_model`, answered from the memo when nothing it reads changed."""
    root = (cache_dir or default_cache_dir()) / KIND
    key = None if build_sku is not None or dims else _key(Path(model_path), profiles_path, backend)
    found = recalled(root, key, Remembered) if key is not None else None
    if found is not None and unchanged(found.files):
        return found.report.model_copy(update={"cache": CacheOutcome(source="hit")})
    from compiler.inspect import summary

    report = summary.inspect_model(model_path, profiles_path, backend, build_sku, tier, cache_dir, dims)
    if key is not None and report.problem is None and report.tensorrt.version is not None:
        files = [(f, stat_key(Path(f))) for f in report.external_files]
        remember(root, key, Remembered(key=key, files=files, report=report))
    return report


def _key(model: Path, profiles_path: str | Path | None, backend: str | None) -> str | None:
    """The memo's key for these inputs as they are now (taken before anything reads them); None when one of them
    cannot be keyed (not a regular file, no TensorRT installed): the inspection then says why."""
    try:
        backend = backend or default_backend()
        profiles = None
        if profiles_path is not None:
            data = read_regular(Path(profiles_path), MAX_PROFILES_BYTES)
            if len(data) > MAX_PROFILES_BYTES:
                return None
            profiles = hashlib.sha256(data).hexdigest()
    except (OSError, NotRegularFile, CompileError):
        return None
    return memo_key(KIND, [model], FORMAT, str(model), str(profiles_path), profiles, backend)
