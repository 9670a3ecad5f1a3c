"""What `compile inspect` reports, apart from how it is found (``summary``): importing these records costs no onnx,
so a re-inspection the memo answers (``memo``) stays a stat and a small read."""

from __future__ import annotations

from pydantic import BaseModel, PrivateAttr

from compiler.backends.view import TensorRTView
from compiler.core.errors import CompileError
from compiler.core.profiles import TensorInfo
from compiler.core.records import CacheOutcome


class ModelSummary(BaseModel):
    """What the model is. ``node_count`` counts the main graph (partitions index it); ``op_counts`` and
    ``control_flow`` also include the nodes inside If/Loop/Scan bodies (each control-flow node with the graph
    inputs its condition or trip count is computed from, if any); ``parameter_count`` is the number of
    elements of every initializer and constant tensor (sparse ones by their stored values)."""

    path: str
    sha256: str
    size_bytes: int
    ir_version: int
    opsets: dict[str, int]
    producer: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    node_count: int
    op_counts: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    custom_domains: list[str]
    control_flow: list[str]
    metadata: dict[str, str]


class ProfileReport(BaseModel):
    file: str
    names: list[str]
    valid: bool
    errors: list[str]


class InspectReport(BaseModel):
    model: ModelSummary
    tensorrt: TensorRTView
    profiles: ProfileReport | None = None
    cache: CacheOutcome | None = None
    """Where TensorRT's view and the profile-limits check came from: ``hit``, ``remote`` or ``miss``."""
    _problem: CompileError | None = PrivateAttr(default=None)
    _external_files: list[str] = PrivateAttr(default_factory=list)

    @property
    def problem(self) -> CompileError | None:
        """Why the command must fail after printing the report (exit code and one-line message), if it must."""
        return self._problem

    @property
    def external_files(self) -> list[str]:
        """The model's external data files (what a remembered report must find unchanged)."""
        return self._external_files
