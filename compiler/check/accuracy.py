"""Accuracy: each built precision's model (the FP16 conversion or the Q/DQ model the engine was built from)
against the FP32 model on the same samples in onnxruntime, judged by the scale-free gates ``compile calibrate``
uses (:mod:`compiler.data.agreement`: cosine mean and low quantile, SQNR, top-1/top-5 agreement, NaN/Inf); and the
engine itself, which needs a GPU of its compute capability.

Absolute/relative tolerances are optional, per output, compared as Polygraphy's comparator does: they mean
something only to someone who knows the output's scale, and an absolute default fails a large-logit model on
rounding alone (docs/check.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from compiler.core.errors import CheckFailed
from compiler.core.options import CheckOptions
from compiler.core.output_kind import declared
from compiler.core.records import CheckResult, EngineRecord, Precision, Status
from compiler.data.agreement import Agreement, Limits, describe, enough_samples, judge, limits
from compiler.data.datasets import Dataset
from compiler.data.metric import Metric, MetricRun
from compiler.data.model import first_line
from compiler.data.output_kinds import mixed_outputs
from compiler.data.sampling import batches
from compiler.data.session import session


def output_limits(options: CheckOptions, precision: Precision, output: str) -> Limits:
    """The output's gates: named for it, else given for every output, else the precision's default."""

    def given(name: str) -> float | None:
        chosen = getattr(options, name)
        return chosen.get(output, chosen.get(""))

    return limits(str(precision), given("min_cosine"), given("min_sqnr"), given("min_top1"), gate_on=options.gate_on)


def tolerances(options: CheckOptions, output: str) -> dict[str, Any] | None:
    """The output's atol/rtol gate when one of them is given (either, as Polygraphy: an element passes on one)."""

    def given(name: str, default: Any) -> Any:
        chosen = getattr(options, name)
        return chosen.get(output, chosen.get("", default))

    atol, rtol = given("atol", None), given("rtol", None)
    if atol is None and rtol is None:
        return None
    return {
        "atol": atol or 0.0,
        "rtol": rtol or 0.0,
        "error_stat": given("error_stat", "elemwise"),
        "error_quantile": given("error_quantile", 0.99),
    }


def check_accuracy(
    reference: dict[str, np.ndarray],
    candidate,
    precision: Precision,
    dataset: Dataset,
    indices: np.ndarray,
    options: CheckOptions,
    progress: Callable[[int], None] | None = None,
    metric: Metric | None = None,
    labels: dict[str, np.ndarray] | None = None,
) -> CheckResult:
    """``candidate`` (the built model's path) against the FP32 ``reference`` outputs, batch by batch."""
    cand = session(candidate, f"{precision} model")
    names = list(reference)
    if [o.name for o in cand.get_outputs()] != names:
        raise CheckFailed(f"{candidate}: outputs differ from the FP32 model's ({', '.join(names)})")
    tolerance = {name: t for name in names if (t := tolerances(options, name)) is not None}
    compare = _tolerance_compare(tolerance) if tolerance else None
    within = dict.fromkeys(tolerance, True)
    agreement = Agreement(names, declared(options.output, names), mixed_outputs(candidate))
    scored = MetricRun(metric, names, labels, indices) if metric is not None else None
    done = 0
    for chunk in batches(indices, options.batch_size):
        feed = dataset.read(chunk)
        try:
            actual = dataset.batch_first(names, cand.run(names, feed), len(chunk))
        except Exception as exc:
            raise CheckFailed(f"onnxruntime cannot run the {precision} model {candidate}: {first_line(exc)}") from None
        expected = [reference[n][done : done + len(chunk)] for n in names]
        done += len(chunk)
        agreement.add(expected, actual)
        if scored is not None:
            scored.add(expected, actual)
        if compare is not None:
            for name, passed in compare(names, expected, actual).items():
                within[name] &= passed
        if progress:
            progress(len(chunk))
    verdict = _verdict(agreement, options, precision, tolerance, within, len(indices))
    if scored is not None:
        verdict = _with_metric(verdict, metric.name, scored.value(), options.min_metric)
    return (
        _with_sensitivity(verdict, candidate) if verdict.status == Status.FAILED and precision.calibrated else verdict
    )


def _with_sensitivity(result: CheckResult, model) -> CheckResult:
    """A failed int8/fp8 verdict with the most sensitive nodes, when the model's calibration folder is at hand
    (its report.json ranks them, vouched for by calibration.json) and what to do about them."""
    from pathlib import Path

    from compiler.core.errors import CompileError
    from compiler.core.files import file_sha256
    from compiler.core.record_files import read_record
    from compiler.core.records import AccuracyReport, CalibrationRecord

    folder = Path(model).parent
    try:
        record = read_record(folder / "calibration.json", CalibrationRecord, "")
        if record.files.get("report.json") != file_sha256(folder / "report.json"):
            return result
        ranked = read_record(folder / "report.json", AccuracyReport, "").sensitivity or []
    except (CompileError, OSError):
        return result
    if not ranked:
        return result
    worst = ", ".join(f"{s['exclude']} ({s['sqnr_db']:.1f} dB)" for s in ranked[:3])
    advice = (
        f"most sensitive nodes: {worst}; keep them in float with compile calibrate --exclude "
        f"{ranked[0]['exclude']}, or --fallback auto"
    )
    return result.model_copy(
        update={
            "summary": f"{result.summary}; {advice}",
            "evidence": [*result.evidence, advice],
            "figures": {**result.figures, "sensitivity": ranked[:10]},
        }
    )


