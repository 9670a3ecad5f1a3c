"""FP16 of a BatchNormalization whose constants FP16 cannot hold (issue 40): a real detector's running variance of
9.8e7 was clamped to 65504 and its output cosine fell to 0.19. The node is computed in FP32 and folded before the
conversion, into the Conv before it or into a Mul and an Add, so the FP16 model agrees with FP32 and builds."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compiler.data.batchnorm_folding import fold_unrepresentable_batchnorms
from compiler.data.ranges import clamp_constants
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
