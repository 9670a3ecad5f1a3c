"""Which quantized nodes hurt: each node's local error when it alone is quantized, from one onnxruntime pass.

For every node that runs quantized (Conv, ConvTranspose, Gemm, MatMul with DequantizeLinear inputs) the Q/DQ
model's copy of it is fed the FP32 model's own activations through its Q/DQ pairs (and its quantized weights),
and its output is compared with the FP32 model's output of that node: the error quantizing that one node adds,
without the drift of everything before it. One graph holds the FP32 model and every such copy, so one run over a
few samples ranks every node. (onnxruntime's ``qdq_loss_debug`` compares each tensor before and after its Q/DQ
pair; on a tensor whose energy sits in one outlier channel that error is small while the other channels are
rounded to zero, so the consumer's output is what is measured here.)

Quantization is inserted per tensor: every quantized reader of a tensor shares its Q/DQ pair, so the unit a
fallback takes out is a :class:`Region`: a quantized tensor with all its quantized readers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from calibration.calibrators import TENSORRT_QUANTIZED_OPS, default_opset, save_model
from compiler.data.agreement import sqnr_db
from compiler.data.datasets import Dataset
from compiler.data.footprint import Fit, early_order
from compiler.data.model import node_name
from compiler.data.sampling import batches
from compiler.data.session import session

PREFIX = "sensitivity::"


@dataclass(frozen=True)
class Region:
    """A quantized activation tensor and the quantized nodes reading it: they come out of the low precision
    together (or the tensor stays quantized for the others)."""

    tensor: str
    nodes: tuple[str, ...]
    sqnr_db: float
    """The worst local SQNR among ``nodes``."""


def _quantized_nodes(graph: onnx.GraphProto) -> tuple[list[onnx.NodeProto], dict[str, str]]:
    """The quantized nodes, and each DequantizeLinear output's float source (the activation its Q node reads; the
    quantized initializer for weights)."""
    quantized_from = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    dequantized = {
        n.output[0]: quantized_from.get(n.input[0], n.input[0]) for n in graph.node if n.op_type == "DequantizeLinear"
    }
    nodes = [n for n in graph.node if n.op_type in TENSORRT_QUANTIZED_OPS and any(i in dequantized for i in n.input)]
    return nodes, dequantized


def quantized_node_names(qdq: Path) -> set[str]:
    """The names of the nodes ``qdq`` runs quantized."""
    return {n.name for n in _quantized_nodes(onnx.load_model(qdq, load_external_data=False).graph)[0]}


def local_errors(
    prepared: Path,
    qdq: Path,
    dataset: Dataset,
    indices: np.ndarray,
    fit: Fit,
    progress: Callable[[int], None] | None = None,
) -> dict[str, tuple[float, list[str]]]:
    """Quantized node -> (its local SQNR in dB, its quantized activation inputs), over ``indices``, in runs of as
    many samples as ``fit`` allows for the sensitivity model's activations."""
    path, compared, statistics = _sensitivity_model(prepared, qdq)
    try:
        run = fit.samples([path])
        runner = session(path, "sensitivity model")
    finally:
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".data").unlink(missing_ok=True)
    names = [o.name for o in runner.get_outputs()]
    sums = {node: [0.0, 0.0, 0.0, 0] for node in compared}  # sum x, sum x^2, sum err^2, count
    for chunk in batches(indices, run):
        values = dict(zip(names, runner.run(names, dataset.read(chunk)), strict=True))
        for node, outputs in statistics.items():
            _accumulate(sums[node], *(values[name] for name in outputs))
        if progress:
            progress(len(chunk))
    return {node: (sqnr_db(*sums[node]), compared[node][2]) for node in compared}


