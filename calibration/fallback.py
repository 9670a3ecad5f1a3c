"""``--fallback auto``: the fewest nodes to keep in higher precision until the gates pass.

int8/fp8: the quantized regions (a quantized tensor with all its quantized readers: Q/DQ is per tensor, so they
come out together) are ranked by sensitivity (:mod:`calibration.sensitivity`), then the shortest prefix of that
ranking whose exclusion passes the gates is found by bisection: ``ceil(log2 n) + 1`` evaluations for ``n``
regions. Each evaluation is the Q/DQ model with those nodes reading float tensors and float weights again (no new
calibration: the other tensors' ranges do not change), compared on the held-out samples. The winner is then
calibrated for real with ``--exclude`` and recorded (``calibration.json``: ``exclusions``, ``fallback``).

Every node taken out brings the nodes TensorRT fuses with it (:func:`fusion_groups`: a Conv/MatMul/Gemm with the
bias Add, BatchNormalization and activation it feeds alone, a residual Add with both its inputs), so no fusion
is cut in half by a precision boundary.
When the last region the bisection needs ties in sensitivity with one ranked after it (within
:data:`TIE_DB`), the set with that one instead is evaluated too; if both pass, each is built once and the one
whose engine gets fewer precision-boundary reformat kernels is kept (:meth:`Search.fewest_reformats`).

fp16: the FP16 range check names the nodes whose values overflow; they are kept in FP32 (with their fusion
groups) and the model converted and checked again, until nothing overflows.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from calibration import calibrators
from calibration.calibrators import TENSORRT_QUANTIZED_OPS
from calibration.fallback_reuse import Reuse
from calibration.rewire import float_nodes
from calibration.sensitivity import Region, regions, source_name
from calibration.steps import calibrate_once
from compiler.core.errors import CheckFailed
from compiler.core.records import CalibrationResult
from compiler.data.model import node_name

MAX_FP16_ROUNDS = 4
TIE_DB = 1.0
"""Regions whose local SQNRs are this close are equally damaging as far as the ranking can tell."""


def calibrate_with_fallback(model, data, out, options, **kwargs) -> CalibrationResult:
    """:func:`calibration.api.calibrate` with ``options.fallback == "auto"``: each calibration it makes is
    :func:`calibration.steps.calibrate_once` (``kwargs`` are its own), with the nodes it found excluded."""
    started = time.perf_counter()
    plain = options.model_copy(update={"fallback": None})
    with Reuse() as reuse:
        if options.precision != "fp16":
            kwargs = {**kwargs, "reuse": reuse}
        first = calibrate_once(model, data, out, plain, **kwargs)
        if first.passed:
            return _finish(
                first,
                {"needed": False, "evaluations": 1, "seconds": round(time.perf_counter() - started, 3), "passed": True},
                out,
            )
        if options.precision == "fp16":
            return _fp16(model, data, out, plain, first, started, kwargs)
        return _quantized(model, data, out, plain, first, started, kwargs)


def _fp16(model, data, out, plain, first: CalibrationResult, started: float, kwargs) -> CalibrationResult:
    result, kept, evaluations = first, list(plain.exclude), 1
    graph = onnx.load_model(model, load_external_data=False).graph
    why: dict[str, str] = {}
    for _ in range(MAX_FP16_ROUNDS):
        ranges = result.report.fp16_range or {}
        # the readers of a clamped constant too: the clamping may be what moved the outputs
        clamped = [r for readers in ranges.get("clamped_readers", {}).values() for r in readers]
        overflow = list(dict.fromkeys([*ranges.get("keep_fp32", []), *clamped]))
        why.update({r: "reads a constant FP16 clamps" for r in clamped if r not in ranges.get("keep_fp32", [])})
        overflow = [*overflow, *sorted(fusion_groups(graph, set(overflow)) - set(overflow))]
        new = [name for name in overflow if name not in kept]
        if result.passed or not new:
            break
        kept += new
        result = calibrate_once(
            model,
            data,
            out,
            plain.model_copy(update={"exclude": tuple(kept)}),
            found={
                name: {"reason": "found", "why": why.get(name, "overflows FP16")}
                for name in kept
                if name not in plain.exclude
            },
            **kwargs,
        )
        evaluations += 1
    summary = {
        "needed": True,
        "evaluations": evaluations,
        "kept_fp32": [n for n in kept if n not in plain.exclude],
        "seconds": round(time.perf_counter() - started, 3),
        "passed": result.passed,
    }
    return _finish(result, summary, out)


def _quantized(model, data, out, plain, first: CalibrationResult, started: float, kwargs) -> CalibrationResult:
    ranked = _regions(first.report.sensitivity or [])
    if not ranked:
        raise CheckFailed(
            f"--fallback auto: {first.report.sensitivity_error or 'no quantized node was ranked'}; "
            f"keep nodes in float with --exclude NODE instead"
        )
    search = Search(
        Path(out) / "model.onnx", Path(first.model), data, first, plain, kwargs.get("preprocess"), kwargs.get("reuse")
    )
    try:
        count, evaluations = search.shortest_prefix(ranked)
        chosen, alternatives = search.fewest_reformats(ranked, count) if count else ([], [])
        evaluations = search.evaluations
    finally:
        search.close()
    if not count:
        raise CheckFailed(
            f"--fallback auto: no set of nodes kept in float reaches the gates: even with all "
            f"{len(ranked)} quantized regions ({sum(len(r.nodes) for r in ranked)} nodes) in float "
            f"the held-out accuracy fails ({evaluations + 1} evaluations); the folder holds the plain "
            f"{plain.precision} calibration: calibrate another precision (fp16)"
        )
    nodes = sorted(search.nodes(chosen))
    found = _found(chosen, search.proto.graph, first.model)
    result = calibrate_once(
        model,
        data,
        out,
        plain.model_copy(update={"exclude": tuple(plain.exclude) + tuple(n for n in found if n not in plain.exclude)}),
        found=found,
        **kwargs,
    )
    summary = {
        "needed": True,
        "regions": len(ranked),
        "regions_kept": len(chosen),
        "nodes_kept": nodes,
        "evaluations": evaluations + 2,  # the plain calibration, the search, the final calibration
        **({"alternatives": alternatives} if alternatives else {}),
        "low_precision_work": low_precision_work(Path(out) / "model.onnx"),
        "reformats": _count(result),
        "plain_reformats": _count(first),
        "seconds": round(time.perf_counter() - started, 3),
        "passed": result.passed,
    }
    return _finish(result, summary, out)


def _found(chosen: list[Region], graph: onnx.GraphProto, model: str) -> dict[str, dict[str, Any]]:
    """Why each node of the ``chosen`` regions (named as in the source ``model``) is kept in float: its region's
    figure, and for the nodes TensorRT fuses with them, with which."""
    source_names = {node_name(n) for n in onnx.load_model(model, load_external_data=False).graph.node}
    found: dict[str, dict[str, Any]] = {}
    for region in chosen:
        for node in region.nodes:
            found[source_name(node, source_names)] = {
                "reason": "found",
                "tensor": region.tensor,
                "sqnr_db": region.sqnr_db,
            }
        for node in sorted(fusion_groups(graph, set(region.nodes)) - set(region.nodes)):
            found.setdefault(
                source_name(node, source_names),
                {
                    "reason": "found",
                    "tensor": region.tensor,
                    "sqnr_db": region.sqnr_db,
                    "why": "fused with " + ", ".join(region.nodes),
                },
            )
    return found


def _finish(result: CalibrationResult, summary: dict[str, Any], out) -> CalibrationResult:
    """The summary (what the search cost) into calibration.json (the record the final calibration wrote) and the
    result."""
    from compiler.core.files import write_atomic
    from compiler.core.records import CALIBRATION_RECORD

    result = result.model_copy(update={"fallback": summary})
    write_atomic(Path(out) / CALIBRATION_RECORD, (result.record().model_dump_json(indent=2) + "\n").encode())
    return result


def _count(result: CalibrationResult) -> int | None:
    """The precision-boundary reformat kernels its build proof got (None when no build could be made here)."""
    return None if result.reformats is None else result.reformats.count


def _regions(sensitivity: list[dict[str, Any]]) -> list[Region]:
    return regions({s["node"]: (s["sqnr_db"], s["tensors"]) for s in sensitivity})


class Search:
    """Evaluations of exclusion sets on one Q/DQ model: its quantized nodes given float inputs and weights back."""

    def __init__(
        self, qdq: Path, source: Path, data, first: CalibrationResult, options, preprocess, reuse: Reuse | None = None
    ) -> None:
        import tempfile

        from compiler.core.options import parse_sample_axes
        from compiler.data.datasets import open_dataset
        from compiler.data.footprint import Fit, sample_shapes
        from compiler.data.model import load_model
        from compiler.data.model_inputs import model_inputs
        from compiler.data.sampling import split
        from compiler.data.session import session

        self.work = Path(tempfile.mkdtemp(prefix="compile-fallback-"))
        self.proto = onnx.load_model(qdq)
        self.prepared = onnx.load_model(reuse.prepare(source) if reuse else calibrators.prepare(source, self.work))
        model = load_model(source)
        axes = parse_sample_axes(options.sample_axis)
        self.dataset = open_dataset(data, model, preprocess, axes)
        self.fixed = next((i.batch for i in model_inputs(model, axes) if i.batch is not None), None)
        self.dims = model.input_dims()
        self.holdout = split(
            self.dataset.count, options.holdout, options.samples, options.seed, self.fixed, self.dataset.path
        ).holdout  # the very samples calibrate held out
        self.reference = session(source, "model")
        self.first, self.limits, self.declarations = first, options.gates, options.output
        self.source = model.path
        self.fit = Fit(
            sample_shapes(self.dataset, self.holdout),
            options.chunk_mb,
            first.batch_size,
            self.fixed,
            f"{source}'s held-out comparison (the FP32 and {first.precision} models side by side)",
        )
        from compiler.data.metric import metric_and_labels

        self.metric, self.labels = metric_and_labels(
            options.metric, options.min_metric, options.labels, self.dataset
        )  # the objective, when given
        self.evaluations = 0

    def close(self) -> None:
        import shutil

        self.dataset.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def nodes(self, chosen: list[Region]) -> set[str]:
        """The nodes of ``chosen`` with the nodes TensorRT fuses with them."""
        named = {node for region in chosen for node in region.nodes}
        return named | fusion_groups(self.proto.graph, named)

    def passes(self, nodes: set[str]) -> bool:
        from calibration.accuracy import compare, gates

        path = self.work / f"candidate-{self.evaluations}.onnx"
        onnx.save_model(float_nodes(self.proto, self.prepared, nodes), path)
        self.evaluations += 1
        report = compare(
            self.reference,
            path,
            self.first.precision,
            self.dataset,
            self.holdout,
            self.fit.samples([self.source, path]),
            self.fixed,
            metric=self.metric,
            labels=self.labels,
            declarations=self.declarations,
        )
        # judged as the final verdict will be (--gate-on), but for too few held-out samples: the final verdict's to
        # say, not a search's
        return all(g.passed for g in gates(report, **{**self.limits, "min_samples": 0}))

    def fewest_reformats(self, ranked: list[Region], count: int) -> tuple[list[Region], list[dict[str, Any]]]:
        """The first ``count`` regions, or those with the last swapped for a region tied with it that passes too and
        whose engine gets fewer precision-boundary reformat kernels; and the sets weighed (none without a tie)."""
        found = ranked[:count]
        tied = [r for r in ranked[count:] if r.sqnr_db - found[-1].sqnr_db <= TIE_DB]
        if not tied:
            return found, []
        swapped = [*found[:-1], tied[0]]
        weighed = [
            {"tensors": [r.tensor for r in found], "passed": True},
            {"tensors": [r.tensor for r in swapped], "passed": self.passes(self.nodes(swapped))},
        ]
        if not weighed[1]["passed"]:
            return found, weighed
        for entry, candidate in zip(weighed, (found, swapped), strict=True):
            entry["reformats"] = self.reformats(self.nodes(candidate))
        counts = [entry["reformats"] for entry in weighed]
        return (swapped if None not in counts and counts[1] < counts[0] else found), weighed

    def reformats(self, nodes: set[str]) -> int | None:
        """The precision-boundary reformat kernels of the engine TensorRT builds from the Q/DQ model with ``nodes``
        in float (one build, as calibrate's proof); None when nothing here can build it."""
        from compiler.backends.build_proof import prove_build

        path = self.work / f"reformats-{len(list(self.work.iterdir()))}.onnx"
        onnx.save_model(float_nodes(self.proto, self.prepared, nodes), path)
        shapes = {name: array.shape for name, array in self.dataset.read(self.holdout[:1]).items()}
        proof = prove_build(path, shapes, self.dims, dict(self.dataset.axes))
        return None if proof.reformats is None else proof.reformats.count

    def shortest_prefix(self, ranked: list[Region]) -> tuple[int, int]:
        """The fewest leading regions whose exclusion passes (0 when even all of them do not), and the evaluations
        made: all of them first (can the gates be reached at all?), then bisection."""

        def nodes(count: int) -> set[str]:
            return self.nodes(ranked[:count])

        low, high = 0, len(ranked)  # low fails (the plain calibration did), high is to be seen
        if not self.passes(nodes(high)):
            return 0, self.evaluations
        while high - low > 1:
            middle = (low + high) // 2
            if self.passes(nodes(middle)):
                high = middle
            else:
                low = middle
        return high, self.evaluations


COMPUTE_OPS = frozenset({*TENSORRT_QUANTIZED_OPS, "MatMulInteger", "ConvInteger"})
EPILOGUE_OPS = frozenset(
    {
        "Add",
        "BatchNormalization",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Clip",
        "Sigmoid",
        "Tanh",
        "HardSigmoid",
        "HardSwish",
        "Gelu",
        "Elu",
        "Selu",
        "Softplus",
    }
)
"""What TensorRT fuses into a convolution's or matrix product's epilogue: bias and residual Add, batch norm and
pointwise activations."""


def fusion_groups(graph: onnx.GraphProto, nodes: set[str]) -> set[str]:
    """The nodes fused with ``nodes`` (by name; those themselves included): from an epilogue op up through the
    producers that feed only it to the compute node heading the chain, and from every compute node down through
    the epilogue ops reading its value alone (a graph output or a second reader ends the chain: that value is
    materialized anyway). A residual Add is reached from either branch and keeps both inputs with it."""
    from compiler.data.model import readers

    by_name = {node_name(n): n for n in graph.node}
    producer = {out: n for n in graph.node for out in n.output}
    found = readers(graph)
    outputs = {o.name for o in graph.output}

    def alone(tensor: str) -> bool:
        return tensor not in outputs and len(found.get(tensor, [])) == 1

    group: set[str] = set()
    pending = [by_name[name] for name in nodes if name in by_name]
    while pending:
        node = pending.pop()
        if node.name in group:
            continue
        group.add(node.name)
        if node.op_type in EPILOGUE_OPS:  # up: what feeds it alone, to the compute node
            pending += [
                producer[i]
                for i in node.input
                if i in producer and alone(i) and producer[i].op_type in COMPUTE_OPS | EPILOGUE_OPS
            ]
        if node.op_type in COMPUTE_OPS | EPILOGUE_OPS and node.output and alone(node.output[0]):  # down
            [reader] = found[node.output[0]]
            if reader.op_type in EPILOGUE_OPS:
                pending.append(reader)
    return group - {""}


def low_precision_work(qdq: Path) -> float | None:
    """The fraction of Conv/ConvTranspose/Gemm/MatMul work (weight elements x output positions, symbolic dims as
    1; activation x activation products by their shapes) still quantized in the model."""
    proto = onnx.load_model(qdq, load_external_data=False)
    graph = proto.graph
    shapes = {
        v.name: [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
        for v in (*graph.value_info, *graph.output, *graph.input)
        if v.type.tensor_type.HasField("shape")
    }
    sizes = {i.name: int(np.prod(i.dims)) for i in graph.initializer}
    dequantized = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    total = quantized = 0.0
    for node in graph.node:
        if node.op_type not in TENSORRT_QUANTIZED_OPS:
            continue
        weight = next((sizes.get(dequantized.get(i, i)) for i in node.input[1:2]), None)
        out_shape = shapes.get(node.output[0])
        if out_shape is None:
            continue
        positions = math.prod(out_shape[2:]) if node.op_type.startswith("Conv") else math.prod(out_shape[:-1])
        if weight is None:  # activation x activation: the inner dimension from the first input
            inner = (shapes.get(node.input[0]) or [1])[-1]
            work = math.prod(out_shape) * inner
        else:
            work = weight * positions
        total += work
        if any(i in dequantized for i in node.input):
            quantized += work
    return round(quantized / total, 4) if total else None
