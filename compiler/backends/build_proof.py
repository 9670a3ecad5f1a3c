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
from compiler.core.records import BuildProof, Kernel, Reformats, Status

PROOF_CAPABILITY = "8.9"
"""Ada: the oldest compute capability that takes both INT8 and FP8."""
REFORMATS_NAMED = 10
"""How many reformat kernels a record names (all are counted)."""
_CONVERSIONS = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast"})
_REFORMAT = re.compile(r"reformat|copy", re.IGNORECASE)


def prove_build(model: Path, shapes: dict[str, tuple[int, ...]], dims: dict[str, list | None]) -> BuildProof:
    """Build ``model`` once for :data:`PROOF_CAPABILITY` with one profile: each dynamic input (``dims``: the model's
    input dims, str/None for dynamic) at the shape of ``shapes`` (one sample's). OK with what was built, FAILED
    with the builder's errors and the nodes they are about, SKIPPED when no backend here can build. An OK proof
    carries the engine's precision-boundary reformat kernels."""
    backend = next((kind.name for kind in preferred(gpu=False) if is_installed(kind.name)), None)
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
        name: ShapeRange(min=shape, opt=shape, max=shape)
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
    shown = ", ".join(f"{name} {list(r.min)}" for name, r in dynamic.items()) or "static shapes"
    where = f"{engine.name} {engine.version}, compute capability {PROOF_CAPABILITY}, {shown}"
    if built.status != Status.OK:
        errors = [_SOURCE.sub("", error) for error in built.errors[:2]] or ["the builder returned no engine"]
        return BuildProof(status=Status.FAILED, detail=f"{'; '.join(errors)}{_readers(model, errors)} ({where})")
    reformats = reformat_kernels(built.layers, model)
    return BuildProof(
        status=Status.OK,
        detail=f"built with {where} in {built.seconds:.1f} s; {reformats.count} precision-boundary reformat kernel(s)",
        reformats=reformats,
    )


def reformat_kernels(layers: list[Kernel], model: Path) -> Reformats:
    """The kernels of a built engine that only change a tensor's precision: TensorRT's reformat/copy layers, and
    (TensorRT-RTX compiles with Myelin, which names none so) kernels covering nothing but Q/DQ/Cast nodes of
    ``model`` whose input and output types differ: a boundary no compute kernel absorbed."""
    import onnx

    ops = {n.name: n.op_type for n in onnx.load_model(model, load_external_data=False).graph.node}
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
