"""FP16 conversion of shape arithmetic (issue 40): a Cast from an integer that only a Range reads is not an FP32
round trip, so the converted model keeps Range's inputs of one type, onnxruntime loads it, and TensorRT-RTX builds
it (it refused a Range over int64); a conversion onnxruntime cannot load is refused naming the node, its op and
the --exclude that keeps it in FP32, never a temporary file."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

from calibration import convert
from compiler.core.errors import InvalidInput
from tests.support.cli import REPO, run_cli

HEAD = REPO / "tests" / "fixtures" / "yolo_head.onnx"
PROFILES = REPO / "tests" / "fixtures" / "yolo_head_profiles.yaml"


def test_the_converted_head_keeps_range_in_one_type_and_runs_as_fp32_does(tmp_path):
    out = tmp_path / "fp16.onnx"
    convert.convert_fp16(HEAD, out)
    model = onnx.load(out)
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    [range_node] = [n for n in model.graph.node if n.op_type == "Range"]
    assert {types.get(name, onnx.TensorProto.FLOAT) for name in range_node.input} == {onnx.TensorProto.FLOAT}
    x = np.random.default_rng(0).standard_normal((2, 8, 20)).astype(np.float32)
    ours = onnxruntime.InferenceSession(str(out)).run(None, {"x": x})[0]
    fp32 = onnxruntime.InferenceSession(str(HEAD)).run(None, {"x": x})[0]
    assert np.allclose(ours, fp32, rtol=2e-3, atol=2e-2)


def test_the_head_builds_in_fp16_with_and_without_a_calibration_folder(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((40, 8, 20)).astype(np.float32))
    calibrated = run_cli("calibrate", HEAD, "--data", tmp_path / "data.npz", "--precision", "fp16",
                         "--out", tmp_path / "cal")  # fmt: skip
    assert calibrated.exit_code == 0, calibrated.stderr
    for extra in ((), ("--calibration", tmp_path / "cal")):
        built = run_cli("build", HEAD, "--profiles", PROFILES, "--sku", "rtx-4090", "--precision", "fp16",
                        "--out", tmp_path / f"build{len(extra)}", *extra)  # fmt: skip
        assert built.exit_code == 0, built.stderr


def test_a_conversion_onnxruntime_cannot_load_names_the_node_and_the_exclude(tmp_path, monkeypatch):
    """Fault injection: the round-trip remover of before, which took the integer Cast for an FP32 round trip."""
    monkeypatch.setattr(convert, "_float32_tensors", lambda graph: {t for n in graph.node for t in n.input})
    with pytest.raises(InvalidInput) as refused:
        convert.convert_fp16(HEAD, tmp_path / "fp16.onnx")
    message = str(refused.value)
    assert message.startswith(f"{HEAD}: the FP16 conversion is not a model onnxruntime can load")
    assert "at node 'anchors_range' (Range)" in message and "--exclude anchors_range" in message
    assert list(tmp_path.iterdir()) == []  # nothing half made stays


def test_an_int8_calibration_of_the_head_is_one_error_line_without_onnxruntime_log_lines(tmp_path):
    """The head has nothing TensorRT quantizes; the quantizer's own sessions once logged "Removing initializer ...
    It is not used by any node" on stderr beside the error line."""
    np.savez(tmp_path / "data.npz", x=np.random.default_rng(0).standard_normal((40, 8, 20)).astype(np.float32))
    done = run_cli("calibrate", HEAD, "--data", tmp_path / "data.npz", "--precision", "int8", "--out", tmp_path / "c")
    assert done.exit_code == 1 and done.stderr.splitlines() == done.error_lines, done.stderr
    assert "quantized no node" in done.error_lines[0]
