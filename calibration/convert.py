"""FP16 by converting the model: TensorRT-RTX and TensorRT 11 take precision from the ONNX types."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from compiler.core.errors import InvalidInput
from compiler.data.batchnorm_folding import fold_unrepresentable_batchnorms
from compiler.data.model import first_line, load_model, name_unnamed_nodes, readers

QUANTIZATION_OPS = frozenset(
    {
        "DynamicQuantizeLinear",
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLSTM",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "ConvInteger",
        "MatMulInteger",
        "QLinearConv",
        "QLinearMatMul",
    }
)
"""Ops of a model that is already quantized (ddddocr ships one): their float inputs and scales are float32 by the
spec (DynamicQuantizeLinear takes float only), so the converter keeps them in FP32 instead of writing a model
onnxruntime refuses."""


def convert_fp16(
    src: Path, dst: Path, keep_nodes: frozenset[str] = frozenset(), keep_ops: frozenset[str] = frozenset()
) -> None:
    """Write an FP16 copy of ``src`` to ``dst``; inputs and outputs stay float32 (``keep_io_types``).

    Uses onnxruntime's float16 converter (its default block list keeps ops without FP16 kernels in FP32;
    values beyond FP16's range are clamped to +-65504). ``keep_nodes`` (names) and ``keep_ops`` (op types) stay in FP32
    too. The original metadata_props are kept.
    """
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    from calibration.calibrators import quiet, save_model

    src, dst = Path(src), Path(dst)
    model = load_model(src, digest=False)
    proto = onnx.load_model(model.path)  # external data was validated by load_model
    metadata = [(p.key, p.value) for p in proto.metadata_props]
    fold_unrepresentable_batchnorms(proto)
    name_unnamed_nodes(proto.graph)  # the block list matches by name
    blocked_ops = set(DEFAULT_OP_BLOCK_LIST) | QUANTIZATION_OPS | keep_ops
    keep_nodes = keep_nodes | shape_arithmetic(proto.graph)
    keep_nodes = keep_nodes | _constants_only_for(proto.graph, keep_nodes, blocked_ops)
    try:
        with quiet():
            converted = convert_float_to_float16(
                proto, keep_io_types=True, op_block_list=sorted(blocked_ops), node_block_list=sorted(keep_nodes)
            )
    except Exception as exc:
        raise InvalidInput(f"{src}: FP16 conversion failed ({first_line(exc)})") from None
    _drop_round_trips(converted.graph)
    _sort_topologically(converted.graph)
    del converted.metadata_props[:]
    for key, value in metadata:
        converted.metadata_props.add(key=key, value=value)
    dst.parent.mkdir(parents=True, exist_ok=True)
    staging = dst.with_name(f".{dst.name}.{os.getpid()}")
    try:
        save_model(converted, staging, data_name=dst.name + ".data")
        _check_runs(staging, src, converted.graph)
        os.replace(staging, dst)
    except BaseException:  # a stop, a full disk mid-save or a refused model: nothing half made stays in the cache
        staging.unlink(missing_ok=True)
        raise


SHAPE_INPUTS = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Range": (0, 1, 2),
    "ConstantOfShape": (0,),
    "TopK": (1,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "Pad": (1,),
    "OneHot": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}
"""The inputs that are shapes, sizes, counts or indices: what computes them stays in its types (Resize's roi and
scales are float32 by the ONNX spec; the rest are integers, sometimes computed in float)."""
SHAPE_ARITHMETIC_OPS = frozenset(
    {"Cast", "Add", "Sub", "Mul", "Div", "Floor", "Ceil", "Round", "Sqrt", "Neg", "Abs", "Min", "Max", "Pow",
     "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Constant", "ReduceProd",
     "ReduceSum", "Mod", "Equal", "Where", "Less", "Greater", "Not"}
)  # fmt: skip
"""The ops a shape is computed with: the walk back from a shape input goes through these only (it stops at Shape,
whose input is data, and at anything that computes on activations)."""


def shape_arithmetic(graph: onnx.GraphProto) -> set[str]:
    """The names of the nodes that compute a shape input (:data:`SHAPE_INPUTS`), walking back through
    :data:`SHAPE_ARITHMETIC_OPS`: a YOLO export's ``Cast(Shape(x)[2], FLOAT) * stride`` converted to FP16 gives 2048
    for 2049, and a Reshape of the wrong size; kept in FP32, nothing changes."""
    producer = {name: node for node in graph.node for name in node.output}
    pending = [node.input[i] for node in graph.node for i in SHAPE_INPUTS.get(node.op_type, ()) if i < len(node.input)]
    kept: set[str] = set()
    while pending:
        node = producer.get(pending.pop())
        if node is None or node.name in kept or node.op_type not in SHAPE_ARITHMETIC_OPS:
            continue
        kept.add(node.name)
        pending.extend(node.input)
    return kept


def _constants_only_for(graph: onnx.GraphProto, keep_nodes: frozenset[str], keep_ops: set[str]) -> set[str]:
    """The names of the Constant nodes whose every reader stays in FP32 (the graph's nodes are all named):
    converted, a constant beyond 65504 that ``--exclude`` of its reader meant to keep would still be clamped.
    Initializers need nothing: the converter keeps those only FP32 nodes read."""
    readers_of = readers(graph)
    return {
        node.name
        for node in graph.node
        if node.op_type == "Constant"
        and (reading := readers_of.get(node.output[0], []))
        and all(r.op_type in keep_ops or r.name in keep_nodes for r in reading)
    }


def _check_runs(path: Path, src: Path, graph: onnx.GraphProto) -> None:
    """The converted model as onnxruntime loads it (type inference over every node), before anything builds or
    compares it; a refusal names the node, its op and the ``--exclude`` that keeps it in FP32, never the staging
    file (which is gone by the time anyone reads the message)."""
    import re

    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        message = first_line(exc).split(" failed:", 1)[-1].strip()
        found = re.search(r"in node \((.+?)\)", message)
        node = found.group(1) if found else None
        op = next((n.op_type for n in graph.node if n.name == node), "?")
        advice = f"keep it in FP32 with --exclude {node}" if node else "--exclude the node it names"
        raise InvalidInput(
            f"{src}: the FP16 conversion is not a model onnxruntime can load"
            + (f" at node '{node}' ({op})" if node else "")
            + f": {message}; {advice}"
        ) from None


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """The converter appends the input Casts at the end; the ONNX checker needs producers first."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(name in available for name in n.input)]
        if not ready:  # a cycle or an outer-scope name: keep the remaining order
            ordered.extend(pending)
            break
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        ready_ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ready_ids]
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in ordered]
    del graph.node[:]
    graph.node.extend(nodes)


