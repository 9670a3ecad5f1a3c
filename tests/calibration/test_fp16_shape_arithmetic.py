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
    """Fault injection: the round-trip remover of before, which took the integer Cast for an FP32 round trip, and
    no shape arithmetic kept in FP32."""
    monkeypatch.setattr(convert, "_float32_tensors", lambda graph: {t for n in graph.node for t in n.input})
    monkeypatch.setattr(convert, "shape_arithmetic", lambda graph: set())
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


def _float_shape_model() -> onnx.ModelProto:
    """y = Reshape(Relu(x), [-1, n]) * 2 where n = Cast(Cast(Shape(x)[1], FLOAT) * 1.0, INT64): a size computed in
    float, as exporters write ``int(x.shape[1] * scale)``."""
    h, array = onnx.helper, onnx.numpy_helper.from_array
    nodes = [
        h.make_node("Shape", ["x"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "one"], ["length"], name="length", axis=0),
        h.make_node("Cast", ["length"], ["length_f"], name="to_float", to=onnx.TensorProto.FLOAT),
        h.make_node("Mul", ["length_f", "unit"], ["scaled"], name="scale"),
        h.make_node("Cast", ["scaled"], ["size"], name="to_int", to=onnx.TensorProto.INT64),
        h.make_node("Concat", ["minus_one", "size"], ["target"], name="target", axis=0),
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
        h.make_node("Mul", ["flat", "two"], ["y"], name="double"),
    ]
    constants = [
        array(np.array([1], np.int64), "one"),
        array(np.array(1.0, np.float32), "unit"),
        array(np.array([-1], np.int64), "minus_one"),
        array(np.array(2.0, np.float32), "two"),
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "float_shape",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", "L"])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", "M"])],
        constants,
    )
    made = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    made.ir_version = 8
    return made


def test_a_size_computed_in_float_stays_fp32_and_the_converted_model_reshapes_as_fp32_does(tmp_path):
    """2049 is not an FP16 number (it becomes 2048): converted whole, the Reshape to [-1, 2048] of 2 x 2049 values
    failed in onnxruntime. The nodes computing a shape input stay FP32; the data path is FP16."""
    onnx.save(_float_shape_model(), tmp_path / "model.onnx")
    convert.convert_fp16(tmp_path / "model.onnx", tmp_path / "fp16.onnx")
    converted = onnx.load(tmp_path / "fp16.onnx")
    assert convert.shape_arithmetic(converted.graph) >= {"to_float", "scale", "to_int"}
    [double] = [n for n in converted.graph.node if n.name == "double"]
    two = next(t for t in converted.graph.initializer if t.name == double.input[1])
    assert two.data_type == onnx.TensorProto.FLOAT16  # the data path is converted
    x = np.random.default_rng(0).standard_normal((2, 2049)).astype(np.float32)
    ours = onnxruntime.InferenceSession(str(tmp_path / "fp16.onnx")).run(None, {"x": x})[0]
    fp32 = onnxruntime.InferenceSession(str(tmp_path / "model.onnx")).run(None, {"x": x})[0]
    assert ours.shape == fp32.shape == (2, 2049)
    assert np.allclose(ours, fp32, rtol=1e-3, atol=1e-3)
