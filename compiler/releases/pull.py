"""Pulling one verified plan of a release for a GPU: the consumer's Python API.

A serving host does::

    from compiler.releases import pull
    result = pull("s3://models/prod", "digits@stable", sku="auto", out=Path("/models/digits.plan"))

and gets the one plan for its GPU's compute capability, verified against the manifest's sha256, or an error.
Every request a pull makes is by key (manifest, channel, blob), so its cost does not grow with the store.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.files import check_writable_folder, default_cache_dir, writable_folder, write_atomic
from compiler.core.options import PullOptions
from compiler.core.records import GOLDEN_FILE, RELEASE_FORMAT, ReleaseEngine, ReleaseManifest
from compiler.core.runtimes import Runtime, parse_version
from compiler.core.text import and_more
from compiler.releases.fetch import fetch_verified, resolve_trusted
from compiler.releases.golden import require_golden, write_golden
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

SHOWN = 10
"""Engines an error line names (a manifest may list thousands)."""
NAME_MAX = 255
"""The longest file name (bytes) Linux filesystems take."""
RECORD_SUFFIX = ".json"


def select_engine(
    manifest: ReleaseManifest,
    *,
    sku: str | None = None,
    compute_capability: str | None = None,
    precision: str | None = None,
    tensorrt_version: str | None = None,
) -> ReleaseEngine:
    """The one engine for a GPU: its compute capability exactly (as Triton's ``cc_model_filenames``), then the
    precision and the runtime version when given (an engine whose runtime rule lets that version load it: the
    build version, or a later one of its major for a version-compatible plan); among engines of one compute
    capability, the named SKU's own."""
    release = f"{manifest.content.name}@{manifest.content.version}"
    if tensorrt_version is not None:
        try:
            parse_version(tensorrt_version)
        except ValueError as exc:
            raise InvalidInput(f"--tensorrt-version: {exc}") from None
    engines = [
        e
        for e in manifest.content.engines
        if (compute_capability is None or compute_capability in e.compute_capabilities)
        and (precision is None or e.precision == precision)
        and (tensorrt_version is None or e.runtime.loads(tensorrt_version))
    ]
    if sku is not None and len(engines) > 1 and any(e.sku == sku for e in engines):
        engines = [e for e in engines if e.sku == sku]
    wanted = (
        ", ".join(
            part
            for part in (
                f"compute capability {compute_capability}" if compute_capability else "",
                f"precision {precision}" if precision else "",
                f"TensorRT {tensorrt_version}" if tensorrt_version else "",
            )
            if part
        )
        or "any engine"
    )
    if len(engines) == 1:
        return engines[0]
    have = "; ".join(
        f"{e.sku} ({', '.join(e.compute_capabilities)}) {e.precision} {e.runtime.name} (loads with "
        f"{e.runtime.loads_with})"
        for e in manifest.content.engines[:SHOWN]
    ) + and_more(len(manifest.content.engines) - SHOWN)
    if not engines:
        raise InvalidInput(f"{release} has no engine for {wanted}; it has: {have}")
    choices = sorted({e.precision for e in engines})
    hint = "add --precision " + " or ".join(choices) if len(choices) > 1 else "add --tensorrt-version or --sku"
    raise InvalidInput(
        f"{release} has {len(engines)} engines for {wanted}: "
        f"{', '.join(f'{e.sku}/{e.precision}' for e in engines[:SHOWN])}{and_more(len(engines) - SHOWN)}"
        f"; {hint}"
    )


def local_compute_capability() -> str:
    """This machine's GPU's compute capability, through NVML; exit 3 when there is none or they differ."""
    from compiler.core.gpu import list_gpus

    gpus, why = list_gpus()
    capabilities = sorted({gpu.compute_capability for gpu in gpus})
    if not capabilities:
        raise EnvironmentProblem(f"--sku auto: no GPU found ({why}); name the target with --sku SKU")
    if len(capabilities) > 1:
        raise EnvironmentProblem(
            f"--sku auto: this machine's GPUs differ ({', '.join(capabilities)}); name one with --sku SKU"
        )
    return capabilities[0]


class PulledEngine(ReleaseEngine):
    """The record beside a pulled plan (``X.plan.json``): the manifest's entry for it, and the release it came from."""

    format_version: int = RELEASE_FORMAT
    release: str
    version: str
    store: str


class PullResult(BaseModel):
    release: str
    version: str
    channel: str | None
    sku: str
    precision: str
    compute_capabilities: list[str]
    runtime: Runtime
    """The runtime that loads the plan and the versions of it that may."""
    sha256: str
    size_bytes: int
    out: str
    engine_json: str
    """The record beside the plan, named after it (``X.plan`` -> ``X.plan.json``): pulls into one folder keep
    one record each."""
    from_cache: bool
    seconds: float
    warnings: list[str] = []
    """The release's failures (its check failed, or it was published with --allow-failed), one per line."""
    golden: Any = None
    """With ``compile pull --golden``: the golden inputs written beside the plan (compiler.releases.golden)."""


def pull(
    store: str | Store,
    ref: str | Ref,
    options: PullOptions | None = None,
    *,
    out: Path,
    sku: str | None = None,
    cache_dir: Path | None = None,
    **keywords: Any,
) -> PullResult:
    """The one verified plan of ``ref`` for ``sku`` (a catalog name or ``auto``), written to ``out`` with its
    record (``X.plan.json``) beside it, and with ``options.golden`` the release's golden inputs there
    (golden.npz), from the same manifest. Nothing is written to ``out`` unless the bytes hash to the manifest's
    digest; with ``options.verify_key`` (else ``$COMPILE_VERIFY_KEY``), nothing at all unless the release is
    signed by it. The options may be given as keywords instead (``verify_key=...``)."""
    started = time.monotonic()
    options = PullOptions.given(options, keywords)
    out = Path(out)
    if options.golden and out.name == GOLDEN_FILE:
        raise InvalidInput(
            f"--out {out}: {GOLDEN_FILE} is written beside the plan with --golden; name the plan otherwise"
        )
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)  # names first: nothing is asked of a store for a bad one
    _check_out(out)
    golden = out.with_name(GOLDEN_FILE) if options.golden else None
    compute_capability = None
    if sku == "auto":
        compute_capability = local_compute_capability()
    elif sku is not None:
        from compiler.core.profiles import load_sku_catalog

        catalog = load_sku_catalog()
        sku = catalog.name_of(sku)  # RTX-4090 is rtx-4090, the engine's name
        compute_capability = catalog.skus[sku].compute_capability
    store = open_store(store)
    resolved = resolve_trusted(store, ref, options.verify_key, allow_yanked=options.allow_yanked)
    engine = select_engine(
        resolved.manifest,
        sku=None if sku == "auto" else sku,
        compute_capability=compute_capability,
        precision=options.precision,
        tensorrt_version=options.tensorrt_version,
    )
    if golden is not None:
        require_golden(resolved)  # before the plan is written
    name = resolved.manifest.content.name
    cache = (cache_dir or default_cache_dir()) / "pulls" if options.use_cache else None
    writable_folder(out.parent, "--out")
    from_cache = fetch_verified(store, name, engine.plan.sha256, engine.plan.size_bytes, out, cache)
    record = PulledEngine(
        **engine.model_dump(), release=f"{name}@{resolved.version}", version=resolved.version, store=store.uri
    )
    engine_json = record_path(out)
    write_atomic(engine_json, record.model_dump_json(indent=2).encode())
    fetched = None
    if golden is not None:
        fetched = write_golden(store, resolved, golden, cache, time.monotonic())
    return PullResult(
        release=str(resolved.ref),
        version=resolved.version,
        channel=resolved.channel,
        sku=engine.sku,
        precision=engine.precision,
        compute_capabilities=engine.compute_capabilities,
        runtime=engine.runtime,
        sha256=engine.plan.sha256,
        size_bytes=engine.plan.size_bytes,
        out=str(out),
        engine_json=str(engine_json),
        from_cache=from_cache,
        seconds=round(time.monotonic() - started, 3),
        warnings=release_warnings(resolved.manifest),
        golden=fetched,
    )


