"""Partition boundaries of the source model: TensorRT's own parser partitions (as ``compile inspect`` finds them;
the same ones ONNX Runtime's TensorRT execution provider takes), the nodes that would fall back, and the tensors
crossing each boundary with their bytes at each profile's opt and max shapes (ONNX shape inference with the
profile's dims)."""

from __future__ import annotations

from math import prod
from typing import Any

import onnx
from onnx import helper

from compiler.backends.view import Partition, TensorRTView
from compiler.backends.view_cache import tensorrt_view
from compiler.core.profiles import ShapeProfile
from compiler.core.records import CheckResult, Status
from compiler.core.text import human_size
from compiler.data.model import OnnxModel, _infer_shapes

MAX_EVIDENCE = 20


def _shapes_at(model: OnnxModel, dims: dict[str, list[int]]) -> dict[str, tuple[int | None, list[int] | None]]:
    """Tensor name -> (element bytes, dims) by shape inference with the inputs set to ``dims``."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    del proto.graph.value_info[:]
    for value in proto.graph.input:
        if value.name in dims:
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in dims[value.name]:
                shape.dim.add().dim_value = size
    try:
        inferred = _infer_shapes(proto)
    except Exception:  # a model ONNX cannot infer at these dims: sizes stay unknown, not a crash
        inferred = proto
    found: dict[str, tuple[int | None, list[int] | None]] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tensor = value.type.tensor_type
        try:
            size = helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize if tensor.elem_type else None
        except (KeyError, ValueError, TypeError):
            size = None
        known = tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)
        found[value.name] = (size, [d.dim_value for d in tensor.shape.dim] if known else None)
    return found


def _shape_sets(model: OnnxModel, profiles: list[ShapeProfile]) -> dict[str, dict[str, list[int]]]:
    """``<profile> opt`` / ``<profile> max`` -> input dims; the model's own dims when there are no profiles."""
    if profiles:
        return {
            f"{p.name} {which}": {name: list(getattr(r, which)) for name, r in p.shapes.items()}
            for p in profiles
            for which in ("opt", "max")
        }
    return {"static": {}}


def check_partitions(
    model: OnnxModel,
    backend: str,
    profiles: list[ShapeProfile],
    max_partitions: int | None,
    max_unsupported: int | None,
    max_boundary_mb: float | None,
) -> CheckResult:
    """The partitions check: TensorRT's partitions of ``model``, the nodes falling back and the bytes crossing the
    boundaries at each profile's opt and max shapes; failed past any of the limits given (None: no limit)."""
    view = tensorrt_view(model, backend)  # EnvironmentProblem (exit 3) when the backend is missing
    figures = _figures(view, model, profiles)
    failures = _failures(figures, max_partitions, max_unsupported, max_boundary_mb)
    summary = _summary(figures)
    return CheckResult(
        name="partitions",
        status=Status.FAILED if failures else Status.OK,
        evidence=_evidence(figures),
        figures=figures,
        summary=(f"{summary}: " + "; ".join(failures)) if failures else summary,
    )


def _figures(view: TensorRTView, model: OnnxModel, profiles: list[ShapeProfile]) -> dict[str, Any]:
    """check.json's figures: the backend, each partition with its boundary tensors, the nodes falling back, the
    boundary bytes per shape set and the boundary tensors no shape set can size."""
    graph_io = {v.name for v in (*model.proto.graph.input, *model.proto.graph.output)}
    sets = {label: _shapes_at(model, dims) for label, dims in _shape_sets(model, profiles).items()}
    partitions: list[dict[str, Any]] = []
    boundary_bytes: dict[str, int] = dict.fromkeys(sets, 0)
    unsized: set[str] = set()
    for partition in view.partitions:
        tensors = _boundary(partition, graph_io, sets)
        for tensor in tensors:
            for label, size in tensor["bytes"].items():
                if size is None:
                    unsized.add(tensor["name"])
                else:
                    boundary_bytes[label] += size
        partitions.append(
            {
                "nodes": partition.nodes,
                "node_count": partition.node_count,
                "inputs": partition.inputs,
                "outputs": partition.outputs,
                "boundary": tensors,
            }
        )
    return {
        "backend": f"{view.backend} {view.version}",
        "partitions": partitions,
        "unsupported": [
            {"index": u.index, "name": u.name, "op": u.op, "domain": u.domain, "reason": u.reason}
            for u in view.unsupported
        ],
        "boundary_bytes": boundary_bytes,
        "unsized_tensors": sorted(unsized),
    }


