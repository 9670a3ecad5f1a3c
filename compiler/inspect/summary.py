"""`compile inspect`: what a model is and how TensorRT will take it, before any build."""

from __future__ import annotations

import tempfile
from collections import Counter
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import external_data_helper, helper

from compiler.backends import default_backend, load_backend
from compiler.backends.base import BuildSpec
from compiler.backends.isolated import Builders
from compiler.backends.view import TensorRTView
from compiler.backends.view_cache import inspected
from compiler.core.errors import CheckFailed, CompileError, InvalidInput
from compiler.core.files import default_cache_dir
from compiler.core.profiles import (
    ProfileSet,
    inconsistent_profiles,
    load_profiles,
    load_sku_catalog,
    profiles_problem,
    validate_profiles,
)
from compiler.core.records import CacheOutcome, Status, StepStatus
from compiler.data.dims import DimRenames, renamed_model
from compiler.data.model import OnnxModel, load_model, sparse_tensors, tensor_info
from compiler.data.shape_limits import profile_limit_errors
from compiler.inspect.report import InspectReport, ModelSummary, ProfileReport

if TYPE_CHECKING:
    from compiler.core.reuse import RemoteTier

CONTROL_FLOW_OPS = {"If", "Loop", "Scan"}


def _all_nodes(graph: onnx.GraphProto):
    """Every node, including those inside If/Loop/Scan bodies."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from _all_nodes(subgraph)


_DECIDING_INPUTS = {"If": (0,), "Loop": (0, 1)}
"""The inputs of a control-flow node that decide what runs: If's condition, Loop's trip count and condition."""


def _control_flow(graph: onnx.GraphProto, fed: list[str]) -> list[str]:
    """Each If/Loop/Scan as ``If name``, followed by the graph inputs its condition or trip count is computed
    from when there are any (a scalar like ``sr``): what the user can freeze to make the branch constant."""
    nodes = list(_all_nodes(graph))
    producers = {output: node for node in nodes for output in node.output if output}
    described = []
    for node in (n for n in nodes if n.op_type in CONTROL_FLOW_OPS):
        deciding = [node.input[i] for i in _DECIDING_INPUTS.get(node.op_type, ()) if i < len(node.input)]
        sources = _graph_inputs_behind(deciding, producers, set(fed))
        line = f"{node.op_type} {node.name or '(unnamed)'}"
        if sources:
            line += f" (decided by input {', '.join(repr(name) for name in sources)})"
        described.append(line)
    return described


def _graph_inputs_behind(tensors: list[str], producers: dict[str, onnx.NodeProto], fed: set[str]) -> list[str]:
    """The fed graph inputs the tensors are computed from, in the order they are reached."""
    found: dict[str, None] = {}
    seen: set[str] = set()
    pending = [t for t in tensors if t]
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in fed:
            found[tensor] = None
        elif tensor in producers:
            pending.extend(t for t in producers[tensor].input if t)
    return list(found)


def _weight_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Initializers and constant tensors of every graph, plus the stored values of sparse ones."""
    return [*external_data_helper._get_all_tensors(proto), *(s.values for s in sparse_tensors(proto.graph))]


def summarize(model: OnnxModel) -> ModelSummary:
    graph = model.proto.graph
    nodes = list(_all_nodes(graph))
    tensors = _weight_tensors(model.proto)
    parameter_count = sum(int(np.prod(t.dims, dtype=np.int64)) for t in tensors)
    parameter_bytes = sum(
        int(np.prod(t.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        for t in tensors
        if t.data_type not in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED)
    )
    custom = sorted({n.domain for n in nodes if n.domain not in ("", "ai.onnx", "ai.onnx.ml")})
    return ModelSummary(
        path=str(model.path),
        sha256=model.sha256,
        size_bytes=model.size_bytes,
        ir_version=model.proto.ir_version,
        opsets={(o.domain or "ai.onnx"): o.version for o in model.proto.opset_import},
        producer=" ".join(filter(None, [model.proto.producer_name, model.proto.producer_version])),
        inputs=model.inputs(),
        outputs=[tensor_info(v) for v in graph.output],
        node_count=len(graph.node),
        op_counts=dict(Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in nodes).most_common()),
        parameter_count=parameter_count,
        parameter_bytes=parameter_bytes,
        custom_domains=custom,
        control_flow=_control_flow(graph, [i.name for i in model.inputs()]),
        metadata={p.key: p.value for p in model.proto.metadata_props},
    )


