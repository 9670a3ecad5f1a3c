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


def keep_float_weights(path: Path, prepared: Path, excluded: frozenset[str]) -> int:
    """Give the ``excluded`` nodes their float weights back (the ``prepared`` model's); returns how many inputs were
    rewired. onnxruntime quantizes a weight once for all its readers, so an excluded node sharing it with quantized
    ones (the cells of an unrolled RNN share W_hh) would read it dequantized: a Q/DQ input TensorRT computes in
    float, which pays for quantizing, loses precision and is what check's quantized-matmul rule refuses."""
    proto = onnx.load_model(path, load_external_data=False)
    graph = proto.graph
    initializers = {i.name for i in graph.initializer}
    dequantized = {
        node.output[0]: node.input[0].removesuffix("_quantized")
        for node in graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in initializers and node.input[0].endswith("_quantized")
    }
    readers = [
        (node, index, dequantized[name])
        for node in graph.node
        if node.name in excluded
        for index, name in enumerate(node.input)
        if name in dequantized
    ]
    if not readers:
        return 0
    wanted = {weight for _, _, weight in readers}
    weights = {i.name: i for i in onnx.load_model(prepared).graph.initializer if i.name in wanted}
    readers = [(node, index, weight) for node, index, weight in readers if weight in weights]
    for weight in sorted({weight for _, _, weight in readers} - initializers):
        graph.initializer.append(weights[weight])
    for node, index, weight in readers:
        node.input[index] = weight
    save_model(without_orphans(proto), path.with_name(path.name + ".rewired"))
    path.with_name(path.name + ".rewired").replace(path)
    return len(readers)


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
