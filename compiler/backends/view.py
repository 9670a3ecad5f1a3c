"""TensorRT's view of a model (its partitions and the nodes it cannot take, as the backend's parser sees them):
what ``compile inspect`` reports and the partitions check judges, so it sits below both stages."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import BaseModel

from compiler.backends import load_backend
from compiler.core.records import Status, StepStatus

if TYPE_CHECKING:  # the records here are read on every re-release, which must not import onnx
    import onnx

    from compiler.data.model import OnnxModel


class Partition(BaseModel):
    """A run of nodes TensorRT takes as one engine; inputs/outputs are the tensors crossing its boundary."""

    nodes: list[list[int]]
    node_count: int
    inputs: list[str]
    outputs: list[str]


class UnsupportedNode(BaseModel):
    index: int
    name: str
    op: str
    domain: str
    reason: str


class TensorRTView(BaseModel):
    backend: str | None
    version: str | None
    status: StepStatus
    supported: bool | None = None
    partitions: list[Partition] = []
    unsupported: list[UnsupportedNode] = []
    parse_seconds: float | None = None
    build_check: StepStatus | None = None


def parse_view(model: OnnxModel, backend_name: str) -> TensorRTView:
    """The backend's parser asked which nodes it takes and in which partitions (no build; EnvironmentProblem when
    the backend is not installed)."""
    backend = load_backend(backend_name)
    started = time.perf_counter()
    capability = backend.capability(model.path)
    seconds = time.perf_counter() - started
    graph = model.proto.graph
    covered = {i for nodes in capability.subgraphs for i in nodes}
    reasons = {e.node_index: e for e in capability.errors}
    unsupported = []
    for index, node in enumerate(graph.node):
        if index in covered and index not in reasons:
            continue
        error = reasons.get(index)
        unsupported.append(
            UnsupportedNode(
                index=index,
                name=node.name or (error.node_name if error else ""),
                op=node.op_type,
                domain=node.domain or "ai.onnx",
                reason=_explain(error.reason if error else "", node),
            )
        )
    supported = capability.supported and not unsupported
    partitions = [_partition(graph, nodes) for nodes in capability.subgraphs if nodes]
    return TensorRTView(
        backend=backend.name,
        version=backend.version,
        status=StepStatus(status=Status.OK),
        supported=supported,
        partitions=partitions,
        unsupported=unsupported,
        parse_seconds=round(seconds, 3),
    )


def _ranges(indices: list[int]) -> list[list[int]]:
    """[0,1,2,5,6] -> [[0,2],[5,6]] (inclusive), for readable partition reports."""
    ranges: list[list[int]] = []
    for index in sorted(indices):
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ranges


def _partition(graph: onnx.GraphProto, indices: list[int]) -> Partition:
    inside = set(indices)
    constants = {init.name for init in graph.initializer}
    produced = {out for i in inside for out in graph.node[i].output if out}
    consumed_inside = {name for i in inside for name in graph.node[i].input if name}
    consumed_outside = {name for i, n in enumerate(graph.node) if i not in inside for name in n.input}
    graph_outputs = {o.name for o in graph.output}
    return Partition(
        nodes=_ranges(indices),
        node_count=len(indices),
        inputs=sorted(consumed_inside - produced - constants),
        outputs=sorted(name for name in produced if name in consumed_outside or name in graph_outputs),
    )


def _explain(reason: str, node: onnx.NodeProto) -> str:
    """The parser's terse code made readable; the original text stays at the end."""
    op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
    if not reason:
        return "not in any TensorRT partition"
    if "Plugin not found" in reason:
        return f"TensorRT has no layer or registered plugin for {op} ({reason})"
    if reason.startswith("UNSUPPORTED_NODE"):
        return f"TensorRT does not support {op} here ({reason})"
    return reason