def build_check(model: OnnxModel, profiles: ProfileSet | None, sku: str, backend: str | None = None) -> StepStatus:
    """Prove support with a real build (one engine with every profile): the parser can say yes to a graph that
    fails. Builds with ``backend`` if given, else the SKU's own backend, as ``compile build`` does."""
    target = load_sku_catalog().get(sku)
    dynamic = [i.name for i in model.inputs() if i.shape is None or any(not isinstance(d, int) for d in i.shape)]
    if dynamic and profiles is None:
        raise InvalidInput(
            f"{model.path}: --build-check needs --profiles: dynamic inputs {', '.join(dynamic)} "
            "have no shapes to build with"
        )
    engine = load_backend(backend or target.backend)
    spec = BuildSpec(
        model_path=model.path,
        profiles=tuple(profiles.profiles) if profiles else (),
        compute_capabilities=(target.compute_capability,),
    )
    engine.check_targets(spec.compute_capabilities)
    with tempfile.TemporaryDirectory(prefix="compile-build-check-") as folder:  # in a child: a crash is a verdict
        built = Builders().build(engine.name, spec, Path(folder), None, None)
    if built.status != Status.OK:
        return StepStatus(status=Status.FAILED, detail="; ".join(built.errors[:3]) or "the builder returned no engine")
    refusal = inconsistent_profiles(built.warnings)
    if refusal:
        raise InvalidInput(f"{model.path}: {refusal}")
    shapes = ", ".join(p.name for p in profiles.profiles) if profiles else "static shapes"
    return StepStatus(
        status=Status.OK,
        detail=f"built for {sku} ({engine.name}, compute capability {target.compute_capability}; {shapes}) "
        f"in {built.seconds:.2f} s, {built.size_bytes} bytes",
    )


def inspect_model(
    model_path: str | Path,
    profiles_path: str | Path | None = None,
    backend: str | None = None,
    build_sku: str | None = None,
    tier: RemoteTier | None = None,
    cache_dir: Path | None = None,
    dims: DimRenames | None = None,
) -> InspectReport:
    """Summarize the model, ask TensorRT how it partitions it, and validate shape profiles against it.

    Bad files raise InvalidInput. Problems found in a readable model (invalid profiles, a failed or impossible
    build check, an explicitly requested backend that is missing) are in the report and in ``report.problem``.
    ``tier``: the remote cache a release hands its stages (TensorRT's view and the profile-limits check are
    taken from there too). ``cache_dir``: the local cache (default $COMPILE_CACHE_DIR or ~/.cache/compile).
    ``dims``: input dims renamed (``--dim``) in a copy under the cache; the report names the user's file.
    """
    given = load_model(model_path)
    model = renamed_model(given, dims or {}, cache_dir or default_cache_dir())
    summary = summarize(model).model_copy(
        update={"path": str(given.path), "sha256": given.sha256, "size_bytes": given.size_bytes}
    )
    if build_sku is not None:
        load_sku_catalog().get(build_sku)  # an unknown SKU is a usage error: fail before any work
    profiles = load_profiles(profiles_path) if profiles_path else None
    structural = validate_profiles(profiles, model.input_dims()) if profiles is not None else []
    limits = cache(lambda: None if profiles is None else structural or profile_limit_errors(model.proto, profiles))
    outcome: CacheOutcome | None = None
    failed: CompileError | None = None
    try:
        entry, outcome = inspected(model, backend or default_backend(), profiles, limits, tier, cache_dir)
        view, errors = entry.tensorrt.model_copy(), entry.profile_errors
    except InvalidInput:
        raise
    except CompileError as exc:
        view = TensorRTView(backend=backend, version=None, status=StepStatus(status=Status.SKIPPED, detail=str(exc)))
        errors = limits()
        failed = exc if backend is not None else None  # asked for by name: its absence is an environment problem
    profile_report = None
    problem: CompileError | None = None
    if profiles is not None:
        profile_report = ProfileReport(
            file=str(profiles_path), names=[p.name for p in profiles.profiles], valid=not errors, errors=errors or []
        )
        if errors:
            problem = profiles_problem(profiles_path, errors)
    problem = problem or failed
    if build_sku is not None:
        if profile_report is not None and not profile_report.valid:
            view.build_check = StepStatus(status=Status.SKIPPED, detail="the shape profiles are invalid")
        else:
            try:
                view.build_check = build_check(model, profiles, build_sku, backend)
            except CompileError as exc:
                view.build_check = StepStatus(status=Status.SKIPPED, detail=str(exc))
                problem = problem or (
                    exc if str(exc).startswith(str(model.path)) else type(exc)(f"--build-check for {build_sku}: {exc}")
                )
            if view.build_check.status == Status.FAILED:
                problem = problem or CheckFailed(
                    f"{model.path}: the build check for {build_sku} failed: {view.build_check.detail}"
                )
    report = InspectReport(model=summary, tensorrt=view, profiles=profile_report, cache=outcome)
    report._problem = problem
    report._external_files = [str(f) for f in given.external_files]
    return report


__all__ = ["InspectReport", "inspect_model", "summarize"]
