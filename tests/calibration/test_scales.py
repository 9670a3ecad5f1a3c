"""Quantization that survives real weights (issue 40): all-zero and denormal weight channels get a normal scale in
int8 and fp8 (TensorRT uses the model's scales as given; fp8 wrote NaN weights for them), and both calibrate and
build; what the quantizer cannot take is named all at once; a crash inside the quantizer is our internal error with
its cause, never shown as a refusal of the user's model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from calibration import calibrators
from compiler.core.errors import CheckFailed
from tests.support.cli import REPO, run_cli

MODEL = REPO / "tests" / "fixtures" / "zero_channels.onnx"
PROFILES = REPO / "tests" / "fixtures" / "zero_channels_profiles.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("zero-channels") / "data.npz"
    np.savez(path, x=np.random.default_rng(1).standard_normal((64, 1, 8, 8)).astype(np.float32))
    return path


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_zero_and_denormal_channels_calibrate_and_build(data, tmp_path, precision):
    calibrated = run_cli("calibrate", MODEL, "--data", data, "--precision", precision, "--out", tmp_path / "cal")
    assert calibrated.exit_code == 0, calibrated.stderr
    model = onnx.load(tmp_path / "cal" / "model.onnx")
    for initializer in model.graph.initializer:
        values = numpy_helper.to_array(initializer).astype(np.float32)
        assert not np.isnan(values).any(), initializer.name
        if initializer.name.endswith("_scale"):
            assert values.min() >= np.finfo(np.float32).tiny, (initializer.name, values.min())
    built = run_cli("build", MODEL, "--profiles", PROFILES, "--sku", "rtx-4090", "--precision", precision,
                    "--calibration", tmp_path / "cal", "--out", tmp_path / "build")  # fmt: skip
    assert built.exit_code == 0, built.stderr


def test_every_tensor_without_a_finite_range_is_named_at_once(tmp_path):
    found = {"c": (0.0, float("inf")), "f": (float("-inf"), 1.0), "x": (-1.0, 1.0)}
    with pytest.raises(CheckFailed) as refused:
        calibrators._refuse_nonfinite(MODEL, found, "int8")
    message = str(refused.value)
    assert message.startswith("2 tensor(s) have a calibrated range that is not finite")
    assert "tensor c [0, inf], read by relu (Relu)" in message and "tensor f [-inf, 1], read by gemm (Gemm)" in message
    assert message.endswith("--exclude gemm --exclude relu")


def test_a_crash_inside_the_quantizer_is_ours_and_keeps_its_cause(data, tmp_path, monkeypatch):
    import onnxruntime.quantization

    def crash(*args, **kwargs):
        raise ValueError("The truth value of an array with more than one element is ambiguous.")

    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    monkeypatch.setattr(onnxruntime.quantization, "quantize_static", crash)
    bounds = {"lowest": np.array(-1.0, np.float32), "highest": np.array(1.0, np.float32)}
    tensors = TensorsData(CalibrationMethod.MinMax, {"x": TensorData(**bounds)})
    with pytest.raises(ValueError, match="truth value"):  # not CheckFailed: main reports it as an internal error
        calibrators.quantize(MODEL, tensors, "int8", "minmax", tmp_path / "q.onnx", tmp_path, frozenset())

    def refusal(*args, **kwargs):
        raise RuntimeError("Initializer 'conv_w_quantized' has nan.")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_static", refusal)
    with pytest.raises(CheckFailed, match="conv_w_quantized"):
        calibrators.quantize(MODEL, tensors, "int8", "minmax", tmp_path / "q.onnx", tmp_path, frozenset())
