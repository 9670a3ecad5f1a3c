"""FP16 of constants FP16 cannot hold (issue 40). A real detector's BatchNormalization running variance of 9.8e7
was clamped to 65504 and its output cosine fell to 0.19: the node is computed in FP32 and folded before the
conversion, into the Conv before it or into a Mul and an Add, so the FP16 model agrees with FP32 and builds. A
Constant that only nodes kept in FP32 read stays FP32, and the range check does not judge it clamped."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from calibration import convert
from compiler.data.batchnorm_folding import fold_unrepresentable_batchnorms
from compiler.data.ranges import clamp_constants, subnormal_constants
from tests.support.cli import REPO, run_cli

MODEL = REPO / "tests" / "fixtures" / "bn_variance.onnx"
X = np.random.default_rng(0).standard_normal((16, 3, 16, 16)).astype(np.float32)


def _run(model: onnx.ModelProto) -> np.ndarray:
    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": X})[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def test_folding_keeps_the_outputs_and_every_tensor_name_and_leaves_nothing_to_clamp():
    source = onnx.load(MODEL)
    clamped = _copy(source)
    assert set(clamp_constants(clamped)) == {"bn1_var", "bn2_var"}
    assert _cosine(_run(clamped), _run(source)) < 0.9  # what FP16 did to it before

    folded = _copy(source)
    assert fold_unrepresentable_batchnorms(folded) == ["bn1", "bn2"]
    assert [n.op_type for n in folded.graph.node] == [
        "Conv", "Identity", "Relu", "Mul", "Add", "GlobalAveragePool", "Flatten", "Gemm",
    ]  # fmt: skip
    assert np.allclose(_run(folded), _run(source), rtol=1e-4, atol=1e-4)
    produced = {name for node in folded.graph.node for name in node.output}
    assert {name for node in source.graph.node for name in node.output} <= produced
    assert clamp_constants(_copy(folded)) == {}
    assert not {"bn1_var", "bn2_var"} & {t.name for t in folded.graph.initializer}


def test_a_batchnorm_fp16_can_hold_and_a_conv_whose_weights_are_shared_are_left_alone():
    source = onnx.load(MODEL)
    moderate = _copy(source)
    for tensor in moderate.graph.initializer:
        if tensor.name.endswith(("_var", "_gamma")):
            tensor.CopyFrom(onnx.numpy_helper.from_array(np.ones(8, np.float32), tensor.name))
    before = _copy(moderate)
    assert fold_unrepresentable_batchnorms(moderate) == []
    assert moderate == before

    shared = _copy(source)  # conv1's weights read by a second Conv too: bn1 becomes a Mul and an Add instead
    shared.graph.node.append(onnx.helper.make_node("Conv", ["x", "conv1_w"], ["other"], name="conv_other"))
    shared.graph.output.append(onnx.helper.make_tensor_value_info("other", onnx.TensorProto.FLOAT, None))
    weights = onnx.numpy_helper.to_array(next(t for t in shared.graph.initializer if t.name == "conv1_w")).copy()
    assert fold_unrepresentable_batchnorms(shared) == ["bn1", "bn2"]
    after = onnx.numpy_helper.to_array(next(t for t in shared.graph.initializer if t.name == "conv1_w"))
    assert np.array_equal(after, weights)
    assert [n.op_type for n in shared.graph.node][:5] == ["Conv", "Mul", "Add", "Relu", "Mul"]
    assert np.allclose(_run(shared), _run(source), rtol=1e-4, atol=1e-4)


def test_fp16_calibration_passes_its_gates_and_the_engine_builds(tmp_path):
    """Before the folding: cosine 0.709, top-1 0 %, every accuracy gate failed on the same data."""
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((64, 3, 16, 16)).astype(np.float32))
    done = run_cli("calibrate", MODEL, "--data", data, "--precision", "fp16", "--out", tmp_path / "cal")
    assert done.exit_code == 0, done.stderr
    report = json.loads((tmp_path / "cal" / "report.json").read_text())
    assert report["fp16_range"]["folded_batchnorms"] == ["bn1", "bn2"]
    assert report["fp16_range"]["clamped_constants"] == {}
    [logits] = report["outputs"]
    assert logits["cosine_mean"] > 0.999 and logits["top1_agreement"] == 1.0
    profiles = tmp_path / "p.yaml"
    shapes = "x: {min: [1, 3, 16, 16], opt: [4, 3, 16, 16], max: [8, 3, 16, 16]}"
    profiles.write_text(f"profiles:\n  - name: p\n    shapes:\n      {shapes}\n")
    built = run_cli("build", MODEL, "--profiles", profiles, "--sku", "rtx-4090", "--precision", "fp16",
                    "--calibration", tmp_path / "cal", "--out", tmp_path / "engines")  # fmt: skip
    assert built.exit_code == 0, built.stderr
    assert (tmp_path / "engines" / "rtx-4090" / "fp16" / "engine.plan").stat().st_size > 0


HOSTILE_VALUES = st.sampled_from([np.nan, np.inf, -np.inf, -1e9, -1.0, 0.0, 1e-45, 1e9, 3.4e38])


@example(parameter="var", values=[1e9] * 8, epsilon=1e-5)  # folded into conv1
@example(parameter="gamma", values=[3.4e38] * 8, epsilon=1e-5)  # folded, and infinite in FP32 as in the source
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parameter=st.sampled_from(["gamma", "beta", "mean", "var"]),
    values=st.one_of(st.lists(HOSTILE_VALUES, min_size=8, max_size=8), st.lists(HOSTILE_VALUES, max_size=9)),
    epsilon=st.sampled_from([1e-5, 0.0, -1.0]),
)
def test_hostile_batchnorm_constants_are_folded_exactly_or_left_alone(parameter, values, epsilon):
    """NaN, infinities, negative or zero variances, a negative epsilon and a constant of another length: folding
    never raises, and a BatchNormalization it folds computes what the source computes."""
    source = onnx.load(MODEL)
    tensor = next(t for t in source.graph.initializer if t.name == f"bn1_{parameter}")
    tensor.CopyFrom(onnx.numpy_helper.from_array(np.array(values, np.float32), tensor.name))
    bn1 = next(n for n in source.graph.node if n.name == "bn1")
    del bn1.attribute[:]
    bn1.attribute.append(onnx.helper.make_attribute("epsilon", epsilon))
    folded = _copy(source)
    names = fold_unrepresentable_batchnorms(folded)
    if "bn1" not in names:
        assert next(n for n in folded.graph.node if n.name == "bn1").op_type == "BatchNormalization"
        return
    with np.errstate(all="ignore"):
        expected, ours = _run(source), _run(folded)
    assert np.array_equal(np.isfinite(ours), np.isfinite(expected))
    assert np.allclose(ours, expected, rtol=1e-3, atol=1e-3, equal_nan=True)


def _constant_scaled_model(factor: float) -> onnx.ModelProto:
    """y = Relu(x * [factor, 1, 1, 1] * [1 / factor, 1, 1, 1]) with both factors Constant nodes."""
    h, array = onnx.helper, onnx.numpy_helper.from_array
    nodes = [
        h.make_node("Constant", [], ["up"], value=array(np.array([factor, 1, 1, 1], np.float32))),
        h.make_node("Constant", [], ["down"], value=array(np.array([1 / factor, 1, 1, 1], np.float32))),
        h.make_node("Mul", ["x", "up"], ["big"], name="scale_up"),
        h.make_node("Mul", ["big", "down"], ["back"], name="scale_down"),
        h.make_node("Relu", ["back"], ["y"], name="relu"),
    ]
    graph = h.make_graph(
        nodes,
        "constant_scaled",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", 4])],
    )
    made = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    made.ir_version = 8
    return made


@pytest.mark.parametrize("keep", [["--exclude", "scale_up", "--exclude", "scale_down"], ["--fallback", "auto"]])
def test_a_constant_read_only_by_nodes_kept_in_fp32_stays_fp32_and_is_not_judged_clamped(tmp_path, keep):
    """``x * 1e6`` overflows FP16, so the range check names both Muls to keep in FP32, and the 1e6 must then stay
    FP32 too. Before: --exclude of both Muls still clamped it to 65504 (cosine 0.963, SQNR 5.3 dB, failed) and the
    report said it was judged clamped."""
    onnx.save(_constant_scaled_model(1e6), tmp_path / "scaled.onnx")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32))
    plain = run_cli("calibrate", tmp_path / "scaled.onnx", "--data", data, "--precision", "fp16", "--out",
                    tmp_path / "plain")  # fmt: skip
    assert plain.exit_code == 1, plain.stderr
    ranges = json.loads((tmp_path / "plain" / "report.json").read_text())["fp16_range"]
    assert ranges["keep_fp32"] == ["scale_down", "scale_up"] and set(ranges["clamped_constants"]) == {"up"}
    done = run_cli("calibrate", tmp_path / "scaled.onnx", "--data", data, "--precision", "fp16", "--out",
                   tmp_path / "kept", *keep)  # fmt: skip
    assert done.exit_code == 0, done.stderr
    report = json.loads((tmp_path / "kept" / "report.json").read_text())
    assert report["fp16_range"]["clamped_constants"] == {} and report["fp16_range"]["overflow"] == {}
    [y] = report["outputs"]
    assert y["cosine_mean"] > 0.9999
    converted = onnx.load(tmp_path / "kept" / "model.onnx")
    [up] = [n for n in converted.graph.node if n.op_type == "Constant" and n.output[0].startswith("up")]
    assert onnx.numpy_helper.to_array(up.attribute[0].t).dtype == np.float32


def test_a_clamped_constant_that_moves_the_output_fails_the_range_gate_and_fallback_auto_keeps_its_reader(tmp_path):
    """``x * 1e5`` with |x| < 0.5 overflows nothing, but 1e5 is written as 65504: the outputs move (cosine 0.997).
    The FP16 range gate fails on its own, naming the constant and its reader, in calibrate and in check of an
    engine built without a calibration; --fallback auto keeps that reader (and so the constant) in FP32, and check
    of the engine built from that calibration passes the gate."""
    model = tmp_path / "scaled.onnx"
    onnx.save(_constant_scaled_model(1e5), model)
    data = tmp_path / "data.npz"
    np.savez(data, x=(0.1 * np.random.default_rng(0).standard_normal((64, 4))).astype(np.float32))
    args = ("calibrate", model, "--data", data, "--precision", "fp16", "--out")
    plain = run_cli(*args, tmp_path / "plain")
    assert plain.exit_code == 1, plain.stderr
    assert "up (a constant FP16 clamps, which moves the outputs)" in plain.stderr
    ranges = json.loads((tmp_path / "plain" / "report.json").read_text())["fp16_range"]
    assert ranges["overflow"] == {} and ranges["clamped_readers"] == {"up": ["scale_up"]}
    assert ranges["keep_fp32"] == []  # nothing overflows; the clamped constant's reader is named on its own
    assert any("constant up" in line and "--exclude scale_up" in line for line in ranges["evidence"])
    assert ranges["moved_by_clamping"] and "output y" in ranges["moved_by_clamping"][0]
    done = run_cli(*args, tmp_path / "auto", "--fallback", "auto")
    assert done.exit_code == 0, done.stderr
    record = json.loads((tmp_path / "auto" / "calibration.json").read_text())
    assert record["exclusions"] == [{"node": "scale_up", "reason": "found", "why": "reads a constant FP16 clamps"}]
    [y] = json.loads((tmp_path / "auto" / "report.json").read_text())["outputs"]
    assert y["cosine_mean"] > 0.9999
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [1, 4], opt: [4, 4], max: [8, 4]}\n")
    for name, calibration, code in [("bare", (), 1), ("kept", ("--calibration", tmp_path / "auto"), 0)]:
        built = run_cli("build", model, "--sku", "rtx-4090", "--precision", "fp16", "--out", tmp_path / name,
                        "--profiles", profiles, *calibration)  # fmt: skip
        assert built.exit_code == 0, built.stderr
        checked = run_cli("check", tmp_path / name, "--data", data, "--no-lint", "--json")
        assert checked.exit_code == code, checked.stderr
        [engine] = json.loads(checked.stdout)["engines"]
        [gate] = [c for c in engine["checks"] if c["name"] == "fp16-range"]
        assert gate["status"] == ("failed" if code else "ok"), gate
        if code:
            assert "clamping constant(s) up (|x| 100000) to 65504 moves the outputs" in gate["summary"]
            assert "--exclude scale_up" in gate["summary"]


def test_weights_a_fold_shrinks_below_fp16s_normal_range_are_reported(tmp_path):
    """With gamma 1 on the channels of variance 9.8e7, folding scales conv1's weights for them by ~1e-4: half its
    weights land below 6.1e-5, where FP16 keeps fewer bits. Reported (not gated: the gates judge the outputs)."""
    source = onnx.load(MODEL)
    gamma = next(t for t in source.graph.initializer if t.name == "bn1_gamma")
    values = onnx.numpy_helper.to_array(gamma).copy()
    values[:4] = 1.0
    gamma.CopyFrom(onnx.numpy_helper.from_array(values, gamma.name))
    assert subnormal_constants(_copy(source)) == {}  # ordinary weights: nothing to say
    onnx.save(source, tmp_path / "shrunk.onnx")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((64, 3, 16, 16)).astype(np.float32))
    done = run_cli("calibrate", tmp_path / "shrunk.onnx", "--data", data, "--precision", "fp16", "--out",
                   tmp_path / "c")  # fmt: skip
    ranges = json.loads((tmp_path / "c" / "report.json").read_text())["fp16_range"]
    assert done.exit_code in (0, 1), done.stderr
    [(name, (small, nonzero))] = ranges["subnormal_constants"].items()
    assert name == "conv1_w" and nonzero == 8 * 3 * 3 * 3 and small >= nonzero // 2 - 10
    assert any(line.startswith("subnormal: constant conv1_w:") for line in ranges["evidence"])


def test_an_already_quantized_model_converts_with_its_quantization_ops_in_fp32(tmp_path):
    """ddddocr's old recogniser is dynamically quantized: the converter made DynamicQuantizeLinear's input float16,
    which onnxruntime refuses, and each --exclude it suggested revealed the next such node."""
    h = onnx.helper
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("DynamicQuantizeLinear", ["r"], ["q", "scale", "zero"], name="quantize"),
        h.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"], name="dequantize"),
        h.make_node("Mul", ["dq", "two"], ["y"], name="double"),
    ]
    graph = h.make_graph(
        nodes,
        "dynamic_quantized",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", 4])],
        [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "quantized.onnx")
    convert.convert_fp16(tmp_path / "quantized.onnx", tmp_path / "fp16.onnx")
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    ours = onnxruntime.InferenceSession(str(tmp_path / "fp16.onnx")).run(None, {"x": x})[0]
    fp32 = onnxruntime.InferenceSession(str(tmp_path / "quantized.onnx")).run(None, {"x": x})[0]
    assert np.allclose(ours, fp32, rtol=1e-2, atol=2e-2)
