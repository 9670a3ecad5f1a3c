"""Accuracy: each built precision's model (the FP16 conversion or the Q/DQ model the engine was built from)
against the FP32 model on the same samples in onnxruntime, compared with Polygraphy's comparator; and the engine
itself, which needs a GPU of its compute capability.

Polygraphy defaults to atol = rtol = 1e-5 elementwise, which FP16 and INT8 fail on rounding alone (its users'
most common complaint). The defaults here are per precision (:data:`DEFAULTS`, docs/check.md), and every threshold
can be set per output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from compiler.core.errors import CheckFailed
from compiler.core.options import CheckOptions
from compiler.core.records import CheckResult, EngineRecord, Precision, Status
from compiler.data.datasets import Dataset, batches
from compiler.data.model import first_line
from compiler.data.session import cosine_per_sample, session

DEFAULTS: dict[Precision, dict[str, Any]] = {
    Precision.FP16: {"atol": 5e-2, "rtol": 5e-2, "error_stat": "quantile", "error_quantile": 0.99,
                     "min_cosine": 0.999, "min_top1": 0.99},
    Precision.INT8: {"atol": 0.1, "rtol": 0.1, "error_stat": "mean", "error_quantile": 0.99,
                     "min_cosine": 0.99, "min_top1": 0.97},
    Precision.FP8: {"atol": 0.1, "rtol": 0.1, "error_stat": "mean", "error_quantile": 0.99,
                    "min_cosine": 0.99, "min_top1": 0.97},
}
"""FP16 rounds each op to ~5e-4 relative and a deep network compounds it, so 5 % at the 99th percentile of
elements (an element passes on either atol or rtol: those near 0 have large relative and tiny absolute errors).
INT8/FP8 round every activation to one of 255 (or FP8's 256) levels, so their mean error is held to 10 % and
the shape of the output (cosine, top-1) carries the gate. Tuned so well-converted models pass (the digits CNN:
fp16 cosine 1.00000, int8 0.99997, top-1 100 %)."""
THRESHOLDS = ("atol", "rtol", "error_stat", "error_quantile", "min_cosine", "min_top1")


def thresholds(options: CheckOptions, precision: Precision, output: str) -> dict[str, Any]:
    """The output's thresholds: named for it, else given for every output, else the precision's default."""
    chosen = {}
    for name in THRESHOLDS:
        given = getattr(options, name)
        chosen[name] = given.get(output, given.get("", DEFAULTS[precision][name]))
    return chosen


def check_accuracy(reference: dict[str, np.ndarray], candidate, precision: Precision, dataset: Dataset,
                   indices: np.ndarray, options: CheckOptions, progress: Callable[[int], None] | None = None
                   ) -> CheckResult:
    """``candidate`` (the built model's path) against the FP32 ``reference`` outputs, batch by batch."""
    from polygraphy.comparator import Comparator, CompareFunc, IterationResult, RunResults
    from polygraphy.logger import G_LOGGER

    cand = session(candidate, f"{precision} model")
    names = list(reference)
    if [o.name for o in cand.get_outputs()] != names:
        raise CheckFailed(f"{candidate}: outputs differ from the FP32 model's ({', '.join(names)})")
    limits = {name: thresholds(options, precision, name) for name in names}
    compare = CompareFunc.simple(
        atol={n: t["atol"] for n, t in limits.items()}, rtol={n: t["rtol"] for n, t in limits.items()},
        check_error_stat={n: t["error_stat"] for n, t in limits.items()},
        error_quantile={n: t["error_quantile"] for n, t in limits.items()})
    per_output: dict[str, dict[str, Any]] = {n: {"passed": True, "max_absdiff": 0.0, "max_reldiff": 0.0,
                                                 "mean_absdiff": 0.0, "quantile_absdiff": 0.0, "cosines": [],
                                                 "agree": 0, "nonfinite": 0} for n in names}
    done = 0
    for chunk in batches(indices, options.batch_size):
        feed = dataset.read(chunk)
        try:
            actual = cand.run(names, feed)
        except Exception as exc:
            raise CheckFailed(f"onnxruntime cannot run the {precision} model {candidate}: {first_line(exc)}") from None
        expected = {n: reference[n][done:done + len(chunk)] for n in names}
        done += len(chunk)
        ref_result = IterationResult(outputs=expected, runner_name="fp32")
        cand_result = IterationResult(outputs=dict(zip(names, actual, strict=True)), runner_name=str(precision))
        with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
            valid = Comparator.validate(RunResults([(str(precision), [cand_result])]), check_inf=True,
                                        check_nan=True)
            results = compare(ref_result, cand_result)
        for name, value in zip(names, actual, strict=True):
            stats, result = per_output[name], results.get(name)
            stats["passed"] &= bool(result)
            for key in ("max_absdiff", "max_reldiff", "quantile_absdiff"):
                stats[key] = max(stats[key], float(getattr(result, key, 0.0) or 0.0))
            stats["mean_absdiff"] += float(getattr(result, "mean_absdiff", 0.0) or 0.0) * len(chunk)
            if not valid:
                stats["nonfinite"] += int(value.size - np.count_nonzero(np.isfinite(value)))
            a = np.asarray(expected[name], dtype=np.float64).reshape(len(chunk), -1)
            b = np.asarray(value, dtype=np.float64).reshape(len(chunk), -1)
            stats["cosines"].append(cosine_per_sample(a, b))
            stats["classes"] = value.ndim == 2 and value.shape[1] > 1 and np.issubdtype(value.dtype, np.floating)
            if stats["classes"]:
                stats["agree"] += int((expected[name].argmax(axis=1) == value.argmax(axis=1)).sum())
        if progress:
            progress(len(chunk))
    return _verdict(per_output, limits, len(indices), precision)


def _verdict(per_output: dict[str, dict[str, Any]], limits: dict[str, dict[str, Any]], samples: int,
             precision: Precision) -> CheckResult:
    figures, evidence, failures = {}, [], []
    for name, stats in per_output.items():
        limit, cosines = limits[name], np.concatenate(stats["cosines"])
        top1 = stats["agree"] / samples if stats.get("classes") else None
        figure = {"samples": samples, "cosine_mean": float(cosines.mean()), "cosine_min": float(cosines.min()),
                  "max_abs_error": stats["max_absdiff"], "max_rel_error": stats["max_reldiff"],
                  "mean_abs_error": stats["mean_absdiff"] / samples, "top1_agreement": top1,
                  "nonfinite": stats["nonfinite"], "thresholds": limit}
        figures[name] = figure
        stat = limit["error_stat"]
        line = (f"output {name}: cosine mean {figure['cosine_mean']:.6f} (min {figure['cosine_min']:.6f}), max abs "
                f"error {figure['max_abs_error']:.4g}, mean abs error {figure['mean_abs_error']:.4g}"
                + (f", top-1 agreement {top1:.2%}" if top1 is not None else ""))
        evidence.append(line)
        if not stats["passed"]:
            failures.append(f"output {name}: {stat} error beyond atol {limit['atol']:g} and rtol {limit['rtol']:g} "
                            f"(max abs error {figure['max_abs_error']:.4g}, max rel error "
                            f"{figure['max_rel_error']:.4g})")
        if figure["nonfinite"]:
            failures.append(f"output {name}: {figure['nonfinite']} NaN/Inf values")
        if figure["cosine_mean"] < limit["min_cosine"]:
            failures.append(f"output {name}: cosine mean {figure['cosine_mean']:.6f} below --min-cosine "
                            f"{limit['min_cosine']:g}")
        if top1 is not None and top1 < limit["min_top1"]:
            failures.append(f"output {name}: top-1 agreement {top1:.2%} below --min-top1 {limit['min_top1']:.2%}")
    if failures:
        return CheckResult(name="accuracy", status=Status.FAILED, figures=figures, evidence=failures + evidence,
                           summary=f"{precision} vs FP32 on {samples} samples: {failures[0]}"
                                   + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""))
    return CheckResult(name="accuracy", status=Status.OK, figures=figures, evidence=evidence,
                       summary=f"{precision} vs FP32 on {samples} samples in onnxruntime: " + "; ".join(
                           f"{n} cosine {f['cosine_mean']:.5f}, max abs error {f['max_abs_error']:.3g}"
                           for n, f in figures.items()))


def engine_accuracy(engine: EngineRecord) -> CheckResult:
    """The engine itself against onnxruntime: only with a GPU of its compute capability and a TensorRT runtime."""
    from compiler.core.gpu import list_gpus

    gpus, why = list_gpus()
    wanted = engine.compute_capabilities
    here = ", ".join(f"{g.name} ({g.compute_capability})" for g in gpus) or f"no GPU ({why})"
    figures = {"engine_compute_capabilities": wanted, "gpus": [g.compute_capability for g in gpus]}
    if not any(g.compute_capability in wanted for g in gpus):
        return CheckResult(name="engine-accuracy", status=Status.SKIPPED, figures=figures,
                           summary=f"skipped: no compatible GPU: the engine is for compute capability "
                                   f"{', '.join(wanted)}; this machine has {here}")
    return CheckResult(name="engine-accuracy", status=Status.SKIPPED, figures=figures,
                       summary=f"skipped: running engines is not implemented in this version (a compatible GPU "
                               f"is here: {here})")
