"""Numeric options of `compile calibrate` outside the range their consumer takes: exit 2 naming the option,
before any work (no output folder, no numpy or onnxruntime error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration import calibrate
from compiler.core.errors import InvalidInput
from compiler.core.options import CalibrationOptions
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_calibrate

BAD = [
    (["--holdout", "nan"], "--holdout"),
    (["--holdout", "inf"], "--holdout"),
    (["--holdout", "-inf"], "--holdout"),
    (["--holdout", "-0.5"], "--holdout"),
    (["--holdout", "0"], "--holdout"),
    (["--holdout", "2.5"], "--holdout"),
    (["--percentile", "nan"], "--percentile"),
    (["--percentile", "nan", "--method", "percentile"], "--percentile"),
    (["--percentile", "inf", "--method", "percentile"], "--percentile"),
    (["--seed", "-1"], "--seed"),
    (["--num-bins", "100000000", "--method", "entropy"], "--num-bins"),
    (["--num-bins", "99999999999999999999999", "--method", "entropy"], "--num-bins"),
    (["--num-bins", "-5", "--method", "percentile"], "--num-bins"),
    (["--min-cosine", "nan"], "--min-cosine"),
    (["--min-cosine", "inf"], "--min-cosine"),
    (["--min-cosine", "1.5"], "--min-cosine"),
    (["--min-top1", "nan"], "--min-top1"),
    (["--min-top1", "-0.1"], "--min-top1"),
    (["--max-abs-error", "nan"], "--max-abs-error"),
    (["--max-abs-error", "-1"], "--max-abs-error"),
    (["--max-abs-error", "inf"], "--max-abs-error"),
    (["--min-cosine", "nan", "--precision", "fp16"], "--min-cosine"),
    (["--holdout", "nan", "--precision", "fp16"], "--holdout"),
    (["--min-sqnr", "nan"], "--min-sqnr"),
    (["--min-sqnr", "1e9"], "--min-sqnr"),
    (["--min-metric", "nan"], "--min-metric"),
    (["--min-metric", "0.5"], "--min-metric"),
    (["--fallback", "manual"], "--fallback"),
    (["--fallback", ""], "--fallback"),
    (["--metric", "nocolon"], "--metric"),
    (["--metric", ":f"], "--metric"),
    (["--metric", "os.path:no_such_function"], "--metric"),
    (["--metric", "/dev/null.py:f"], "--metric"),
    (["--metric", "os.path:join", "--labels", "/no/such/labels.npz"], "--labels"),
]


@pytest.mark.parametrize(("args", "option"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_out_of_range_options_are_refused_before_any_work(tmp_path, args, option):
    out = tmp_path / "out"
    done = run_calibrate(out, *args, timeout=60)
    assert_clean_error(done, 2, option)
    assert "internal error" not in done.stderr and "onnxruntime" not in done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"samples": 0},
        {"samples": -3},
        {"batch_size": 0},
        {"chunk_mb": 0},
        {"seed": -1},
        {"holdout": float("nan")},
        {"num_bins": 1 << 30, "method": "entropy"},
        {"percentile": float("nan"), "method": "percentile"},
        {"min_top1": float("nan")},
        {"batch_size": True},
        {"holdout": True},
    ],
)
def test_the_api_checks_the_same_options_first(tmp_path, digits_model, digits_data, options):
    with pytest.raises(InvalidInput, match=r"^--"):
        calibrate(digits_model, digits_data, tmp_path / "out", CalibrationOptions(**options))
    assert not (tmp_path / "out").exists()


def test_in_range_extremes_still_work(tmp_path):
    """Counts far beyond the data are capped by it, not errors: a whole count of held-out samples, a huge
    --samples and --batch-size, a huge seed."""
    done = run_calibrate(
        tmp_path / "out",
        "--holdout",
        "300.0",
        "--samples",
        str(10**30),
        "--batch-size",
        str(10**30),
        "--seed",
        str(2**80),
        "--json",
    )
    assert done.exit_code == 0, done.stderr


def test_a_chunk_below_one_sample_of_the_model_is_refused_before_any_work(tmp_path):
    """--chunk-mb is in range, but the model's activations for one sample at the data's shape (the text detector at
    480x480) are more: exit 2 saying how much it needs, nothing written."""
    import numpy as np

    from compiler.data.footprint import ARENA_SLACK, MIB, activation_bytes

    model = Path(__file__).resolve().parents[1] / "fixtures" / "text_detector.onnx"
    data = tmp_path / "images.npz"
    np.savez(data, image=np.random.default_rng(0).random((4, 3, 480, 480), dtype=np.float32))
    needed = -(-2 * ARENA_SLACK * activation_bytes(model, {"image": (1, 3, 480, 480)}) // MIB)  # FP32 + int8
    out = tmp_path / "out"
    done = run_cli("calibrate", str(model), "--data", str(data), "--out", str(out), "--chunk-mb", "1")
    line = assert_clean_error(
        done, 2, "--chunk-mb 1", "text_detector.onnx", "held-out", f"give --chunk-mb {needed} or more"
    )
    assert "onnxruntime" not in line
    assert not out.exists()
