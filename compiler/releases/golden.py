"""A release's golden inputs: a few of the check's samples and the FP32 reference outputs for them, one
content-addressed, size-capped blob (``golden.npz``) a serving host or a later GPU job runs the exact plan on.

    from compiler.releases.golden import pull_golden
    golden = pull_golden("s3://models/prod", "digits@stable", Path("/models/golden.npz"))

Publish stores the file ``compile check --data`` wrote (compiler.check.golden_capture); pull and export fetch it through
the verified path (digest and size against the manifest) and then check it holds exactly the arrays the manifest
lists, read with ``allow_pickle=False`` and no member larger than the cap.
"""

from __future__ import annotations

import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.files import default_cache_dir
from compiler.core.records import GOLDEN_MAX_BYTES, GoldenRecord, GoldenTensor, ReleaseManifest
from compiler.releases.fetch import fetch_verified, resolve_trusted
from compiler.releases.manifest import Resolved, damaged
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Golden:
    record: GoldenRecord
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def load_golden(path: Path, record: GoldenRecord, where: str) -> Golden:
    """The arrays of a golden.npz whose digest was already checked, refused (CheckFailed naming ``where``) unless
    they are exactly the ones ``record`` lists: names, types and shapes; no pickles, no member beyond the cap."""

    def bad(why: str) -> CheckFailed:
        return CheckFailed(
            f"{where}: the golden inputs are not what the manifest lists ({why}); republish the "
            "release from a build folder checked with --data"
        )

    expected = {f"input_{i}": t for i, t in enumerate(record.inputs)}
    expected |= {f"output_{i}": t for i, t in enumerate(record.outputs)}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, OSError) as exc:
        raise bad(f"not an npz archive: {exc}") from None
    if sorted(members) != sorted(f"{key}.npy" for key in expected):
        raise bad(f"it holds {', '.join(sorted(members)[:8]) or 'nothing'}")
    if sum(members.values()) > GOLDEN_MAX_BYTES:
        raise bad(f"its arrays unpack to {sum(members.values())} bytes, more than {GOLDEN_MAX_BYTES}")
    import numpy as np  # a consumer that pulls no golden inputs never imports it

    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key, tensor in expected.items():
                value = npz[key]
                if str(value.dtype) != tensor.dtype or list(value.shape) != tensor.shape:
                    raise bad(
                        f"{key} is {value.dtype} {list(value.shape)}, the manifest says {tensor.dtype} {tensor.shape}"
                    )
                arrays[key] = value
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise bad(str(exc)) from None
    return Golden(
        record,
        {t.name: arrays[f"input_{i}"] for i, t in enumerate(record.inputs)},
        {t.name: arrays[f"output_{i}"] for i, t in enumerate(record.outputs)},
    )


def read_golden(store: Store, manifest: ReleaseManifest, cache: Path | None) -> Golden:
    """A release's golden inputs, fetched verified into memory by way of a temporary file (CheckFailed when the
    store's blob is damaged, oversized or not what the manifest lists)."""
    import tempfile

    record = manifest.content.golden
    if record is None:
        raise InvalidInput(
            f"{manifest.content.name}@{manifest.content.version} has no golden inputs (it was "
            "published from a build folder not checked with --data)"
        )
    with tempfile.TemporaryDirectory(prefix="compile-golden-") as work:
        path = Path(work) / "golden.npz"
        _fetch(store, manifest, path, cache)
        return load_golden(path, record, f"{manifest.content.name}@{manifest.content.version}")


def _fetch(store: Store, manifest: ReleaseManifest, out: Path, cache: Path | None) -> bool:
    record, name = manifest.content.golden, manifest.content.name
    if record.blob.size_bytes > GOLDEN_MAX_BYTES:  # before a byte is fetched
        raise damaged(
            store,
            f"releases/{name}/{manifest.content.version}/manifest.json",
            f"its golden inputs weigh {record.blob.size_bytes} bytes, more than any release's may ({GOLDEN_MAX_BYTES})",
        )
    return fetch_verified(store, name, record.blob.sha256, record.blob.size_bytes, out, cache)


def save_golden(store: Store, manifest: ReleaseManifest, out: Path, cache: Path | None) -> bool:
    """The release's golden.npz written to ``out`` only once verified (digest, size, and the arrays the manifest
    lists); True when the store was not asked for the bytes."""
    staged = out.with_name(f".{out.name[:200]}.{os.urandom(4).hex()}.golden-check")
    try:
        from_cache = _fetch(store, manifest, staged, cache)
        load_golden(staged, manifest.content.golden, f"{manifest.content.name}@{manifest.content.version}")
        staged.replace(out)
    finally:
        staged.unlink(missing_ok=True)
    return from_cache


class GoldenPull(BaseModel):
    release: str
    version: str
    out: str
    sha256: str
    size_bytes: int
    samples: int
    inputs: list[GoldenTensor]
    outputs: list[GoldenTensor]
    from_cache: bool
    seconds: float


def pull_golden(
    store: str | Store,
    ref: str | Ref,
    out: Path,
    *,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    verify_key: Path | None = None,
    allow_yanked: bool = True,
) -> GoldenPull:
    """The release's golden.npz written to ``out``, verified (digest, size, and the arrays the manifest lists);
    with ``verify_key`` (else ``$COMPILE_VERIFY_KEY``) only from a release signed by it."""
    started = time.monotonic()
    store = open_store(store)
    resolved = resolve_trusted(store, ref, verify_key, allow_yanked=allow_yanked)
    return write_golden(
        store, resolved, out, (cache_dir or default_cache_dir()) / "pulls" if use_cache else None, started
    )


def require_golden(resolved: Resolved) -> None:
    """Refuse (exit 2) a release without golden inputs, before anything of it is written."""
    if resolved.manifest.content.golden is None:
        raise InvalidInput(
            f"{resolved.ref} has no golden inputs (published from a build folder not checked with "
            "--data); check the build with --data and publish a new version"
        )


def write_golden(store: Store, resolved: Resolved, out: Path, cache: Path | None, started: float) -> GoldenPull:
    """The golden.npz of a release already resolved (and verified, when asked): a pull with ``--golden`` reads
    the manifest once for the plan and its golden inputs."""
    require_golden(resolved)
    from_cache = save_golden(store, resolved.manifest, out, cache)
    record = resolved.manifest.content.golden
    return GoldenPull(
        release=str(resolved.ref),
        version=resolved.version,
        out=str(out),
        sha256=record.blob.sha256,
        size_bytes=record.blob.size_bytes,
        samples=record.samples,
        inputs=record.inputs,
        outputs=record.outputs,
        from_cache=from_cache,
        seconds=round(time.monotonic() - started, 3),
    )