def _sensitivity_model(
    prepared: Path, qdq: Path
) -> tuple[Path, dict[str, tuple[str, str, list[str]]], dict[str, tuple[str, str, str, str]]]:
    """The FP32 model holding a local copy of every quantized node and, as its only outputs, the statistics that
    measure each copy against the FP32 node, saved beside ``qdq`` (both models are freed before it runs); each
    node's (FP32 output, local output, quantized activations) and its statistics' outputs."""
    float_model = onnx.load_model(prepared)
    quantized_model = onnx.load_model(qdq)
    del float_model.opset_import[:]  # FP8 Q/DQ needs the opset (19) the quantizer raised the Q/DQ model to
    float_model.opset_import.extend(quantized_model.opset_import)
    graph = float_model.graph
    first_added = len(graph.node)
    compared = _add_local_copies(graph, quantized_model.graph)
    del graph.output[:]
    statistics = {
        node: _error_statistics(graph, reference, local_name, default_opset(float_model))
        for node, (reference, local_name, _) in compared.items()
    }
    early_order(graph, first_added)  # each copy and its statistics run as soon as they can, freeing what they read
    path = qdq.with_name(qdq.name + ".sensitivity.onnx")
    save_model(float_model, path, path.name + ".data")
    return path, compared, statistics


def _add_local_copies(graph: onnx.GraphProto, quantized: onnx.GraphProto) -> dict[str, tuple[str, str, list[str]]]:
    """Add to the FP32 ``graph`` a copy (prefixed) of each node ``quantized`` runs quantized, fed the FP32 model's
    own activations through its Q/DQ pairs and its quantized weights; node -> (its FP32 output, its copy's
    output, its quantized activation inputs). A node the Q/DQ model renamed or fused is left out: nothing of the
    FP32 model to compare with."""
    nodes, dequantized = _quantized_nodes(quantized)
    float_names = {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
    float_names |= {i.name for i in graph.initializer}
    qdq_nodes = {n.output[0]: n for n in quantized.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    initializers = {i.name: i for i in quantized.initializer}
    present = {i.name for i in graph.initializer}
    added: list[onnx.NodeProto] = []
    copied: set[str] = set()

    def local(name: str) -> str:
        """The tensor as the Q/DQ model computes it from the FP32 model's own values (prefixed), adding the Q/DQ
        nodes that make it; FP32 tensors stay themselves."""
        if name in float_names or not name:
            return name
        producer = qdq_nodes.get(name)
        if producer is not None and name not in copied:
            copied.add(name)
            inputs = [
                producer.input[0]
                if producer.op_type == "QuantizeLinear" and producer.input[0] in float_names
                else local(producer.input[0]),
                *(initializer(i) for i in producer.input[1:]),
            ]
            added.append(_prefixed_copy(producer, inputs))
        elif producer is None:
            initializer(name)
        return PREFIX + name

    def initializer(name: str) -> str:
        """A weight (or scale, zero point) of the Q/DQ model, copied in once (prefixed); other names stay."""
        if name in initializers and PREFIX + name not in present:
            copy = onnx.TensorProto()
            copy.CopyFrom(initializers[name])
            copy.name = PREFIX + name
            graph.initializer.append(copy)
            present.add(copy.name)
        return PREFIX + name if name in initializers else name

    compared: dict[str, tuple[str, str, list[str]]] = {}
    for node in nodes:
        if node.output[0] not in float_names:
            continue
        inputs = [local(i) if i in dequantized else (i if i in float_names else initializer(i)) for i in node.input]
        added.append(_prefixed_copy(node, inputs))
        activations = [dequantized[i] for i in node.input if i in dequantized and dequantized[i] in float_names]
        compared[node_name(node)] = (node.output[0], PREFIX + node.output[0], activations)
    graph.node.extend(added)
    return compared


def _prefixed_copy(node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
    """``node`` reading ``inputs``, with its name and output prefixed: a copy that lives beside the original."""
    return helper.make_node(
        node.op_type,
        inputs,
        [PREFIX + node.output[0]],
        PREFIX + node_name(node),  # unique: a model's unnamed nodes would share PREFIX
        domain=node.domain,
        **{a.name: helper.get_attribute_value(a) for a in node.attribute},
    )


def _accumulate(sums: list, means: np.ndarray, spreads: np.ndarray, errors: np.ndarray, size: np.ndarray) -> None:
    """Add one batch's :func:`_error_statistics` to ``sums`` (sum x, sum x^2, sum err^2, count), in float64."""
    row_means, count = means.astype(np.float64), int(size)
    per_row = count // max(row_means.size, 1)
    sums[0] += per_row * float(row_means.sum())
    sums[1] += float(spreads.astype(np.float64).sum()) + per_row * float((row_means**2).sum())
    sums[2] += float(errors.astype(np.float64).sum())
    sums[3] += count


def _error_statistics(graph: onnx.GraphProto, reference: str, local: str, opset: int) -> tuple[str, str, str, str]:
    """Add the graph outputs that measure ``local`` against ``reference`` without fetching either: per row (the
    last axis) the reference's mean, its squared deviation from that mean and the squared error, and the element
    count. Fetching whole activations of every quantized node made onnxruntime allocate fresh memory for each
    one on every batch (several times the FP32 model's own run time); row sums keep float32 accumulation short,
    and the rows are combined in float64."""
    means, centered, spreads = (
        f"{PREFIX}mean::{reference}",
        f"{PREFIX}centered::{reference}",
        f"{PREFIX}spread::{reference}",
    )
    difference, errors, size = (
        f"{PREFIX}error::{reference}",
        f"{PREFIX}errors::{reference}",
        f"{PREFIX}size::{reference}",
    )
    graph.node.extend(
        [
            _reduce("ReduceMean", reference, means, opset, keepdims=1),
            helper.make_node("Sub", [reference, means], [centered], centered),
            _reduce("ReduceSumSquare", centered, spreads, opset, keepdims=0),
            helper.make_node("Sub", [reference, local], [difference], difference),
            _reduce("ReduceSumSquare", difference, errors, opset, keepdims=0),
            helper.make_node("Size", [reference], [size], size),
        ]
    )
    graph.output.extend(
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in (means, spreads, errors)]
    )
    graph.output.append(helper.make_tensor_value_info(size, onnx.TensorProto.INT64, None))
    if opset >= AXES_AS_INPUT and not any(i.name == LAST_AXIS for i in graph.initializer):
        graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), LAST_AXIS))
    return means, spreads, errors, size


