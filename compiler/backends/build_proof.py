"""One real build that proves a model builds: what `compile calibrate` does to its Q/DQ model before it says ok.

TensorRT refuses Q/DQ placements onnxruntime writes without complaint (a quantized constant that feeds anything
but a DequantizeLinear, an asymmetric zero point), and only a build tells. One engine of one profile (the shapes
of one calibration sample) for compute capability 8.9, which takes INT8 and FP8, built in a child process as
``compile inspect --build-check`` does; TensorRT-RTX is preferred because it builds without a GPU. The build's
kernel list also tells what a precision boundary costs: :func:`reformat_kernels`.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from compiler.backends import is_installed, load_backend
from compiler.backends.base import BuildSpec
from compiler.backends.isolated import Builders
from compiler.core.errors import CompileError
from compiler.core.plugins import preferred
from compiler.core.profiles import ShapeProfile, ShapeRange
from compiler.core.records import QUANTIZED, BuildProof, Kernel, Reformats, Status

PROOF_CAPABILITY = "8.9"
"""Ada: the oldest compute capability that takes both INT8 and FP8."""
REFORMATS_NAMED = 10
"""How many reformat kernels a record names (all are counted)."""
_CONVERSIONS = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast"})
MATMUL_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""The ops calibration gives Q/DQ inputs for the speed of an INT8/FP8 kernel."""
_REFORMAT = re.compile(r"reformat|copy", re.IGNORECASE)


def proof_backend() -> str | None:
    """The backend a proof build uses here: the first installed of those that build without a GPU."""
    return next((kind.name for kind in preferred(gpu=False) if is_installed(kind.name)), None)


def proof_versions() -> dict[str, str]:
    """The proof's backend and its version, read without importing it: part of a calibration's content key, as the
    nodes a build computes in float despite their Q/DQ (kept in float by calibrate) depend on that version."""
    from compiler.backends import installed_versions

    backend = proof_backend()
    version = installed_versions().get(backend) if backend else None
    return {backend: version} if backend and version else {}


def prove_build(
    model: Path, shapes: dict[str, tuple[int, ...]], dims: dict[str, list | None], axes: dict[str, int] | None = None
) -> BuildProof:
    """Build ``model`` once for :data:`PROOF_CAPABILITY` with one profile: each dynamic input (``dims``: the model's
    input dims, str/None for dynamic) at the shape of ``shapes`` (one sample's), its batch (the sample axis,
    ``axes`` or 0) dynamic from 1 to 2 where the model's is: a build for one fixed shape folds what a served
    engine computes (an RNN's zero initial state sized from the batch). OK with what was built, FAILED with the
    builder's errors and the nodes they are about, SKIPPED when no backend here can build. An OK proof carries the
    engine's precision-boundary reformat kernels and the nodes given Q/DQ it computes in float."""
    backend = proof_backend()
    if backend is None:
        return BuildProof(status=Status.SKIPPED, detail="no TensorRT backend is installed to prove it builds")
    fixed = {
        name: [d if isinstance(d, int) else size for d, size in zip(input_dims, shapes[name], strict=False)]
        if input_dims is not None
        else list(shapes[name])
        for name, input_dims in dims.items()
        if name in shapes
    }  # a static batch stays what the model says
    dynamic = {
        name: _batch_range(shape, dims[name], (axes or {}).get(name, 0))
        for name, shape in fixed.items()
        if dims[name] is None or not all(isinstance(d, int) for d in dims[name])
    }  # a model of static shapes builds with no profile (a profile holds at least one input)
    profiles = (ShapeProfile(name="calibration", shapes=dynamic),) if dynamic else ()
    spec = BuildSpec(
        model_path=model,
        profiles=profiles,
        compute_capabilities=(PROOF_CAPABILITY,),
        sku="calibration-proof",
    )
    try:
        engine = load_backend(backend)
        engine.check_targets(spec.compute_capabilities)
    except CompileError as exc:  # datacenter TensorRT needs a GPU of the target to build
        return BuildProof(status=Status.SKIPPED, detail=f"could not build here: {exc}")
    with tempfile.TemporaryDirectory(prefix="compile-build-proof-") as folder:
        built = Builders().build(engine.name, spec, Path(folder), None, None)
    shown = ", ".join(f"{name} {list(r.opt)}" for name, r in dynamic.items()) or "static shapes"
    if any(r.min != r.max for r in dynamic.values()):
        shown += ", batch 1 to 2"
    where = f"{engine.name} {engine.version}, compute capability {PROOF_CAPABILITY}, {shown}"
    if built.status != Status.OK:
        errors = [_SOURCE.sub("", error) for error in built.errors[:2]] or ["the builder returned no engine"]
        return BuildProof(status=Status.FAILED, detail=f"{'; '.join(errors)}{_readers(model, errors)} ({where})")
    import onnx

    nodes = onnx.load_model(model, load_external_data=False).graph.node
    reformats = reformat_kernels(built.layers, nodes)
    in_float = sorted(unquantized(built.layers, nodes))
    return BuildProof(
        status=Status.OK,
        detail=f"built with {where} in {built.seconds:.1f} s; {reformats.count} precision-boundary reformat kernel(s)"
        + (f"; {len(in_float)} node(s) with Q/DQ computed in float" if in_float else ""),
        reformats=reformats,
        float_nodes=in_float,
    )


