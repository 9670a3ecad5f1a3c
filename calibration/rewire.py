"""What each node of a written Q/DQ model reads: float values and weights for the nodes not quantized, and no Q/DQ
left without a reader. onnxruntime puts one Q/DQ pair on a tensor (and one quantized copy on a weight) for all its
readers; TensorRT computes quantized only where a quantized op reads them."""

from __future__ import annotations

from pathlib import Path

import onnx

from calibration.calibrators import TENSORRT_QUANTIZED_OPS, save_model


def keep_float_consumers(path: Path, excluded: frozenset[str] = frozenset()) -> int:
    """Give the float tensor back to the nodes that are not quantized; returns how many inputs were rewired.

    onnxruntime puts one Q/DQ pair on a tensor and routes every consumer through it, so a LayerNorm output read by a
    MatMul and by a residual Add hands the Add quantized values too: precision lost where TensorRT computes in
    float anyway. Only TensorRT's quantized ops keep reading the DequantizeLinear output (not those ``excluded``).
    """
    proto = onnx.load_model(path, load_external_data=False)
    graph = proto.graph
    quantized_from = {node.output[0]: node.input[0] for node in graph.node if node.op_type == "QuantizeLinear"}
    float_of = {
        node.output[0]: quantized_from[node.input[0]]
        for node in graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in quantized_from
    }
    outputs = {o.name for o in graph.output}
    rewired = 0
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") or (
            node.op_type in TENSORRT_QUANTIZED_OPS and node.name not in excluded
        ):
            continue
        for index, name in enumerate(node.input):
            if name in float_of and float_of[name] not in outputs:
                node.input[index] = float_of[name]
                rewired += 1
    if rewired:
        save_model(proto, path.with_name(path.name + ".rewired"))
        path.with_name(path.name + ".rewired").replace(path)
    return rewired


def keep_float_weights(path: Path, prepared: Path, excluded: frozenset[str]) -> None:
    """Give the ``excluded`` nodes their float weights back (the ``prepared`` model's, :func:`float_nodes`).
    onnxruntime quantizes a weight once for all its readers, so an excluded node sharing it with quantized ones (the
    cells of an unrolled RNN share W_hh) would read it dequantized: a Q/DQ input TensorRT computes in float, which
    pays for quantizing, loses precision and is what check's quantized-matmul rule refuses. The prepared model is
    loaded only when an excluded node reads a dequantized weight."""
    proto = onnx.load_model(path, load_external_data=False)
    graph = proto.graph
    initializers = {i.name for i in graph.initializer}
    weights = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in initializers}
    if not any(name in weights for node in graph.node if node.name in excluded for name in node.input):
        return
    model = float_nodes(proto, onnx.load_model(prepared), set(excluded))
    save_model(without_orphans(model), path.with_name(path.name + ".rewired"))
    path.with_name(path.name + ".rewired").replace(path)


def float_nodes(qdq: onnx.ModelProto, prepared: onnx.ModelProto, nodes: set[str]) -> onnx.ModelProto:
    """A copy of the Q/DQ model whose ``nodes`` read their float activations and float weights (the prepared
    model's) instead of the dequantized ones; Q/DQ pairs left without readers are dropped by onnxruntime."""
    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    graph = model.graph
    quantized_from = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    weights = {i.name: i for i in prepared.graph.initializer}
    present = {i.name for i in graph.initializer}
    float_of: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        source = node.input[0]
        if source in quantized_from:
            float_of[node.output[0]] = quantized_from[source]
        elif source.endswith("_quantized") and source.removesuffix("_quantized") in weights:
            float_of[node.output[0]] = source.removesuffix("_quantized")
    for node in graph.node:
        if node.name not in nodes:
            continue
        for index, name in enumerate(node.input):
            if name in float_of:
                original = float_of[name]
                if original in weights and original not in present:
                    graph.initializer.append(weights[original])
                    present.add(original)
                node.input[index] = original
    return model


def without_orphans(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the Q/DQ nodes nothing reads any more and the initializers nothing names (what
    onnxruntime would drop at load, and the quantizer never writes)."""
    graph = model.graph
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        orphans = [
            node
            for node in graph.node
            if node.op_type in ("QuantizeLinear", "DequantizeLinear") and not any(out in read for out in node.output)
        ]
        if not orphans:
            break
        for node in orphans:
            graph.node.remove(node)
    named = {name for node in graph.node for name in node.input} | {i.name for i in graph.input}
    for initializer in [i for i in graph.initializer if i.name not in named]:
        graph.initializer.remove(initializer)
    return model
