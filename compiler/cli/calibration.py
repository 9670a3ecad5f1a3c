"""`compile calibrate`: a quantized (int8/fp8) or converted (fp16) model and its accuracy against FP32."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import (
    CALIBRATE_PRECISIONS,
    CALIBRATION,
    GATES,
    INPUTS,
    METHODS,
    OUTPUT,
    QUANTIZERS,
    ExplainOption,
    JsonOption,
    ModelArgument,
    RemoteCacheOption,
    examples,
    option,
    switch,
)
from compiler.core.errors import CheckFailed
from compiler.core.flags import CALIBRATE
from compiler.core.text import gate_figure


@examples(
    "compile calibrate model.onnx --data data.npz --precision int8 --out calibrated",
    "compile calibrate model.onnx --data images/ --method entropy --min-cosine 0.99 --out calibrated",
    "compile calibrate model.onnx --data data.npz --precision fp16 --exclude Softmax --out calibrated",
)
def calibrate(
    model: ModelArgument,
    *,
    data: Annotated[
        Path,
        option(
            "DATA",
            INPUTS,
            ".npz (one array per input, samples on axis 0) or an image folder with preprocess.yaml.",
            show_default=False,
        ),
    ],
    precision: Annotated[str, option(CALIBRATE_PRECISIONS, CALIBRATION, CALIBRATE["precision"])] = "int8",
    method: Annotated[str, option(METHODS, CALIBRATION, CALIBRATE["method"])] = "minmax",
    samples: Annotated[int | None, option("N", CALIBRATION, CALIBRATE["samples"])] = None,
    batch_size: Annotated[int, option("N", CALIBRATION, CALIBRATE["batch_size"])] = 32,
    holdout: Annotated[float, option("X", CALIBRATION, CALIBRATE["holdout"])] = 0.2,
    seed: Annotated[int, option("N", CALIBRATION, CALIBRATE["seed"])] = 0,
    percentile: Annotated[float, option("X", CALIBRATION, CALIBRATE["percentile"])] = 99.999,
    num_bins: Annotated[int, option("N", CALIBRATION, CALIBRATE["num_bins"])] = 2048,
    chunk_mb: Annotated[int, option("MIB", CALIBRATION, CALIBRATE["chunk_mb"])] = 256,
    min_cosine: Annotated[float | None, option("X", GATES, CALIBRATE["min_cosine"])] = None,
    min_top1: Annotated[float | None, option("X", GATES, CALIBRATE["min_top1"])] = None,
    max_abs_error: Annotated[float | None, option("X", GATES, CALIBRATE["max_abs_error"])] = None,
    min_sqnr: Annotated[float | None, option("DB", GATES, CALIBRATE["min_sqnr"])] = None,
    exclude: Annotated[list[str] | None, option("NODE|OP", CALIBRATION, CALIBRATE["exclude"])] = None,
    fallback: Annotated[str | None, option("auto", CALIBRATION, CALIBRATE["fallback"])] = None,
    quantizer: Annotated[str, option(QUANTIZERS, CALIBRATION, CALIBRATE["quantizer"])] = "onnxruntime",
    metric: Annotated[str | None, option("MODULE:FUNCTION", GATES, CALIBRATE["metric"])] = None,
    min_metric: Annotated[float | None, option("X", GATES, CALIBRATE["min_metric"])] = None,
    labels: Annotated[Path | None, option("FILE", INPUTS, CALIBRATE["labels"])] = None,
    out: Annotated[
        Path,
        option(
            "DIR",
            OUTPUT,
            "Output folder: model.onnx, calibration.json, calibration.cache, report.json.",
            show_default=False,
        ),
    ],
    no_reuse: Annotated[bool, switch("--no-reuse", OUTPUT, "Recompute even if DIR holds this result.")] = False,
    remote_cache: RemoteCacheOption = None,
    explain: ExplainOption = False,
    json: JsonOption = False,
) -> None:
    """Quantized (int8/fp8 Q/DQ) or converted (fp16) model, ranges, TensorRT calibration cache, accuracy report.
    The held-out accuracy is gated as compile check gates it (unset thresholds take the precision's defaults,
    docs/check.md): a calibration that collapses accuracy exits 1 here."""
    from calibration import calibrate as run_calibration
    from compiler.core.options import CalibrationOptions

    options = CalibrationOptions(
        precision=precision,
        method=method,
        samples=samples,
        batch_size=batch_size,
        holdout=holdout,
        seed=seed,
        percentile=percentile,
        num_bins=num_bins,
        chunk_mb=chunk_mb,
        min_cosine=min_cosine,
        min_top1=min_top1,
        max_abs_error=max_abs_error,
        min_sqnr=min_sqnr,
        exclude=tuple(exclude or ()),
        fallback=fallback,
        quantizer=quantizer,
        metric=metric,
        min_metric=min_metric,
        labels=labels,
        reuse=not no_reuse,
    )
    from compiler.cache.tier import CacheTier

    shared = CacheTier(remote_cache, explain)
    with render.phase_progress() as update:
        result = run_calibration(model, data, out, options, progress=update, shared=shared)
    render.emit_json(result) if json else render.calibration(result)
    render.cache_outcome("calibration", result.cache, explain and not json)
    failed = [g for g in result.gates if not g.passed]
    if failed:
        first = failed[0]
        raise CheckFailed(
            f"{len(failed)} gate(s) failed; {first.name} on output '{first.output}': "
            f"{gate_figure(first.name, first.value)} vs threshold "
            f"{gate_figure(first.name, first.threshold)}{suggestion(result)} "
            f"(report: {Path(result.out) / 'report.json'})"
        )


def suggestion(result) -> str:
    """For a failed int8/fp8 calibration: the most sensitive nodes and what to do about them."""
    ranked = result.report.sensitivity or []
    if not ranked:
        return ""
    worst = ", ".join(f"{s['exclude']} ({s['sqnr_db']:.1f} dB)" for s in ranked[:3])
    return (
        f"; most sensitive nodes: {worst}: keep them in float with --exclude {ranked[0]['exclude']}, or let "
        f"--fallback auto find the fewest to keep"
    )
