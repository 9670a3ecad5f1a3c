"""Whether a low-precision engine gains anything (issue 41), from the built engine's kernels: the digits CNN in
int8 computes its convolutions and Gemm in INT8 (ok); its fp8 engine gains nothing on TensorRT-RTX, which computes
FP8 only for MatMul/Gemm (failed: "no FP8 gain", release it in int8 or fp16); --min-low-precision 0 allows it."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli
from tests.support.digits import run_build, run_calibrate


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("gain")
    for precision in ("int8", "fp8"):
        calibrated = run_calibrate(root / f"cal-{precision}", "--precision", precision)
        assert calibrated.exit_code == 0, calibrated.stderr
    args = ("--calibration", root / "cal-int8", "--calibration", root / "cal-fp8")
    built = run_build(root / "engines", ("rtx-4090",), ("int8", "fp8"), *args)
    assert built.exit_code == 0, built.stderr
    return root / "engines"


def _gain(report: dict, precision: str) -> dict:
    [engine] = [e for e in report["engines"] if e["precision"] == precision]
    return next(c for c in engine["checks"] if c["name"] == "precision-gain")


def test_int8_gains_and_fp8_of_a_cnn_does_not(engines):
    checked = run_cli("check", engines, "--json")
    assert checked.exit_code == 1
    report = json.loads(checked.stdout)
    int8 = _gain(report, "int8")
    assert int8["status"] == "ok" and int8["figures"]["share"] == 1.0
    fp8 = _gain(report, "fp8")
    assert fp8["status"] == "failed" and fp8["figures"]["convolutions_in_fp16"] == 2
    assert "no FP8 gain: its 2 convolution(s) run in FP16" in fp8["summary"]
    assert "release this target in int8 or fp16" in fp8["summary"]
    allowed = json.loads(run_cli("check", engines, "--json", "--min-low-precision", "0").stdout)
    assert _gain(allowed, "fp8")["status"] == "ok"
