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
from compiler.core.records import AccuracyReport, Gate, OutputReport
from compiler.data.datasets import Dataset, batches
from compiler.data.model import first_line
from compiler.data.session import cosine_per_sample, run_batch, session


def compare(ref: Any, candidate: Path, candidate_name: str, dataset: Dataset, indices: np.ndarray,
            batch_size: int, fixed_batch: int | None = None,
            progress: Callable[[int], None] | None = None) -> AccuracyReport:
    """Per output: cosine similarity (mean, min over samples), max/mean absolute error, top-1 agreement.

    ``ref`` is the FP32 model's onnxruntime session (the caller made it to fail fast).
    """
    started = time.perf_counter()
    cand = session(candidate, f"{candidate_name} model")
    names = [o.name for o in ref.get_outputs()]
    if [o.name for o in cand.get_outputs()] != names:
        raise CheckFailed(f"{candidate}: outputs differ from the original model's ({', '.join(names)})")
    cosines: dict[str, list[np.ndarray]] = {n: [] for n in names}
    max_abs = dict.fromkeys(names, 0.0)
    abs_sum = dict.fromkeys(names, 0.0)
    abs_count = dict.fromkeys(names, 0)
    agree = dict.fromkeys(names, 0)
    classes: dict[str, bool] = {}
    for batch in batches(indices, batch_size):
        feed = dataset.read(batch)
        try:
            expected = run_batch(ref, feed, fixed_batch)
        except Exception as exc:
            raise InvalidInput(f"onnxruntime cannot run the model on the data: {first_line(exc)}") from None
        try:
            actual = run_batch(cand, feed, fixed_batch)
        except Exception as exc:
            raise CheckFailed(f"onnxruntime cannot run the {candidate_name} model: {first_line(exc)}") from None
        for name, a, b in zip(names, expected, actual, strict=True):
            a64 = np.asarray(a, dtype=np.float64).reshape(len(batch), -1)
            b64 = np.asarray(b, dtype=np.float64).reshape(len(batch), -1)
            cosines[name].append(cosine_per_sample(a64, b64))
            diff = np.abs(a64 - b64)
            max_abs[name] = max(max_abs[name], float(diff.max()) if diff.size else 0.0)
            abs_sum[name] += float(diff.sum())
            abs_count[name] += diff.size
            is_class = a.ndim == 2 and a.shape[1] > 1 and np.issubdtype(a.dtype, np.floating)
            classes[name] = is_class
            if is_class:
                agree[name] += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())
        if progress:
            progress(len(batch))
    outputs = []
    for name in names:
        cos = np.concatenate(cosines[name])
        outputs.append(OutputReport(
            name=name, kind="class-scores" if classes[name] else "tensor", samples=len(cos),
            cosine_mean=float(cos.mean()), cosine_min=float(cos.min()), max_abs_error=max_abs[name],
            mean_abs_error=abs_sum[name] / max(abs_count[name], 1),
            top1_agreement=agree[name] / len(cos) if classes[name] else None,
        ))
    return AccuracyReport(candidate=candidate_name, holdout_samples=len(indices), outputs=outputs,
                          seconds=round(time.perf_counter() - started, 3))


def gates(report: AccuracyReport, min_cosine: float | None = None, min_top1: float | None = None,
          max_abs_error: float | None = None) -> list[Gate]:
    """Thresholds on every output: cosine mean, top-1 agreement (class-score outputs), max absolute error."""
    results = []
    for out in report.outputs:
        if min_cosine is not None:
            results.append(Gate(name="min-cosine", output=out.name, value=out.cosine_mean, threshold=min_cosine,
                                passed=out.cosine_mean >= min_cosine))
        if min_top1 is not None and out.top1_agreement is not None:
            results.append(Gate(name="min-top1", output=out.name, value=out.top1_agreement, threshold=min_top1,
                                passed=out.top1_agreement >= min_top1))
        if max_abs_error is not None:
            results.append(Gate(name="max-abs-error", output=out.name, value=out.max_abs_error,
                                threshold=max_abs_error, passed=out.max_abs_error <= max_abs_error))
    if report.fp16_range is not None:  # always a gate: an FP16 model that overflows is broken on a GPU
        overflow = report.fp16_range.get("overflow", {})
        worst = max(overflow.items(), key=lambda item: item[1]["abs_max"], default=None)
        results.append(Gate(name="fp16-range", output=f"{worst[0]} (node {worst[1]['node']})" if worst else "",
                            value=worst[1]["abs_max"] if worst else 0.0, threshold=65504.0, passed=worst is None))
    if min_top1 is not None and not any(out.top1_agreement is not None for out in report.outputs):
        raise InvalidInput("--min-top1 needs a class-score output ([batch, classes]); this model has none")
    return results
