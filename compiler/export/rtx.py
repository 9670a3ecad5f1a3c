"""``compile export rtx``: a TensorRT-RTX release laid out for the applications that load it (the layout:
:mod:`compiler.releases.rtx_layout`), with the release's model_signing signature of that folder (``model.sig``)
when it was published with an EC key and the folder is the one it signed.

TensorRT-RTX engines load only under the TensorRT-RTX release that built them (its Engine Compatibility page), and
an application checks a file with ``IRuntime::getEngineValidity()`` (header only) before deserializing it; so the
export refuses a plan of another runtime, or one the given ``--runtime-version`` may not load, and records the
rule in rtx.json; what this machine's runtime says of each plan is in the command's report.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from pydantic import BaseModel

from compiler.core.errors import Conflict, InvalidInput
from compiler.core.files import check_writable_folder, default_cache_dir, file_sha256, writable_folder, write_atomic
from compiler.core.options import RtxOptions
from compiler.core.records import GOLDEN_FILE, ReleaseManifest
from compiler.core.runtimes import Runtime, parse_version
from compiler.export.triton import MODEL_NAME
from compiler.releases.fetch import fetch_verified, resolve_trusted
from compiler.releases.golden import save_golden
from compiler.releases.model_signature import SIGNATURE_FILE, rtx_kind, signed_files
from compiler.releases.pull import release_warnings
from compiler.releases.rtx_layout import INDEX, RtxLayout, RtxTarget, export_engines, rtx_layout
from compiler.releases.verify import attachment_within_limit
from compiler.stores import Store, open_store
from compiler.stores.base import Ref


class ExportedTarget(RtxTarget):
    validity: str
    """What TensorRT-RTX's getEngineValidity says of the plan on this machine, or why it was not asked."""


class RtxExport(BaseModel):
    release: str
    version: str
    model: str
    model_dir: str
    status: str
    """``written``, or ``unchanged`` when the folder already held exactly this export."""
    runtime: Runtime
    """The TensorRT-RTX release that loads every engine here (and only it)."""
    targets: list[ExportedTarget]
    golden: str | None
    files: dict[str, str]
    """Every file of the model folder but rtx.json and model.sig -> its sha256."""
    model_signature: str = ""
    """``written`` (model.sig, which ``model_signing verify key`` checks the folder against), or why there is none."""
    seconds: float = 0.0
    warnings: list[str] = []
    """The release's failures (its check failed, or it was published with --allow-failed), one per line."""


def export_rtx(
    store: str | Store,
    ref: str | Ref,
    out: Path,
    options: RtxOptions | None = None,
    *,
    cache_dir: Path | None = None,
) -> RtxExport:
    """Write ``ref``'s TensorRT-RTX engines into ``out/<model>/`` for applications and ONNX Runtime; refuses
    (exit 2) an engine of another runtime or one ``options.runtime_version`` (the application's TensorRT-RTX) cannot
    load. As export triton and pull: a yanked version is refused unless ``allow_yanked``, and with ``verify_key``
    (else ``$COMPILE_VERIFY_KEY``) nothing is written unless the release is signed by it."""
    started = time.monotonic()
    options = options or RtxOptions()
    out, model_name, runtime_version = Path(out), options.model_name, options.runtime_version
    check_writable_folder(out, "--out")  # made (parents too) once the release is resolved and trusted
    if model_name is not None and (not MODEL_NAME.fullmatch(model_name) or ".." in model_name):
        raise InvalidInput(f"--model-name {model_name!r}: use 1 to 128 of A-Z a-z 0-9 . _ - (a folder name)")
    if runtime_version is not None:
        try:
            parse_version(runtime_version)
        except ValueError as exc:
            raise InvalidInput(f"--runtime-version: {exc}") from None
    store = open_store(store)
    resolved = resolve_trusted(store, ref, options.verify_key, allow_yanked=options.allow_yanked)
    manifest = resolved.manifest
    name = model_name or manifest.content.name
    engines = export_engines(manifest, options.precision, runtime_version)
    layout = rtx_layout(manifest, engines, name)
    cache = (cache_dir or default_cache_dir()) / "pulls" if options.use_cache else None
    model_dir = out / name
    staged = writable_folder(out, "--out") / f".{name}.{os.getpid()}.{os.urandom(4).hex()}.partial"
    staged.mkdir()
    try:
        _write(store, manifest, layout, staged, cache)
        signature = _model_signature(store, manifest, resolved.version, layout, name, staged)
        result = RtxExport(
            release=str(resolved.ref),
            version=resolved.version,
            model=name,
            model_dir=str(model_dir),
            status="written",
            runtime=layout.index.runtime,
            targets=[
                ExportedTarget(**t.model_dump(), validity=engine_validity(staged / t.engine))
                for t in layout.index.targets
            ],
            golden=layout.index.golden,
            files=layout.index.files,
            model_signature=signature,
        )
        if model_dir.exists() or model_dir.is_symlink():
            _same_or_conflict(model_dir, staged, resolved.ref)
            result.status = "unchanged"
        else:
            try:
                os.rename(staged, model_dir)
            except OSError:
                if not model_dir.exists():
                    raise
                _same_or_conflict(model_dir, staged, resolved.ref)
                result.status = "unchanged"
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    result.seconds = round(time.monotonic() - started, 3)
    result.warnings = release_warnings(manifest)
    return result