def _batch_range(shape: list[int], dims: list | None, axis: int) -> ShapeRange:
    """One sample's ``shape``, its batch (``axis``) from 1 to 2 where the model's ``dims`` leave it dynamic."""
    if dims is None or axis >= len(shape) or isinstance(dims[axis], int):
        return ShapeRange(min=shape, opt=shape, max=shape)
    low, high = list(shape), list(shape)
    low[axis], high[axis] = 1, max(2, shape[axis])
    return ShapeRange(min=low, opt=shape, max=high)


def unquantized(kernels: list[Kernel], nodes, ops=MATMUL_OPS) -> dict[str, list[str]]:
    """Each node of ``ops`` among ``nodes`` (an ONNX graph's) that calibration gave a DequantizeLinear input and
    that kernels name, none of them computing in a quantized precision, with the precisions they compute in:
    TensorRT kept it in float despite its Q/DQ (an LSTM cell's Gemm of a constant initial state, in
    TensorRT-RTX 1.7), which pays for quantizing and gains nothing. ``compile check``'s quantized-matmul rule and
    calibrate's build proof judge by this one function, so calibrate never makes what check refuses."""
    producer = {out: n.op_type for n in nodes for out in n.output}
    found = {}
    for node in nodes:
        if node.op_type not in ops or not any(producer.get(i) == "DequantizeLinear" for i in node.input):
            continue
        naming = [kernel for kernel in kernels if node.name in kernel.onnx_nodes]
        if naming and not any(kernel.precision in QUANTIZED for kernel in naming):
            found[node.name] = sorted({kernel.precision or "none" for kernel in naming})
    return found


def reformat_kernels(layers: list[Kernel], nodes) -> Reformats:
    """The kernels of a built engine that only change a tensor's precision: TensorRT's reformat/copy layers, and
    (TensorRT-RTX compiles with Myelin, which names none so) kernels covering nothing but Q/DQ/Cast ``nodes`` (the
    model's) whose input and output types differ: a boundary no compute kernel absorbed."""
    ops = {n.name: n.op_type for n in nodes}
    found = [
        kernel
        for kernel in layers
        if kernel.profile in (0, None)
        and (
            _REFORMAT.search(f"{kernel.type} {kernel.name}")
            or (
                kernel.onnx_nodes
                and all(ops.get(node) in _CONVERSIONS for node in kernel.onnx_nodes)
                and set(kernel.input_types) != set(kernel.output_types)
            )
        )
    ]
    return Reformats(count=len(found), layers=[", ".join(k.onnx_nodes) or k.name for k in found[:REFORMATS_NAMED]])


_SOURCE = re.compile(r" In \w+ at /\S+")
"""Where in TensorRT's sources an error was raised: noise to a user."""
_NAMED = re.compile(r"[(\"'`]([^()\"'`\s]+)[)\"'`]")


def _readers(model: Path, errors: list[str]) -> str:
    """``; node 'x' (Mul) reads 'half_quantized'``: the nodes that read the tensors an error names in brackets or
    quotes (TensorRT names a refused quantized constant, not the node it feeds)."""
    import onnx

    from compiler.data.model import readers

    named = {m for error in errors for m in _NAMED.findall(error)}
    if not named:
        return ""
    graph = onnx.load_model(model, load_external_data=False).graph
    found = readers(graph)
    said = []
    for name in sorted(named):
        for node in found.get(name, []):
            if node.name and node.name not in named:
                fed = (
                    [f"'{r.name}' ({r.op_type})" for r in found.get(node.output[0], [])]
                    if node.op_type == "DequantizeLinear"
                    else []
                )
                said.append(
                    f"node '{node.name}' ({node.op_type}) reads '{name}'"
                    + (f" for {', '.join(fed[:3])}" if fed else "")
                )
    return "; " + ", ".join(said[:4]) if said else ""