def _boundary(
    partition: Partition, graph_io: set[str], sets: dict[str, dict[str, tuple[int | None, list[int] | None]]]
) -> list[dict[str, Any]]:
    """The tensors crossing a partition's boundary (the graph's own inputs and outputs do not), each with its
    bytes at every shape set (None: shape inference cannot size it)."""
    tensors = []
    for name in (*partition.inputs, *partition.outputs):
        if name in graph_io:
            continue
        sizes = {}
        for label, shapes in sets.items():
            itemsize, dims = shapes.get(name, (None, None))
            sizes[label] = None if itemsize is None or dims is None else itemsize * prod(dims)
        tensors.append({"name": name, "direction": "in" if name in partition.inputs else "out", "bytes": sizes})
    return tensors


def _evidence(figures: dict[str, Any]) -> list[str]:
    """The first nodes falling back, then the first boundary tensors with their sizes (at most MAX_EVIDENCE of
    each)."""
    falling_back = [
        f"falls back: node {u['index']} {u['name'] or '(unnamed)'} ({u['op']}): {u['reason']}"
        for u in figures["unsupported"]
    ]
    crossing = [
        f"partition {index} {'input' if tensor['direction'] == 'in' else 'output'} {tensor['name']}: "
        + ", ".join(f"{label} {'?' if b is None else human_size(b)}" for label, b in tensor["bytes"].items())
        for index, partition in enumerate(figures["partitions"])
        for tensor in partition["boundary"]
    ]
    return falling_back[:MAX_EVIDENCE] + crossing[:MAX_EVIDENCE]


def _failures(
    figures: dict[str, Any], max_partitions: int | None, max_unsupported: int | None, max_boundary_mb: float | None
) -> list[str]:
    """Each limit the figures exceed, with the flag that set it; boundary tensors of unknown size break
    ``--max-boundary-mb`` too, since it cannot be held."""
    partitions, unsupported, unsized = figures["partitions"], figures["unsupported"], figures["unsized_tensors"]
    worst = max(figures["boundary_bytes"].values(), default=0)
    failures = []
    if max_partitions is not None and len(partitions) > max_partitions:
        failures.append(f"{len(partitions)} partitions, more than --max-partitions {max_partitions}")
    if max_unsupported is not None and len(unsupported) > max_unsupported:
        names = ", ".join(u["name"] or f"node {u['index']}" for u in unsupported[:5])
        failures.append(
            f"{len(unsupported)} node(s) TensorRT does not take ({names}), more than "
            f"--max-unsupported {max_unsupported}"
        )
    if max_boundary_mb is not None and worst > max_boundary_mb * (1 << 20):
        failures.append(
            f"boundary tensors of {human_size(worst)} per inference, more than --max-boundary-mb {max_boundary_mb:g}"
        )
    if max_boundary_mb is not None and unsized:
        failures.append(
            f"boundary tensor(s) {', '.join(unsized[:5])} of unknown size (shape inference "
            f"cannot size them), so --max-boundary-mb cannot be held"
        )
    return failures


def _summary(figures: dict[str, Any]) -> str:
    """How many partitions and falling-back nodes, and (when the model is split) the most bytes crossing."""
    partitions, unsupported, unsized = figures["partitions"], figures["unsupported"], figures["unsized_tensors"]
    summary = f"{len(partitions)} TensorRT partition(s), {len(unsupported)} node(s) falling back"
    if len(partitions) > 1 or unsupported:
        worst = max(figures["boundary_bytes"].values(), default=0)
        summary += f", {human_size(worst)} crossing boundaries at most" + (
            f" besides {len(unsized)} tensor(s) of unknown size" if unsized else ""
        )
    return summary
