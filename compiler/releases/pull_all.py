"""``compile pull --all``: every file of a release into one folder, each verified against the manifest, with the
release's OpenSSF model_signing signature beside them (``model.sig``) when it has one, so that::

    compile pull --all digits@1.0.0 --store ./artifacts --out digits-1.0.0
    model_signing verify key --signature digits-1.0.0/model.sig --public_key release.pub digits-1.0.0

verifies the folder with tools nobody here wrote (docs/provenance.md). The layout is
:func:`compiler.releases.model_signature.layout`: the release's file names, flat.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.files import default_cache_dir, write_atomic
from compiler.core.options import PullOptions
from compiler.core.release_files import release_blobs
from compiler.core.text import and_more, printable
from compiler.releases.fetch import fetch_verified, partial_prefix, resolve_trusted
from compiler.releases.model_signature import KIND, SIGNATURE_FILE
from compiler.releases.pull import release_warnings
from compiler.releases.verify import attachment_within_limit
from compiler.stores import Store, open_store
from compiler.stores.base import Ref


class PulledFile(BaseModel):
    name: str
    sha256: str
    size_bytes: int


class PullAllResult(BaseModel):
    release: str
    version: str
    channel: str | None
    out: str
    files: list[PulledFile]
    model_signature: bool
    """Whether ``model.sig`` was written (the release was published with an EC key)."""
    seconds: float
    warnings: list[str] = []


def pull_all(
    store: str | Store,
    ref: str | Ref,
    options: PullOptions | None = None,
    *,
    out: Path,
    cache_dir: Path | None = None,
    **keywords: Any,
) -> PullAllResult:
    """Every blob of ``ref`` into the folder ``out`` (created, parents too) under its release file name, each
    verified, and ``model.sig``. A folder holding anything else is refused before anything is written:
    model_signing verifies every file of the folder, and nothing of the user's is replaced. Of the options, the
    trust (``verify_key``, ``allow_yanked``) and ``use_cache`` apply: every engine is pulled, golden inputs too."""
    options = PullOptions.given(options, keywords)
    chosen = [flag for flag, value in (("--precision", options.precision), ("--tensorrt-version",
              options.tensorrt_version), ("--golden", options.golden)) if value]  # fmt: skip
    if chosen:
        raise InvalidInput(f"{', '.join(chosen)} and --all: --all pulls every engine and the golden inputs")
    started = time.monotonic()
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    out = Path(out)
    store = open_store(store)
    resolved = resolve_trusted(store, ref, options.verify_key, allow_yanked=options.allow_yanked)
    manifest = resolved.manifest
    blobs = {blob.title: blob.ref for blob in release_blobs(manifest)}
    _check_folder(out, set(blobs))
    out.mkdir(parents=True, exist_ok=True)
    cache = (cache_dir or default_cache_dir()) / "pulls" if options.use_cache else None
    name = manifest.content.name
    for title, blob in blobs.items():
        fetch_verified(store, name, blob.sha256, blob.size_bytes, out / title, cache)
    bundle = attachment_within_limit(store, name, resolved.version, KIND, f"{name}@{resolved.version}")
    if bundle is not None:
        write_atomic(out / SIGNATURE_FILE, bundle)
    else:
        (out / SIGNATURE_FILE).unlink(missing_ok=True)  # a re-pull of another release must not leave one
    return PullAllResult(
        release=str(resolved.ref),
        version=resolved.version,
        channel=resolved.channel,
        out=str(out),
        files=[PulledFile(name=t, sha256=b.sha256, size_bytes=b.size_bytes) for t, b in blobs.items()],
        model_signature=bundle is not None,
        seconds=round(time.monotonic() - started, 3),
        warnings=release_warnings(manifest),
    )


def _check_folder(out: Path, layout: set[str]) -> None:
    """``out`` is a folder (or nothing yet) holding nothing but files of this release's layout: model_signing
    verifies every file of a folder, and nothing of the user's is replaced."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InvalidInput(f"--out {out}: give a folder for the release's files (it is a file or a link)")
    if not out.is_dir():
        return
    allowed = layout | {SIGNATURE_FILE}
    others = sorted(e for e in os.listdir(out) if e not in allowed and not _partial_of(e, allowed))
    if others:
        shown = ", ".join(printable(o) for o in others[:5]) + and_more(len(others) - 5)
        raise InvalidInput(
            f"--out {out}: the folder holds files that are not this release's ({shown}); model_signing verifies "
            "every file of a folder, so pull a release into a new or empty folder"
        )


def _partial_of(entry: str, names: set[str]) -> bool:
    """What a killed pull of one of ``names`` left (the next fetch of that file removes it)."""
    return entry.endswith(".partial") and any(entry.startswith(partial_prefix(n)) for n in names)
