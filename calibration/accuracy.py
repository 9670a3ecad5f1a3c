"""How far the quantized or converted model drifts from FP32, measured on held-out samples.

Both models run in onnxruntime (CPU) with basic graph optimizations only: the Q/DQ nodes then execute
as written (quantize, round, dequantize), which is the arithmetic TensorRT's INT8/FP8 kernels follow,
and onnxruntime's CPU fusions of float8 Q/DQ (which give wrong results) stay off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.output_kind import declared
from compiler.core.records import AccuracyReport, Gate
from compiler.data.agreement import Agreement, enough_samples, judge, limits
from compiler.data.datasets import Dataset
from compiler.data.metric import Metric, MetricRun
from compiler.data.model import first_line
from compiler.data.sampling import batches
from compiler.data.session import run_batch, session


def compare(
    ref: Any,
    candidate: Path,
    candidate_name: str,
    dataset: Dataset,
    indices: np.ndarray,
    batch_size: int,
    fixed_batch: int | None = None,
    progress: Callable[[int], None] | None = None,
    metric: Metric | None = None,
    labels: dict[str, np.ndarray] | None = None,
    declarations: tuple[str, ...] = (),
    notes: dict[str, str] | None = None,
) -> AccuracyReport:
    """Per output, the scale-free figures of :mod:`compiler.data.agreement` (the ones ``compile check`` gates),
    each output judged as ``declarations`` (``--output``) say.

    ``ref`` is the FP32 model's onnxruntime session (the caller made it to fail fast).
    """
    started = time.perf_counter()
    cand = session(candidate, f"{candidate_name} model")
    names = [o.name for o in ref.get_outputs()]
    if [o.name for o in cand.get_outputs()] != names:
        raise CheckFailed(f"{candidate}: outputs differ from the original model's ({', '.join(names)})")
    agreement = Agreement(names, declared(declarations, names), notes)
    scored = MetricRun(metric, names, labels, indices) if metric is not None else None
    for batch in batches(indices, batch_size):
        feed = dataset.read(batch)
        try:
            expected = dataset.batch_first(names, run_batch(ref, feed, fixed_batch), len(batch))
        except Exception as exc:
            raise InvalidInput(f"onnxruntime cannot run the model on the data: {first_line(exc)}") from None
        try:
            actual = dataset.batch_first(names, run_batch(cand, feed, fixed_batch), len(batch))
        except Exception as exc:
            raise CheckFailed(f"onnxruntime cannot run the {candidate_name} model: {first_line(exc)}") from None
        agreement.add(expected, actual)
        if scored is not None:
            scored.add(expected, actual)
        if progress:
            progress(len(batch))
    return AccuracyReport(
        candidate=candidate_name,
        holdout_samples=len(indices),
        outputs=agreement.reports(),
        metric=None if scored is None else {"name": metric.name, "value": scored.value()},
        seconds=round(time.perf_counter() - started, 3),
    )


def gates(
    report: AccuracyReport,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    max_abs_error: float | None = None,
    min_sqnr: float | None = None,
    min_metric: float | None = None,
    min_samples: int = 0,
    gate_on: str = "estimate",
) -> list[Gate]:
    """Every output's gates at the precision's defaults (:data:`compiler.data.agreement.DEFAULTS`) but for the
    thresholds given, and the FP16 range gate of an fp16 conversion."""
    judged = [o for o in report.outputs if o.top1_agreement is not None or o.kind in ("detection", "dense")]
    if min_top1 is not None and not judged:
        raise InvalidInput(
            "--min-top1 needs a class-score output ([batch, classes]) or one declared detection or dense (--output); "
            "this model has none"
        )
    limit = limits(report.candidate, min_cosine, min_sqnr, min_top1, max_abs_error, gate_on)
    results = [enough_samples(report.holdout_samples, min_samples)] if min_samples else []
    results += [gate for out in report.outputs for gate in judge(out, limit)]
    if min_metric is not None:
        if report.metric is None:
            raise InvalidInput("--min-metric needs --metric MODULE:FUNCTION (the score it holds to the threshold)")
        value = report.metric["value"]
        results.append(
            Gate(
                name="min-metric",
                output=report.metric["name"],
                value=value,
                threshold=min_metric,
                passed=value >= min_metric,
            )
        )
    if report.fp16_range is not None:  # always a gate: an FP16 model that overflows is broken on a GPU
        results.append(_fp16_range_gate(report.fp16_range))
    return results


def _fp16_range_gate(ranges: dict) -> Gate:
    """Failed by the largest overflow, else by the largest constant FP16 clamps when clamping moves the outputs."""
    overflow = ranges.get("overflow", {})
    worst = max(overflow.items(), key=lambda item: item[1]["abs_max"], default=None)
    if worst is None and ranges.get("moved_by_clamping"):
        name, value = max(ranges["clamped_constants"].items(), key=lambda item: item[1])
        return Gate(
            name="fp16-range",
            output=f"{name} (a constant FP16 clamps, which moves the outputs)",
            value=value,
            threshold=65504.0,
            passed=False,
        )
    return Gate(
        name="fp16-range",
        output=f"{worst[0]} (node {worst[1]['node']})" if worst else "",
        value=worst[1]["abs_max"] if worst else 0.0,
        threshold=65504.0,
        passed=worst is None,
    )
