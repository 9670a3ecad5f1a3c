"""Partition boundaries of the source model: TensorRT's own parser partitions (as ``compile inspect`` finds them;
the same ones ONNX Runtime's TensorRT execution provider takes), the nodes that would fall back, and the tensors
crossing each boundary with their bytes at each profile's opt and max shapes (ONNX shape inference with the
profile's dims)."""

from __future__ import annotations

from math import prod
from typing import Any

import onnx
from onnx import helper

from compiler.core.profiles import ShapeProfile
from compiler.core.records import CheckResult, Status
from compiler.core.text import human_size
from compiler.data.model import OnnxModel, _infer_shapes
from compiler.inspect.summary import tensorrt_view

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
    view = tensorrt_view(model, backend)  # EnvironmentProblem (exit 3) when the backend is missing
    graph_io = {v.name for v in (*model.proto.graph.input, *model.proto.graph.output)}
    sets = {label: _shapes_at(model, dims) for label, dims in _shape_sets(model, profiles).items()}
    partitions: list[dict[str, Any]] = []
    boundary_bytes: dict[str, int] = dict.fromkeys(sets, 0)
    unsized: set[str] = set()
    evidence = []
    for index, partition in enumerate(view.partitions):
        crossing = [t for t in (*partition.inputs, *partition.outputs) if t not in graph_io]
        tensors = []
        for name in crossing:
            sizes = {}
            for label, shapes in sets.items():
                itemsize, dims = shapes.get(name, (None, None))
                sizes[label] = None if itemsize is None or dims is None else itemsize * prod(dims)
                if sizes[label] is None:
                    unsized.add(name)
                else:
                    boundary_bytes[label] += sizes[label]
            tensors.append({"name": name, "direction": "in" if name in partition.inputs else "out", "bytes": sizes})
            shown = ", ".join(f"{label} {'?' if b is None else human_size(b)}" for label, b in sizes.items())
            evidence.append(f"partition {index} {'input' if name in partition.inputs else 'output'} {name}: {shown}")
        partitions.append(
            {
                "nodes": partition.nodes,
                "node_count": partition.node_count,
                "inputs": partition.inputs,
                "outputs": partition.outputs,
                "boundary": tensors,
            }
        )
    unsupported = [
        {"index": u.index, "name": u.name, "op": u.op, "domain": u.domain, "reason": u.reason} for u in view.unsupported
    ]
    evidence = [
        f"falls back: node {u['index']} {u['name'] or '(unnamed)'} ({u['op']}): {u['reason']}" for u in unsupported
    ][:MAX_EVIDENCE] + evidence[:MAX_EVIDENCE]
    figures = {
        "backend": f"{view.backend} {view.version}",
        "partitions": partitions,
        "unsupported": unsupported,
        "boundary_bytes": boundary_bytes,
        "unsized_tensors": sorted(unsized),
    }
    worst = max(boundary_bytes.values(), default=0)
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
            f"boundary tensor(s) {', '.join(sorted(unsized)[:5])} of unknown size (shape inference "
            f"cannot size them), so --max-boundary-mb cannot be held"
        )
    where = f"{len(partitions)} TensorRT partition(s), {len(unsupported)} node(s) falling back"
    crossing_note = ""
    if len(partitions) > 1 or unsupported:
        crossing_note = f", {human_size(worst)} crossing boundaries at most" + (
            f" besides {len(unsized)} tensor(s) of unknown size" if unsized else ""
        )
    if failures:
        return CheckResult(
            name="partitions",
            status=Status.FAILED,
            evidence=evidence,
            figures=figures,
            summary=f"{where}{crossing_note}: " + "; ".join(failures),
        )
    return CheckResult(
        name="partitions", status=Status.OK, evidence=evidence, figures=figures, summary=f"{where}{crossing_note}"
    )
