"""The folder ``compile export rtx`` writes for one release and precision, by name and digest: what the export
writes, and what ``compile publish`` signs beforehand with OpenSSF model_signing, so that an application verifies
the folder it received with ``model_signing verify key`` (compiler.releases.model_signature).

    <model>/rtx.json                       the release, its runtime rule, and every file below with its sha256
    <model>/sm<cc>/<sku>-<precision>.engine  the plan, for an application embedding the TensorRT-RTX runtime
    <model>/sm<cc>/<model>_ctx.onnx         an EP-context model for ONNX Runtime's TensorRT RTX execution
                                           provider (NvTensorRTRTXExecutionProvider), naming that engine
    <model>/golden.npz                     the release's golden inputs and FP32 outputs, when it has them

Every file is a function of the release's manifest and the precision: the plans and golden inputs are its blobs,
the EP-context models and rtx.json are made from it. What depends on the machine that exports (whether TensorRT-RTX
there says a plan is valid) is in the command's report, never in the folder.

The EP-context model is what the execution provider itself writes when it dumps one (onnxruntime's
nv_tensorrt_rtx/onnx_ctx_model_helper.cc): one ``com.microsoft`` ``EPContext`` node over the model's inputs and
outputs, ``embed_mode`` 0 with ``ep_cache_context`` the engine's file name in the same folder (the EP refuses
absolute paths and ``..``), ``hardware_architecture`` the compute capability as ``89``. One folder per compute
capability, since the EP matches an engine to its GPU by it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.plugins import RTX_RUNTIME
from compiler.core.records import GOLDEN_FILE, ReleaseEngine, ReleaseManifest, TensorSignature
from compiler.core.runtimes import Runtime, parse_version

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


class RtxIndex(BaseModel):
    """rtx.json."""

    version: str
    model: str
    runtime: Runtime
    """The TensorRT-RTX release that loads every engine here (and only it)."""
    targets: list[RtxTarget]
    golden: str | None
    files: dict[str, str]
    """Every file of the model folder but rtx.json (and model.sig) -> its sha256."""


@dataclass(frozen=True)
class RtxLayout:
    """One export's files: the plans and golden inputs (blobs of the release) and what is made from the manifest."""

    index: RtxIndex
    made: dict[str, bytes]
    """The EP-context models, by path in the model folder."""

    def index_bytes(self) -> bytes:
        return self.index.model_dump_json(indent=2).encode()

    def files(self) -> dict[str, str]:
        """Every file of the folder, rtx.json included -> its sha256: what model_signing signs."""
        return {**self.index.files, INDEX: hashlib.sha256(self.index_bytes()).hexdigest()}


def engine_per_capability(engines: list[ReleaseEngine], why: str) -> dict[str, ReleaseEngine]:
    """Compute capability -> the engine a serving host of it gets (first listed wins where two hold the same plan).
    Serving systems tell GPUs apart only by compute capability, so two other plans for one (an A10 and an A40 plan,
    both 8.6) cannot both be served: refused, naming them, and ``why``."""
    owner: dict[str, ReleaseEngine] = {}
    for engine in engines:
        for capability in engine.compute_capabilities:
            if capability in owner and owner[capability].plan.sha256 != engine.plan.sha256:
                first = owner[capability]
                raise InvalidInput(
                    f"{first.sku}/{first.precision} and {engine.sku}/{engine.precision} are different plans for "
                    f"compute capability {capability}; {why}"
                )
            owner.setdefault(capability, engine)
    return owner


def rtx_layout(manifest: ReleaseManifest, engines: list[ReleaseEngine], name: str) -> RtxLayout:
    """The folder ``export rtx`` writes of ``engines`` (see :func:`export_engines`) under the model name ``name``."""
    content = manifest.content
    owner = engine_per_capability(
        engines,
        "an application picks by compute capability: add --precision, or publish one of them per compute capability",
    )
    targets, made, files = [], {}, {}
    for capability, engine in owner.items():
        sub = f"sm{capability.replace('.', '')}"
        plan, context = f"{sub}/{engine.sku}-{engine.precision.value}.engine", f"{sub}/{name}_ctx.onnx"
        made[context] = context_model(
            name, content.model_name, content.inputs, content.outputs, plan.split("/")[1], capability, engine.runtime
        )
        files[plan], files[context] = engine.plan.sha256, hashlib.sha256(made[context]).hexdigest()
        targets.append(
            RtxTarget(
                compute_capability=capability,
                sku=engine.sku,
                precision=engine.precision.value,
                engine=plan,
                context_model=context,
                sha256=engine.plan.sha256,
                size_bytes=engine.plan.size_bytes,
            )
        )
    if content.golden is not None:
        files[GOLDEN_FILE] = content.golden.blob.sha256
    index = RtxIndex(
        version=content.version,
        model=name,
        runtime=engines[0].runtime,
        targets=targets,
        golden=GOLDEN_FILE if content.golden is not None else None,
        files=dict(sorted(files.items())),
    )
    return RtxLayout(index, made)


def export_engines(
    manifest: ReleaseManifest, precision: str | None, runtime_version: str | None
) -> list[ReleaseEngine]:
    """The engines an export of ``precision`` holds (all, when the release has one precision), each one that the
    TensorRT-RTX runtime ``runtime_version`` (when given) loads; refused (exit 2) otherwise."""
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