LAST_AXIS = PREFIX + "last-axis"
AXES_AS_INPUT = 18
"""ReduceMean and ReduceSumSquare take their axes as an input from opset 18, as an attribute before."""


def _reduce(op: str, tensor: str, output: str, opset: int, keepdims: int) -> onnx.NodeProto:
    if opset >= AXES_AS_INPUT:
        return helper.make_node(op, [tensor, LAST_AXIS], [output], output, keepdims=keepdims)
    return helper.make_node(op, [tensor], [output], output, axes=[-1], keepdims=keepdims)


def regions(errors: dict[str, tuple[float, list[str]]]) -> list[Region]:
    """The quantized tensors with their quantized readers, most damaging (lowest local SQNR) first."""
    readers: dict[str, list[str]] = {}
    for node, (_, tensors) in errors.items():
        for tensor in tensors:
            readers.setdefault(tensor, []).append(node)
    found = [
        Region(tensor, tuple(sorted(nodes)), min(errors[n][0] for n in nodes)) for tensor, nodes in readers.items()
    ]
    return sorted(found, key=lambda r: (r.sqnr_db, r.tensor))


def source_name(node: str, source_names: set[str]) -> str:
    """The source model's name of a node of the prepared model: onnxruntime's pre-processing renames the nodes it
    fuses ``NAME/MatMulAddFusion``; ``--exclude`` takes either."""
    if node in source_names:
        return node
    head, _, tail = node.rpartition("/")
    return head if head in source_names and tail.endswith("Fusion") else node


def ranking(errors: dict[str, tuple[float, list[str]]], qdq: Path, source_names: set[str]) -> list[dict]:
    """report.json's ``sensitivity``: every quantized node, most damaging (lowest local SQNR) first, with the name
    ``--exclude`` takes for it."""
    ops = {n.name: n.op_type for n in onnx.load_model(qdq, load_external_data=False).graph.node}
    ranked = sorted(errors.items(), key=lambda item: (item[1][0], item[0]))
    return [
        {
            "rank": i + 1,
            "node": node,
            "exclude": source_name(node, source_names),
            "op": ops.get(node, ""),
            "sqnr_db": sqnr,
            "tensors": tensors,
        }
        for i, (node, (sqnr, tensors)) in enumerate(ranked)
    ]
