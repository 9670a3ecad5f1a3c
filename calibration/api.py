"""``calibrate``: dataset → ranges → Q/DQ (or FP16) model → TensorRT cache → held-out accuracy report.

Output folder::

    model.onnx          the Q/DQ (int8/fp8) or FP16 model, the original's metadata_props kept
    model.onnx.data     its weights, when beyond protobuf's 2 GiB limit
    calibration.json    precision, method, model/data sha256, sample counts, per-tensor ranges, options
    calibration.cache   TensorRT <= 10 calibration cache (int8/fp8 runs)
    report.json         held-out comparison against FP32 per output

``calibration.json`` is written last and holds the run's content key (model, data, options, tool
versions): a second run with the same key and intact files reuses the folder instead of recomputing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from calibration import calibrators
from calibration.calibrators import HistogramOptions
from calibration.convert import convert_fp16
from calibration.datasets import ImagePreprocess, model_inputs, open_dataset, split
from calibration.report import AccuracyReport, Gate, compare, gates, session
from compiler.cache import file_sha256, hash_json, replace_dir, staging_folder, writable_folder, write_atomic
from compiler.errors import InvalidInput, stop_signals_held
from compiler.model import load_model
from compiler.paths import check_not_overwriting

PRECISIONS = ("int8", "fp8", "fp16")
FORMAT = 1
FILES = ("model.onnx", "model.onnx.data", "calibration.cache", "report.json")
"""What calibration.json records the sha256 of (model.onnx.data: the weights of a model beyond protobuf's limit)."""

ProgressCallback = Callable[[str, int, int], None]
"""Called as (phase, samples done, samples total); phases ``calibrate`` and ``held-out``."""


class TensorRange(BaseModel):
    min: float
    max: float
    amax: float
    scale: float
    """The symmetric scale written in the Q/DQ model for this tensor (amax/127 int8, amax/448 fp8)."""


class CalibrationResult(BaseModel):
    format: int = FORMAT
    precision: str
    method: str | None
    """Range method (minmax, entropy, percentile); None for fp16, which converts without ranges."""
    model: str
    model_sha256: str
    data: str
    data_kind: str
    data_sha256: str
    samples: int
    """Calibration samples used (after the held-out split and ``samples`` cap)."""
    holdout_samples: int
    batch_size: int
    seed: int
    options: dict[str, Any]
    versions: dict[str, str]
    cache_key: str
    ranges: dict[str, TensorRange]
    trt_cache_header: str | None
    files: dict[str, str]
    """Output file name -> sha256."""
    out: str
    seconds: float
    report: AccuracyReport
    gates: list[Gate] = []
    passed: bool = True
    reused: bool = False


def _counter(phase: str, total: int, progress: ProgressCallback | None) -> Callable[[int], None]:
    """Turns "n more samples done" into (phase, done, total) progress reports, starting at 0."""
    done = 0
    if progress:
        progress(phase, 0, total)

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(phase, done, total)

    return advance


def calibrate(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    precision: str = "int8",
    method: str = "minmax",
    samples: int | None = None,
    batch_size: int = 32,
    *,
    holdout: float = 0.2,
    seed: int = 0,
    num_bins: int = 2048,
    percentile: float = 99.999,
    chunk_mb: int = 256,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    max_abs_error: float | None = None,
    preprocess: ImagePreprocess | None = None,
    reuse: bool = True,
    staged: bool = False,
    progress: ProgressCallback | None = None,
) -> CalibrationResult:
    """Calibrate (int8/fp8) or convert (fp16) ``model`` with ``data``; write the results into ``out``.

    ``holdout`` is the fraction (< 1) or count of samples kept out of calibration to measure accuracy;
    ``samples`` caps the calibration set; ``chunk_mb`` bounds the activations held at once. Gates
    (``min_cosine`` on each output's mean cosine, ``min_top1``, ``max_abs_error``) are evaluated into
    ``result.gates`` / ``result.passed``; the outputs are written either way.

    ``staged`` is for folders that concurrent runs share (the build cache): the results are written
    into a new sibling folder that is renamed to ``out`` only when complete, so a reader of ``out``
    never sees another run's half-written ``model.onnx``; by default ``out`` is written in place,
    ``calibration.json`` last.
    """
    started = time.perf_counter()
    precision, method = _check_options(precision, method, batch_size, num_bins, percentile, chunk_mb,
                                       holdout=holdout, samples=samples, seed=seed, min_cosine=min_cosine,
                                       min_top1=min_top1, max_abs_error=max_abs_error)
    out = Path(out)
    source = load_model(model)
    dataset = open_dataset(data, source, preprocess)
    try:
        check_not_overwriting([out / name for name in (*FILES, "calibration.json")],
                              [source.path, *source.external_files, *dataset.inputs()], "--out",
                              replaced=out if staged else None)
        fixed = {i.batch for i in model_inputs(source) if i.batch is not None}
        if len(fixed) > 1:
            raise InvalidInput(f"{source.path}: inputs have different fixed batch sizes {sorted(fixed)}")
        fixed_batch = fixed.pop() if fixed else None
        if fixed_batch is not None:
            batch_size = fixed_batch
        chosen = split(dataset.count, holdout, samples, seed, fixed_batch)
        options = {"holdout": holdout, "requested_samples": samples, "chunk_mb": chunk_mb}
        if method in ("entropy", "percentile"):
            options |= {"num_bins": num_bins, "num_quantized_bins": HistogramOptions.num_quantized_bins}
        if method == "percentile":
            options["percentile"] = percentile
        versions = _versions()
        record = {
            "format": FORMAT, "precision": precision, "method": method, "model_sha256": source.sha256,
            "data_sha256": dataset.sha256, "samples": len(chosen.calibration), "batch_size": batch_size,
            "seed": seed, "options": options, "versions": versions,
        }
        key = hash_json(record)
        limits = {"min_cosine": min_cosine, "min_top1": min_top1, "max_abs_error": max_abs_error}
        if reuse and (previous := _reusable(out, key)) is not None:  # same data bytes: already checked
            return _with_gates(previous, limits, reused=True)

        def produce(folder: Path) -> CalibrationResult:
            """Calibrate into ``folder`` (``out``, or the staging folder that becomes it), ``calibration.json`` last.

            The model is written in a hidden folder inside ``folder`` and moved into place only once the held-out
            report is done, so a run stopped midway leaves no model of its own there, whole or cut short."""
            reference = session(source.path, "model")  # fail fast on a model onnxruntime cannot run
            value_ranges: dict[str, tuple[float, float]] = {}
            header = cache = None
            with ExitStack() as cleanup:
                work = _temporary_folder(cleanup, None, "calibrate-")
                pending = _temporary_folder(cleanup, folder, ".calibrate-")
                model_out = pending / "model.onnx"
                if precision == "fp16":
                    convert_fp16(source.path, model_out)
                else:
                    prepared = calibrators.prepare(source.path, work)
                    tensors = calibrators.collect_ranges(
                        prepared, dataset, chosen.calibration, method, batch_size,
                        HistogramOptions(num_bins=num_bins, percentile=percentile), chunk_mb, work,
                        _counter("calibrate", len(chosen.calibration), progress))
                    value_ranges = calibrators.ranges(tensors)
                    calibrators.quantize(prepared, tensors, precision, method, model_out, work)
                    calibrators.keep_metadata(source.proto, model_out)
                    cache = calibrators.trt_cache(value_ranges, calibrators.tensor_names(source.proto), method)
                    header = cache.splitlines()[0]
                report = compare(reference, model_out, precision, dataset, chosen.holdout, batch_size, fixed_batch,
                                 _counter("held-out", len(chosen.holdout), progress))
                with stop_signals_held():  # the model and the weights it names go in together
                    for name in ("model.onnx.data", "model.onnx"):
                        if (pending / name).is_file():
                            os.replace(pending / name, folder / name)
                        else:
                            (folder / name).unlink(missing_ok=True)  # an earlier run's
            if cache is None:
                (folder / "calibration.cache").unlink(missing_ok=True)
            else:
                _write(folder / "calibration.cache", cache)
            _write(folder / "report.json", report.model_dump_json(indent=2) + "\n")
            files = {name: file_sha256(folder / name) for name in FILES if (folder / name).is_file()}
            result = CalibrationResult(
                **record, cache_key=key, model=str(source.path), data=str(dataset.path), data_kind=dataset.kind,
                holdout_samples=len(chosen.holdout), trt_cache_header=header, files=files, out=str(out),
                ranges={name: TensorRange(min=lo, max=hi, amax=calibrators.amax(lo, hi),
                                          scale=calibrators.scale(lo, hi, precision))
                        for name, (lo, hi) in value_ranges.items()},
                seconds=round(time.perf_counter() - started, 3), report=report,
            )
            _write(folder / "calibration.json",
                   result.model_dump_json(indent=2, exclude={"report", "gates", "passed", "reused"}) + "\n")
            return result

        dataset.check_values()
        if not staged:
            writable_folder(out, "--out")
            (out / "calibration.json").unlink(missing_ok=True)  # the folder is incomplete until we finish
            return _with_gates(produce(out), limits, reused=False)
        with staging_folder(out.parent, out.name) as staging:
            result = produce(staging)
            if reuse and (previous := _reusable(out, key)) is not None:  # a concurrent run came first
                return _with_gates(previous, limits, reused=True)
            replace_dir(out, staging)
            return _with_gates(result, limits, reused=False)
    finally:
        dataset.close()


MAX_NUM_BINS = 1 << 14
"""Entropy's threshold search grows with the bins (digits CNN: 2048 bins ~3 s, 16384 ~110 s, 65536 ~400 s) and
numpy allocates them per tensor: 8x TensorRT's own 2048 is plenty."""


def _check_options(precision: str, method: str | None, batch_size: int, num_bins: int, percentile: float,
                   chunk_mb: int, *, holdout: float | int = 0.2, samples: int | None = None, seed: int = 0,
                   min_cosine: float | None = None, min_top1: float | None = None,
                   max_abs_error: float | None = None) -> tuple[str, str | None]:
    """Every option in the range its consumer takes (numpy, onnxruntime, the gates), before any work: NaN and
    infinity compare False with everything, so each bound is written to fail for them."""
    if precision not in PRECISIONS:
        raise InvalidInput(f"--precision '{precision}' is not one of {', '.join(PRECISIONS)}")
    if not _is_int(batch_size) or batch_size < 1:
        raise InvalidInput(f"--batch-size {batch_size}: must be a whole number of at least 1")
    if not isinstance(holdout, int | float) or isinstance(holdout, bool) or not 0 < holdout < math.inf:
        raise InvalidInput(f"--holdout {holdout}: must be a positive fraction (< 1) or count: every run measures "
                           f"accuracy on held-out samples")
    if holdout >= 1 and holdout != int(holdout):
        raise InvalidInput(f"--holdout {holdout}: give a fraction below 1 (0.2) or a whole count of samples (300)")
    if samples is not None and (not _is_int(samples) or samples < 1):
        raise InvalidInput(f"--samples {samples}: must be a whole number of at least 1")
    if not _is_int(seed) or seed < 0:
        raise InvalidInput(f"--seed {seed}: must be a whole number of at least 0")
    if not _is_int(chunk_mb) or chunk_mb < 1:
        raise InvalidInput(f"--chunk-mb {chunk_mb}: must be a whole number of at least 1")
    for option, value, low, high in (("--min-cosine", min_cosine, -1.0, 1.0), ("--min-top1", min_top1, 0.0, 1.0),
                                     ("--max-abs-error", max_abs_error, 0.0, math.inf)):
        if value is not None and not (low <= value <= high and math.isfinite(value)):
            bounds = f"at least {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
            raise InvalidInput(f"{option} {value}: must be a finite number {bounds}")
    if precision == "fp16":
        return precision, None
    if method not in calibrators.METHODS:
        raise InvalidInput(f"--method '{method}' is not one of {', '.join(calibrators.METHODS)}")
    if not _is_int(num_bins) or not 256 <= num_bins <= MAX_NUM_BINS:
        raise InvalidInput(f"--num-bins {num_bins}: must be in [256, {MAX_NUM_BINS}] (256 for a meaningful "
                           f"histogram; TensorRT uses 2048)")
    if not 50 < percentile <= 100:
        raise InvalidInput(f"--percentile {percentile}: must be in (50, 100]")
    return precision, method


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _temporary_folder(cleanup: ExitStack, parent: Path | None, prefix: str) -> Path:
    """A new folder removed when ``cleanup`` ends, with stop signals held while it is made and while it is removed:
    a stop right after its mkdir, or one that cut its removal short, would leave it behind."""
    with stop_signals_held():
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        cleanup.callback(_remove_held, folder)
    return folder


def _remove_held(folder: Path) -> None:
    with stop_signals_held():
        shutil.rmtree(folder, ignore_errors=True)


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    from compiler import version

    return {"compile": version(), "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__}


def _write(path: Path, text: str) -> None:
    write_atomic(path, text.encode("utf-8"))


def _reusable(out: Path, key: str) -> CalibrationResult | None:
    """The previous run in ``out`` when it had the same content key and its files are intact."""
    record_file, report_file = out / "calibration.json", out / "report.json"
    if not record_file.is_file() or not report_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        if record.get("cache_key") != key:
            return None
        report = AccuracyReport.model_validate_json(report_file.read_text(encoding="utf-8"))
        result = CalibrationResult.model_validate({**record, "report": report})
    except (OSError, ValueError, ValidationError):
        return None
    for name, digest in result.files.items():
        if not (out / name).is_file() or file_sha256(out / name) != digest:
            return None
    return result


def _with_gates(result: CalibrationResult, limits: dict[str, float | None], reused: bool) -> CalibrationResult:
    checked = gates(result.report, **limits)
    return result.model_copy(update={"gates": checked, "passed": all(g.passed for g in checked),
                                     "reused": reused})


__all__ = ["CalibrationResult", "TensorRange", "calibrate", "convert_fp16"]
