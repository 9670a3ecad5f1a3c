"""TensorRT's view of a model, as inspect reports it and its cache keeps it."""

from __future__ import annotations

from pydantic import BaseModel

from compiler.core.records import StepStatus


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