def _cast_to(node: onnx.NodeProto) -> int | None:
    if node.op_type != "Cast":
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _drop_round_trips(graph: onnx.GraphProto) -> None:
    """Remove FP32 -> FP16 -> FP32 Cast pairs the converter puts between two nodes it keeps in FP32.

    onnxruntime's converter casts every blocked node's output to FP16 and back before the next blocked node, so a
    chain kept in FP32 (``--exclude``) still squeezes its values through FP16, and overflows there on a GPU. The
    readers of the round trip read the FP32 value itself instead.
    """
    readers_of = readers(graph)
    outputs = {o.name for o in graph.output}
    float32 = _float32_tensors(graph)
    renamed: dict[str, str] = {}
    dropped: set[int] = set()
    removed_tensors: set[str] = set()
    for node in graph.node:
        if _cast_to(node) != onnx.TensorProto.FLOAT16 or node.output[0] in outputs or node.input[0] not in float32:
            continue  # a Cast from an integer (shape arithmetic: Range's limit) is no round trip: its type stays
        half = node.output[0]
        back = readers_of.get(half, [])
        if not back or any(_cast_to(r) != onnx.TensorProto.FLOAT or r.output[0] in outputs for r in back):
            continue
        for cast in back:
            renamed[cast.output[0]] = node.input[0]
            dropped.add(id(cast))
            removed_tensors.add(cast.output[0])
        dropped.add(id(node))
        removed_tensors.add(half)
    if not dropped:
        return
    kept = [n for n in graph.node if id(n) not in dropped]
    for node in kept:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
    del graph.node[:]
    graph.node.extend(kept)
    values = [v for v in graph.value_info if v.name not in removed_tensors]
    del graph.value_info[:]
    graph.value_info.extend(values)


def _float32_tensors(graph: onnx.GraphProto) -> set[str]:
    """The tensors known to be float32 after conversion: onnx's type inference over the graph (a tensor whose
    type it cannot tell is left out, so nothing unknown is taken for a float)."""
    model = onnx.helper.make_model(graph)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # a graph onnx cannot infer: treat nothing as known, drop no Cast
        return set()
    typed = [*inferred.input, *inferred.value_info, *inferred.output]
    found = {v.name for v in typed if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    found |= {i.name for i in inferred.initializer if i.data_type == onnx.TensorProto.FLOAT}
    return found | {n.output[0] for n in inferred.node if _cast_to(n) == onnx.TensorProto.FLOAT}
