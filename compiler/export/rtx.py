"""``compile export rtx``: a TensorRT-RTX release laid out for the applications that load it.

    DIR/<model>/rtx.json                       the release, its runtime rule, and every file below with its sha256
    DIR/<model>/sm<cc>/<sku>-<precision>.engine  the plan, for an application embedding the TensorRT-RTX runtime
    DIR/<model>/sm<cc>/<model>_ctx.onnx         an EP-context model for ONNX Runtime's TensorRT RTX execution
                                               provider (NvTensorRTRTXExecutionProvider), naming that engine
    DIR/<model>/golden.npz                     the release's golden inputs and FP32 outputs, when it has them

TensorRT-RTX engines load only under the TensorRT-RTX release that built them (its Engine Compatibility page), and
an application checks a file with ``IRuntime::getEngineValidity()`` (header only) before deserializing it; so the
export refuses a plan of another runtime, or one the given ``--runtime-version`` may not load, and records the
rule in rtx.json. The EP-context model is what the execution provider itself writes when it dumps one
(onnxruntime's nv_tensorrt_rtx/onnx_ctx_model_helper.cc): one ``com.microsoft`` ``EPContext`` node over the model's
inputs and outputs, ``embed_mode`` 0 with ``ep_cache_context`` the engine's file name in the same folder (the EP
refuses absolute paths and ``..``), ``hardware_architecture`` the compute capability as ``89``. One folder per
compute capability, since the EP matches an engine to its GPU by it.
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
from compiler.core.plugins import RTX_RUNTIME
from compiler.core.records import GOLDEN_FILE, ReleaseEngine, ReleaseManifest, TensorSignature
from compiler.core.runtimes import Runtime, parse_version
from compiler.export import engine_per_capability
from compiler.export.triton import MODEL_NAME
from compiler.releases.fetch import fetch_verified, resolve_trusted
from compiler.releases.golden import save_golden
from compiler.releases.pull import release_warnings
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

INDEX = "rtx.json"
EP_NAME = "NvTensorRTRTXExecutionProvider"
IR_VERSION = 10
"""ONNX IR 10 (onnx 1.16): what ONNX Runtime 1.20 and later read."""


class RtxTarget(BaseModel):
    compute_capability: str
    sku: str
    precision: str
    engine: str
    """Path of the plan, relative to the model folder."""
    context_model: str
    """Path of the EP-context model, relative to the model folder."""
    sha256: str
    size_bytes: int
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
    targets: list[RtxTarget]
    golden: str | None
    files: dict[str, str]
    """Every file of the model folder but rtx.json -> its sha256."""
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
    engines = _engines(manifest, options.precision, runtime_version)
    cache = (cache_dir or default_cache_dir()) / "pulls" if options.use_cache else None
    model_dir = out / name
    staged = writable_folder(out, "--out") / f".{name}.{os.getpid()}.{os.urandom(4).hex()}.partial"
    staged.mkdir()
    try:
        result = _write(store, manifest, engines, name, staged, cache)
        result = result.model_copy(
            update={"release": str(resolved.ref), "version": resolved.version, "model_dir": str(model_dir)}
        )
        index = result.model_dump_json(
            indent=2, exclude={"status", "seconds", "model_dir", "release", "warnings"}
        ).encode()
        write_atomic(staged / INDEX, index)
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


def _engines(manifest: ReleaseManifest, precision: str | None, runtime_version: str | None) -> list[ReleaseEngine]:
    release = f"{manifest.content.name}@{manifest.content.version}"
    engines = [e for e in manifest.content.engines if precision is None or e.precision == precision]
    precisions = sorted({e.precision.value for e in manifest.content.engines})
    if not engines:
        raise InvalidInput(f"{release} has no {precision} engine; it has {', '.join(precisions)}")
    if len({e.precision for e in engines}) > 1:  # one EP-context model per compute capability names one engine
        raise InvalidInput(
            f"{release} has engines of {', '.join(precisions)}; an application's folder holds one engine per "
            f"compute capability: add --precision {' or '.join(precisions)}"
        )
    for engine in engines:
        plan = f"{engine.sku}/{engine.precision}"
        if engine.runtime.family != RTX_RUNTIME:
            raise InvalidInput(
                f"{release}: plan {plan} is a {engine.runtime.name} plan, which the TensorRT-RTX "
                "runtime (and ONNX Runtime's TensorRT RTX execution provider) cannot load: serve it "
                "with compile export triton, or build the release with TensorRT-RTX "
                "(backend: tensorrt-rtx)"
            )
        if runtime_version is not None and not engine.runtime.loads(runtime_version):
            raise InvalidInput(
                f"{release}: plan {plan} is a {engine.runtime.name} plan (loads with "
                f"{engine.runtime.loads_with}); TensorRT-RTX {runtime_version} cannot load it: build "
                f"the release again with TensorRT-RTX {runtime_version}, or ship the runtime "
                f"{engine.runtime.version} with the application"
            )
    if len({e.runtime.version for e in engines}) > 1:
        raise InvalidInput(
            f"{release}: its engines were built by different TensorRT-RTX releases "
            f"({', '.join(sorted({e.runtime.version for e in engines}))}); one application ships one "
            "runtime: add --precision, or publish the engines of one release"
        )
    return engines


def _write(
    store: Store, manifest: ReleaseManifest, engines: list[ReleaseEngine], name: str, folder: Path, cache: Path | None
) -> RtxExport:
    """Every plan (verified), its EP-context model, and the golden inputs, into ``folder``."""
    content = manifest.content
    targets = []
    owner = engine_per_capability(
        engines,
        "an application picks by compute capability: add --precision, or publish one of them per compute capability",
    )
    for capability, engine in owner.items():
        sub = folder / f"sm{capability.replace('.', '')}"
        sub.mkdir()
        plan = sub / f"{engine.sku}-{engine.precision.value}.engine"
        fetch_verified(store, content.name, engine.plan.sha256, engine.plan.size_bytes, plan, cache)
        context = sub / f"{name}_ctx.onnx"
        write_atomic(
            context,
            context_model(
                name, content.model_name, content.inputs, content.outputs, plan.name, capability, engine.runtime
            ),
        )
        targets.append(
            RtxTarget(
                compute_capability=capability,
                sku=engine.sku,
                precision=engine.precision.value,
                engine=plan.relative_to(folder).as_posix(),
                context_model=context.relative_to(folder).as_posix(),
                sha256=engine.plan.sha256,
                size_bytes=engine.plan.size_bytes,
                validity=engine_validity(plan),
            )
        )
    golden = None
    if content.golden is not None:
        save_golden(store, manifest, folder / GOLDEN_FILE, cache)
        golden = GOLDEN_FILE
    files = {
        path.relative_to(folder).as_posix(): file_sha256(path) for path in sorted(folder.rglob("*")) if path.is_file()
    }
    return RtxExport(
        release="",
        version="",
        model=name,
        model_dir="",
        status="written",
        runtime=engines[0].runtime,
        targets=targets,
        golden=golden,
        files=files,
    )


def context_model(
    name: str,
    model_file: str,
    inputs: list[TensorSignature] | None,
    outputs: list[TensorSignature] | None,
    engine_file: str,
    capability: str,
    runtime: Runtime,
) -> bytes:
    """An EP-context model whose one EPContext node hands the whole graph to the engine ``engine_file`` beside it,
    as the NvTensorRTRTX execution provider writes and reads one."""
    import onnx
    from onnx import helper

    if not inputs or not outputs:
        raise InvalidInput(
            f"{name}: the release records no model inputs and outputs (published from a build folder "
            "whose model was not at the path build.json names); publish a new version where the "
            "model is"
        )
    major, minor, patch = (*parse_version(runtime.version), 0, 0)[:3]
    sm = f"sm{capability.replace('.', '')}"
    node = helper.make_node(
        "EPContext",
        [t.name for t in inputs],
        [t.name for t in outputs],
        name=f"{name}_{sm}",
        domain="com.microsoft",
        main_context=0,
        embed_mode=0,
        ep_cache_context=engine_file,
        hardware_architecture=sm.removeprefix("sm"),
        partition_name=f"{name}_{sm}",
        onnx_model_filename=model_file,
        ep_sdk_version=str(major * 10000 + minor * 100 + patch),
        source=EP_NAME,
        notes=f"TensorRT-RTX {runtime.version} engine; loads with {runtime.loads_with}",
    )
    graph = helper.make_graph([node], name, [_value(t) for t in inputs], [_value(t) for t in outputs])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="compile export rtx",
        ir_version=IR_VERSION,
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _value(tensor: TensorSignature):
    import numpy as np
    from onnx import helper

    try:
        element = helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
    except TypeError:
        raise InvalidInput(f"tensor {tensor.name!r} is of type {tensor.dtype}, which ONNX has no type for") from None
    shape = (
        None
        if tensor.shape is None
        else [d if isinstance(d, int) and d >= 0 else (d if isinstance(d, str) else None) for d in tensor.shape]
    )
    return helper.make_tensor_value_info(tensor.name, element, shape)


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