def _with_metric(result: CheckResult, name: str, value: float, threshold: float | None) -> CheckResult:
    """The user's score among the figures, and its gate when ``--min-metric`` is given."""
    figures = {**result.figures, "metric": {"name": name, "value": value, "threshold": threshold}}
    line = f"metric {name}: {value:.6g}" + (f" (--min-metric {threshold:g})" if threshold is not None else "")
    if threshold is None or value >= threshold:
        return result.model_copy(update={"figures": figures, "evidence": [*result.evidence, line]})
    failure = f"metric {name} {value:.6g} below --min-metric {threshold:g}"
    return result.model_copy(
        update={
            "status": Status.FAILED,
            "figures": figures,
            "evidence": [failure, *result.evidence, line],
            "summary": f"{failure}; {result.summary}",
        }
    )


def _tolerance_compare(tolerance: dict[str, dict[str, Any]]):
    """Polygraphy's comparator on the outputs that have an atol/rtol gate; returns name -> passed per batch."""
    from polygraphy.comparator import CompareFunc, IterationResult
    from polygraphy.logger import G_LOGGER

    compare = CompareFunc.simple(
        atol={n: t["atol"] for n, t in tolerance.items()},
        rtol={n: t["rtol"] for n, t in tolerance.items()},
        check_error_stat={n: t["error_stat"] for n, t in tolerance.items()},
        error_quantile={n: t["error_quantile"] for n, t in tolerance.items()},
    )

    def run(names: list[str], expected: list[np.ndarray], actual: list[np.ndarray]) -> dict[str, bool]:
        chosen = [i for i, n in enumerate(names) if n in tolerance]
        ref = IterationResult(outputs={names[i]: expected[i] for i in chosen}, runner_name="fp32")
        cand = IterationResult(outputs={names[i]: np.nan_to_num(actual[i]) for i in chosen}, runner_name="candidate")
        with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
            results = compare(ref, cand)
        return {names[i]: bool(results.get(names[i])) for i in chosen}

    return run


def _verdict(
    agreement: Agreement,
    options: CheckOptions,
    precision: Precision,
    tolerance: dict[str, dict[str, Any]],
    within: dict[str, bool],
    samples: int,
) -> CheckResult:
    figures, evidence, failures = {}, [], []
    if options.min_samples and not (enough := enough_samples(samples, options.min_samples)).passed:
        failures.append(describe(enough))
    for out in agreement.reports():
        limit = output_limits(options, precision, out.name)
        gates = judge(out, limit)
        figures[out.name] = {
            **out.model_dump(exclude={"name", "kind"}),
            "thresholds": {g.name: g.threshold for g in gates} | tolerance.get(out.name, {}),
        }
        evidence.append(
            f"output {out.name}: cosine mean {out.cosine_mean:.6f} (5 % quantile {out.cosine_low:.6f}, "
            f"min {out.cosine_min:.6f}), SQNR {out.sqnr_db:.1f} dB, max abs error "
            f"{out.max_abs_error:.4g}"
            + (f", top-1 agreement {out.top1_agreement:.2%}" if out.top1_agreement is not None else "")
            + (f", detection recall {out.recall:.2%}, precision {out.precision:.2%}" if out.recall is not None else "")
            + (f", mask IoU {out.iou:.2%}" if out.iou is not None else "")
            + (f"; {out.note}" if out.note else "")
        )
        failures += [describe(g) for g in gates if not g.passed]
        if out.name in tolerance and not within[out.name]:
            t = tolerance[out.name]
            failures.append(
                f"output {out.name}: {t['error_stat']} error beyond --atol {t['atol']:g} and --rtol "
                f"{t['rtol']:g} (max abs error {out.max_abs_error:.4g})"
            )
    if failures:
        return CheckResult(
            name="accuracy",
            status=Status.FAILED,
            figures=figures,
            evidence=failures + evidence,
            summary=f"{precision} vs FP32 on {samples} samples: {failures[0]}"
            + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""),
        )
    return CheckResult(
        name="accuracy",
        status=Status.OK,
        figures=figures,
        evidence=evidence,
        summary=f"{precision} vs FP32 on {samples} samples in onnxruntime: "
        + "; ".join(f"{n} cosine {f['cosine_mean']:.5f}, SQNR {f['sqnr_db']:.1f} dB" for n, f in figures.items()),
    )


def engine_accuracy(engine: EngineRecord) -> CheckResult:
    """The engine itself against onnxruntime: only with a GPU of its compute capability and a TensorRT runtime."""
    from compiler.core.gpu import list_gpus

    gpus, why = list_gpus()
    wanted = engine.compute_capabilities
    here = ", ".join(f"{g.name} ({g.compute_capability})" for g in gpus) or f"no GPU ({why})"
    figures = {"engine_compute_capabilities": wanted, "gpus": [g.compute_capability for g in gpus]}
    if not any(g.compute_capability in wanted for g in gpus):
        return CheckResult(
            name="engine-accuracy",
            status=Status.SKIPPED,
            figures=figures,
            summary=f"skipped: no compatible GPU: the engine is for compute capability "
            f"{', '.join(wanted)}; this machine has {here}",
        )
    return CheckResult(
        name="engine-accuracy",
        status=Status.SKIPPED,
        figures=figures,
        summary=f"skipped: running engines is not implemented in this version (a compatible GPU is here: {here})",
    )
