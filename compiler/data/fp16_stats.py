"""FP16 range statistics computed in the graph: for every float intermediate, nodes appended to the FP32 model
reduce it to the seven numbers :class:`compiler.data.ranges.TensorStats` keeps (largest finite |x|, how many
values beyond 65504, how many non-zero values below FP16's smallest subnormal, non-zero, elements, non-finite,
whether any is beyond +65504 or NaN). onnxruntime then hands back scalars instead of every activation: no copy out,
no numpy pass, and one run of the model whatever its size (fetching activations needed the model run once per
group of tensors that fit ``--chunk-mb``).

The counts are the numpy figures exactly (a test holds both to the same tensors): the largest |x| is taken over the
finite values (onnxruntime's ReduceMax skips some values next to a NaN), and +inf counted as a magnitude beyond
the range or non-zero is taken back out, as numpy zeroes non-finite values first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

FP16_MAX = 65504.0
FP16_TINY = 2.0**-24
MIN_OPSET = 10
"""IsInf's: older models are measured by numpy from the fetched activations."""


@dataclass(frozen=True)
class StatOutputs:
    """The outputs appended for one tensor, by figure."""

    names: dict[str, str]


def opset_of(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


PREFIX = "__fp16_stats"
CONSTANTS = {"zero": 0.0, "max": FP16_MAX, "tiny": FP16_TINY}
COUNTED = {"inf": "infinite", "nan": "nan", "beyond": "beyond", "above": "above", "nonzero": "nonzero",
           "flushed": "flushed"}  # fmt: skip
"""The booleans counted per tensor (node output suffix -> figure)."""


def append_statistics(proto: onnx.ModelProto, tensors: list[str]) -> dict[str, StatOutputs]:
    """Append to ``proto`` (in place) the nodes reducing each float tensor to its figures, and their outputs."""
    graph = proto.graph
    for name, value in CONSTANTS.items():
        graph.initializer.append(helper.make_tensor(f"{PREFIX}_{name}", TensorProto.FLOAT, [], [value]))
    found: dict[str, StatOutputs] = {}
    for index, tensor in enumerate(tensors):
        nodes, names = _reductions(tensor, f"{PREFIX}_{index}")
        graph.node.extend(nodes)
        graph.output.extend(
            helper.make_tensor_value_info(output, TensorProto.FLOAT if figure == "peak" else TensorProto.INT64, [])
            for figure, output in names.items()
        )
        found[tensor] = StatOutputs(names)
    return found


def _reductions(tensor: str, p: str) -> tuple[list[onnx.NodeProto], dict[str, str]]:
    """The nodes of one tensor's figures (output names start with ``p``) and their outputs by figure."""
    zero, top, tiny = (f"{PREFIX}_{n}" for n in CONSTANTS)
    nodes = [
        helper.make_node("Abs", [tensor], [f"{p}_abs"]),
        helper.make_node("IsInf", [f"{p}_abs"], [f"{p}_inf_b"], detect_negative=0),
        helper.make_node("IsNaN", [tensor], [f"{p}_nan_b"]),
        helper.make_node("Or", [f"{p}_inf_b", f"{p}_nan_b"], [f"{p}_bad_b"]),
        helper.make_node("Where", [f"{p}_bad_b", zero, f"{p}_abs"], [f"{p}_finite"]),
        helper.make_node("ReduceMax", [f"{p}_finite"], [f"{p}_peak"], keepdims=0),
        helper.make_node("Greater", [f"{p}_abs", top], [f"{p}_beyond_b"]),
        helper.make_node("Greater", [tensor, top], [f"{p}_above_b"]),
        helper.make_node("Greater", [f"{p}_abs", zero], [f"{p}_nonzero_b"]),
        helper.make_node("Less", [f"{p}_abs", tiny], [f"{p}_small_b"]),
        helper.make_node("And", [f"{p}_nonzero_b", f"{p}_small_b"], [f"{p}_flushed_b"]),
        helper.make_node("Size", [tensor], [f"{p}_elements"]),
    ]
    names = {"peak": f"{p}_peak", "elements": f"{p}_elements"}
    for suffix, figure in COUNTED.items():
        nodes += [
            helper.make_node("Cast", [f"{p}_{suffix}_b"], [f"{p}_{suffix}_i"], to=TensorProto.INT64),
            helper.make_node("ReduceSum", [f"{p}_{suffix}_i"], [f"{p}_{suffix}"], keepdims=0),
        ]
        names[figure] = f"{p}_{suffix}"
    return nodes, names


def figures(outputs: StatOutputs, values: dict[str, np.ndarray]) -> dict[str, float | int | bool]:
    """One batch's figures of a tensor from the fetched scalars, as :meth:`TensorStats.add` counts them."""
    got = {figure: values[name] for figure, name in outputs.names.items()}
    infinite, nan = int(got["infinite"]), int(got["nan"])
    return {
        "peak": max(float(got["peak"]), 0.0),  # an empty tensor's ReduceMax is -inf
        "overflow": int(got["beyond"]) - infinite,
        "nonzero": int(got["nonzero"]) - infinite,
        "flushed": int(got["flushed"]),
        "elements": int(got["elements"]),
        "nonfinite": infinite + nan,
        "positive_overflow": int(got["above"]) > 0 or nan > 0,
    }
