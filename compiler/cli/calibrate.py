"""`compile calibrate`: a quantized (int8/fp8) or converted (fp16) model and its accuracy against FP32."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import (
    ConstOption,
    DimOption,
    ExplainOption,
    JsonOption,
    ModelArgument,
    RemoteCacheOption,
    examples,
    option,
    with_options,
)
from compiler.core.errors import CheckFailed
from compiler.core.flags import CALIBRATE, INPUTS, OUTPUT
from compiler.core.text import gate_figure


@examples(
    "compile calibrate model.onnx --data data.npz --precision int8 --out calibrated",
    "compile calibrate model.onnx --data images/ --method entropy --min-cosine 0.99 --out calibrated",
    "compile calibrate model.onnx --data data.npz --precision fp16 --exclude Softmax --out calibrated",
    "compile calibrate det.onnx --dim x:2=H --dim x:3=W --data data.npz --out calibrated",
    "compile calibrate vad.onnx --data audio.npz --const sr=16000 --precision int8 --out calibrated",
)
@with_options(CALIBRATE)
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
    out: Annotated[
        Path,
        option(
            "DIR",
            OUTPUT,
            "Output folder: model.onnx, calibration.json, calibration.cache, report.json.",
            show_default=False,
        ),
    ],
    options: dict,
    const: ConstOption = None,
    dim: DimOption = None,
    remote_cache: RemoteCacheOption = None,
    explain: ExplainOption = False,
    json: JsonOption = False,
) -> None:
    """Quantized (int8/fp8 Q/DQ) or converted (fp16) model, ranges, TensorRT calibration cache, accuracy report.
    The held-out accuracy is gated as compile check gates it (unset thresholds take the precision's defaults,
    docs/check.md): a calibration that collapses accuracy exits 1 here."""
    from calibration import calibrate as run_calibration
    from compiler.core.files import default_cache_dir
    from compiler.core.options import CalibrationOptions
    from compiler.data.agreement import describe, inconclusive
    from compiler.data.dims import renamed_path
    from compiler.data.freeze import frozen_model, parse_consts

    options = CalibrationOptions(**options)
    model = frozen_model(model, parse_consts(const or ()))  # frozen, then renamed: build orders them alike
    model = renamed_path(model, dim, default_cache_dir())  # build --dim with the same renames reads this copy
    from compiler.cache.reuse import open_tier

    tier = open_tier(remote_cache, explain)
    with render.phase_progress() as update:
        result = run_calibration(model, data, out, options, progress=update, tier=tier)
    render.emit_json(result) if json else render.calibration(result)
    render.cache_outcome("calibration", result.cache, explain and not json)
    failed = [g for g in result.gates if not g.passed]
    if failed:  # a failure whatever the sample count first (the range gate names what to keep in FP32), then
        # too few samples for any verdict, then the figures
        first = min(failed, key=lambda g: FIRST_SAID.get(g.name, len(FIRST_SAID) + inconclusive(g)))
        if first.name == "min-samples" or inconclusive(first):
            raise CheckFailed(f"{describe(first)} (report: {Path(result.out) / 'report.json'})")
        raise CheckFailed(
            f"{len(failed)} gate(s) failed; {first.name} on output '{first.output}': "
            f"{gate_figure(first.name, first.value)} vs threshold "
            f"{gate_figure(first.name, first.threshold)}{suggestion(result)} "
            f"(report: {Path(result.out) / 'report.json'})"
        )


FIRST_SAID = {"fp16-range": 0, "finite": 1, "min-samples": 2}
"""Which failed gate calibrate's error line names first (any other after these, in the report's order, those that
fail only on their interval's lower end last)."""


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