def _write(store: Store, manifest: ReleaseManifest, layout: RtxLayout, folder: Path, cache: Path | None) -> None:
    """Every plan (verified), its EP-context model, the golden inputs and rtx.json, into ``folder``."""
    for target in layout.index.targets:
        plan = folder / target.engine
        plan.parent.mkdir(exist_ok=True)
        fetch_verified(store, manifest.content.name, target.sha256, target.size_bytes, plan, cache)
    for path, data in layout.made.items():
        write_atomic(folder / path, data)
    if layout.index.golden is not None:
        save_golden(store, manifest, folder / GOLDEN_FILE, cache)
    write_atomic(folder / INDEX, layout.index_bytes())


def _model_signature(
    store: Store, manifest: ReleaseManifest, version: str, layout: RtxLayout, name: str, folder: Path
) -> str:
    """``model.sig`` in ``folder`` when the release holds a model_signing signature of exactly these files."""
    content = manifest.content
    if name != content.name:
        return "not written: --model-name changes the files the release's signature covers"
    precision = layout.index.targets[0].precision
    bundle = attachment_within_limit(store, content.name, version, rtx_kind(precision), f"{content.name}@{version}")
    if bundle is None:
        return "none: the release was not published with an EC key (model_signing signs with one)"
    if signed_files(bundle) != layout.files():
        return "not written: the release's signature covers other files than this export's"
    write_atomic(folder / SIGNATURE_FILE, bundle)
    return "written"


def engine_validity(plan: Path) -> str:
    """TensorRT-RTX's own header check (``IRuntime::getEngineValidity``) where a GPU lets it answer: without one
    it reads no GPU properties and answers INVALID with no diagnostic, which says nothing of the plan."""
    from compiler.backends import load_backend
    from compiler.core.gpu import list_gpus

    gpus, why = list_gpus()
    if not gpus:
        return f"skipped: no compatible GPU ({why})"
    trt = load_backend("tensorrt-rtx").trt
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    with open(plan, "rb") as handle:
        validity, diagnostics = runtime.get_engine_validity(handle.read(runtime.engine_header_size))
    flags = [
        name
        for name, member in trt.EngineInvalidityDiagnostics.__members__.items()
        if int(diagnostics) & (1 << int(member))
    ]
    return str(validity).rsplit(".", 1)[-1].lower() + (f" ({', '.join(flags)})" if flags else "")


def _same_or_conflict(existing: Path, staged: Path, ref: object) -> None:
    """An export already there is the same one when its files hash alike; anything else is never overwritten."""

    def digests(root: Path) -> dict[str, str] | None:
        if root.is_symlink() or not root.is_dir():
            return None
        found = {}
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or (not path.is_file() and not path.is_dir()):
                return None
            if path.is_file():
                found[path.relative_to(root).as_posix()] = file_sha256(path)
        return found

    if digests(existing) != digests(staged):
        raise Conflict(
            f"{existing}: holds another export than {ref}; export to another --model-name or --out, or "
            "remove that folder"
        )
