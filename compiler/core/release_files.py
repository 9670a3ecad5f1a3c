"""Every blob a release names, each with the file name it is known by: the one list that ``compile verify``,
``compile ls --verify`` and the OCI store's layers are made from, so no blob of a release (its golden inputs
included) is outside any of them."""

from __future__ import annotations

from typing import NamedTuple

from compiler.core.records import GOLDEN_FILE, BlobRef, ReleaseEngine, ReleaseManifest


class ReleaseBlob(NamedTuple):
    """One blob of a release: its file name (unique within the release), what it is (``plan``, ``layers``,
    ``check``, ``golden``), and the engine it belongs to (plans and layers.json)."""

    title: str
    role: str
    ref: BlobRef
    engine: ReleaseEngine | None = None


def release_blobs(manifest: ReleaseManifest) -> list[ReleaseBlob]:
    """``rtx-4090-fp16.plan``, ``rtx-4090-fp16.layers.json`` for each engine, ``check.json`` (``check-1.json``... for
    a release of several build folders), ``golden.npz``."""
    found = []
    for engine in manifest.content.engines:
        stem = f"{engine.sku}-{engine.precision.value}"
        found.append(ReleaseBlob(f"{stem}.plan", "plan", engine.plan, engine))
        if engine.layers is not None:
            found.append(ReleaseBlob(f"{stem}.layers.json", "layers", engine.layers, engine))
    found += [
        ReleaseBlob(f"check-{i}.json" if i else "check.json", "check", report)
        for i, report in enumerate(manifest.check_reports)
    ]
    if manifest.content.golden is not None:
        found.append(ReleaseBlob(GOLDEN_FILE, "golden", manifest.content.golden.blob))
    return found
