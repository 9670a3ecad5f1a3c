"""``calibrate``: dataset → ranges → Q/DQ (or FP16) model → TensorRT cache → held-out accuracy report.

Output folder::

    model.onnx          the Q/DQ (int8/fp8) or FP16 model, the original's metadata_props kept
    model.onnx.data     its weights, when beyond protobuf's 2 GiB limit
    calibration.json    precision, method, model/data sha256, sample counts, per-tensor ranges, options
    calibration.cache   TensorRT <= 10 calibration cache (int8/fp8 runs)
    report.json         held-out comparison against FP32 per output

``calibration.json`` is written last and holds the run's content key (model, data, options, tool
versions): a second run with the same key and intact files reuses the folder instead of recomputing.

The steps are :mod:`calibration.steps`; the quantizers :mod:`calibration.quantizers`; reuse
:mod:`calibration.reuse`; ``--fallback auto`` :mod:`calibration.fallback`.
"""

from __future__ import annotations

import os
from pathlib import Path

from calibration.convert import convert_fp16
from calibration.quantizers import quantizer_for
from calibration.steps import calibrate_once, resolve_exclude
from compiler.core.options import CalibrationOptions
from compiler.core.records import CalibrationResult, Progress, TensorRange
from compiler.core.reuse import RemoteTier
from compiler.data.datasets import ImagePreprocess
from compiler.data.model import load_model


def calibrate(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: CalibrationOptions | None = None,
    *,
    preprocess: ImagePreprocess | None = None,
    staged: bool = False,
    progress: Progress | None = None,
    tier: RemoteTier | None = None,
) -> CalibrationResult:
    """Calibrate (int8/fp8) or convert (fp16) ``model`` with ``data``; write the results into ``out``.

    ``options.holdout`` is the fraction (< 1) or count of samples kept out of calibration to measure accuracy;
    ``samples`` caps the calibration set; ``chunk_mb`` bounds the activations held at once. Gates
    (``min_cosine`` on each output's mean cosine, ``min_top1``, ``max_abs_error``) are evaluated into
    ``result.gates`` / ``result.passed``; the outputs are written either way.

    ``staged`` is for folders that concurrent runs share (the build cache): the results are written
    into a new sibling folder that is renamed to ``out`` only when complete, so a reader of ``out``
    never sees another run's half-written ``model.onnx``; by default ``out`` is written in place,
    ``calibration.json`` last.

    ``tier``: the remote cache (a :class:`compiler.core.reuse.RemoteTier`, ``compiler.cache.reuse.open_tier``'s): a
    result ``out`` lacks is taken from it when it has it, and one made here is sent there.
    """
    options = options or CalibrationOptions()
    quantizer_for(options).refuse(options)
    if options.fallback == "auto":
        from calibration.fallback import calibrate_with_fallback

        return calibrate_with_fallback(
            model, data, out, options, preprocess=preprocess, staged=staged, progress=progress
        )
    return calibrate_once(model, data, out, options, preprocess=preprocess, staged=staged, progress=progress, tier=tier)


def check_exclude(model: str | Path, names: tuple[str, ...]) -> None:
    """Refuse (exit 2) an ``--exclude`` value that names neither a node nor an op type of ``model``, as
    :func:`calibrate` does, without calibrating (``compile release --dry-run``)."""
    source = load_model(model)
    resolve_exclude(source.proto, names, source.path)


__all__ = ["CalibrationResult", "TensorRange", "calibrate", "check_exclude", "convert_fp16"]