def release_warnings(manifest: ReleaseManifest) -> list[str]:
    """One line per failure the release was published with, naming it (for pull and export to print)."""
    release = f"{manifest.content.name}@{manifest.content.version}"
    return [f"{release} was published with a failure: {failure}" for failure in manifest.failures]


def record_path(out: Path) -> Path:
    """The record beside a pulled plan, named after it, so two pulls into one folder keep two records."""
    return out.with_name(out.name + RECORD_SUFFIX)


def _check_out(out: Path) -> None:
    if len(os.fsencode(out.name + RECORD_SUFFIX)) > NAME_MAX:
        raise InvalidInput(
            f"--out {out}: the file name is longer than the {NAME_MAX - len(RECORD_SUFFIX)} bytes a "
            f"plan's name may have (its record adds {RECORD_SUFFIX}); choose a shorter one"
        )
    if out.name in ("", ".", "..") or out.is_dir():
        raise InvalidInput(f"--out {out}: give a file path for the plan (e.g. model.plan), not a folder")
    check_writable_folder(out.parent, "--out")  # made (parents too) once the release is resolved and trusted
    for path in (out, record_path(out)):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise InvalidInput(f"--out {out}: cannot look at {path} ({exc.strerror or exc})") from None
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a link is replaced, never written through
            raise InvalidInput(
                f"--out {out}: {path} is a device, FIFO or socket, not a regular file; a pull "
                "replaces regular files only: give another path"
            )
