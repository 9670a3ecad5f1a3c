"""BatchNormalization computed in FP32 before an FP16 conversion, where FP16 cannot hold its constants.

A detector's BatchNormalization can carry a running variance of 9.8e7: FP16 clamps it to 65504, which scales that
channel ~40x and collapsed one real detector's output (cosine 0.19). What the node computes, ``x * s + t`` with
``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s``, is moderate; so it is computed here in FP32 and folded
into the Conv before it (as onnxruntime's basic Conv+BN fusion does, without its ``com.microsoft`` ops), or written
as a Mul and an Add where no Conv can take it. Strongly typed TensorRT would fold in the types the model has, so
this must happen in the ONNX model. Every tensor name stays: the folded Conv keeps its output and the
BatchNormalization becomes an Identity, so ranges and fallbacks still name the tensors of the user's model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.data.model import node_name, readers

FP16_MAX = 65504.0
"""The largest finite FP16 value; the converter clamps beyond it."""


def inline_float32(tensor: onnx.TensorProto | None) -> bool:
    """A float32 constant whose values are in the model itself (not external data), so they can be read here."""
    return tensor is not None and tensor.data_type == TensorProto.FLOAT and tensor.data_location != TensorProto.EXTERNAL


def fold_unrepresentable_batchnorms(model: onnx.ModelProto) -> list[str]:
    """Fold, in place, every inference BatchNormalization of the model's graph with a constant beyond FP16's range;
    the names of those folded (a node without a name by its output)."""
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    folded = []
    for node in list(graph.node):
        factors = _unrepresentable(node, initializers) if node.op_type == "BatchNormalization" else None
        if factors is None:
            continue
        scale, shift = factors
        with np.errstate(over="ignore"):  # a weight beyond float32 is infinite here as in the source's arithmetic
            done = _into_conv(graph, node, initializers, scale, shift) or _as_mul_add(model, node, scale, shift)
        if not done:
            continue
        folded.append(node_name(node))
    if folded:
        _drop_unread(graph)
    return folded


def _unrepresentable(node: onnx.NodeProto, initializers: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference BatchNormalization whose float32 constants FP16 cannot hold, else None."""
    if len(node.input) != 5 or len(node.output) != 1:
        return None  # training mode, or an input that is not a constant
    tensors = [initializers.get(name) for name in node.input[1:]]
    if not all(map(inline_float32, tensors)):
        return None
    gamma, beta, mean, var = params = [numpy_helper.to_array(t).astype(np.float64) for t in tensors]
    epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    if any(p.ndim != 1 or p.shape != gamma.shape or not np.isfinite(p).all() for p in params) or (
        (var + epsilon <= 0).any()  # a model onnxruntime would compute NaN for: left as it is
    ):
        return None
    if max(float(np.abs(p).max(initial=0.0)) for p in params) <= FP16_MAX:
        return None
    scale = gamma / np.sqrt(var + epsilon)
    return scale, beta - mean * scale


def _into_conv(graph: onnx.GraphProto, node: onnx.NodeProto, initializers: dict, scale, shift) -> bool:
    """Fold into the Conv producing the BatchNormalization's input, if that Conv and its weights are its alone."""
    conv = next((n for n in graph.node if node.input[0] in n.output), None)
    reads = readers(graph)
    if conv is None or conv.op_type != "Conv" or node.input[0] in {o.name for o in graph.output}:
        return False
    weight = initializers.get(conv.input[1])
    bias = initializers.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    own = [weight] + ([bias] if len(conv.input) > 2 and conv.input[2] else [])
    if not all(map(inline_float32, own)):
        return False
    if reads.get(node.input[0]) != [node] or any(reads.get(t.name) != [conv] for t in own):
        return False
    kernel = numpy_helper.to_array(weight).astype(np.float64)
    if kernel.shape[0] != scale.shape[0]:
        return False
    folded = kernel * scale.reshape((-1,) + (1,) * (kernel.ndim - 1))
    weight.CopyFrom(numpy_helper.from_array(folded.astype(np.float32), weight.name))
    base = numpy_helper.to_array(bias).astype(np.float64) if bias is not None else np.zeros_like(scale)
    new_bias = numpy_helper.from_array((base * scale + shift).astype(np.float32), f"{node.output[0]}.folded_bias")
    graph.initializer.append(new_bias)
    del conv.input[2:]
    conv.input.append(new_bias.name)
    _replace(node, helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
    return True


def _as_mul_add(model: onnx.ModelProto, node: onnx.NodeProto, scale, shift) -> bool:
    """The BatchNormalization as ``x * scale + shift`` with constants shaped [C, 1, ...] for its input's rank."""
    graph = model.graph
    rank = _rank(graph, node.input[0])
    if rank is None:
        try:
            rank = _rank(onnx.shape_inference.infer_shapes(model).graph, node.input[0])
        except Exception:  # a model shape inference cannot take keeps its BatchNormalization
            rank = None
    if rank is None or rank < 2:
        return False
    shape = (-1,) + (1,) * (rank - 2)
    names = [f"{node.output[0]}.folded_scale", f"{node.output[0]}.folded_shift", f"{node.output[0]}.scaled"]
    for name, values in zip(names[:2], (scale, shift), strict=True):
        graph.initializer.append(numpy_helper.from_array(values.reshape(shape).astype(np.float32), name))
    add = helper.make_node("Add", [names[2], names[1]], [node.output[0]], name=f"{node_name(node)}_add")
    _replace(node, helper.make_node("Mul", [node.input[0], names[0]], [names[2]], name=node.name))
    index = next(i for i, n in enumerate(graph.node) if n is node or list(n.output) == [names[2]])
    graph.node.insert(index + 1, add)
    return True


def _rank(graph: onnx.GraphProto, name: str) -> int | None:
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            return len(value.type.tensor_type.shape.dim)
    return None


def _replace(node: onnx.NodeProto, new: onnx.NodeProto) -> None:
    node.Clear()
    node.CopyFrom(new)


def _drop_unread(graph: onnx.GraphProto) -> None:
    """Initializers no node reads any more (the folded nodes' statistics) leave the graph."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
