"""Every precision on a transformer: the BERT-like encoder of tests/fixtures/make_encoder.py calibrated with real
onnxruntime and built with real TensorRT-RTX (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.fixtures.make_encoder import MODEL, PROFILES, build, make_data
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import build_args, repeated, run_build, run_calibrate


@pytest.fixture(scope="module")
def encoder_data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("encoder-data") / "encoder.npz")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, encoder_data):
    """Calibrations of the encoder, made once per (precision, method) and shared by the tests."""
    made: dict[tuple[str, str], tuple[Path, dict]] = {}

    def get(precision: str, method: str = "minmax", *extra: str) -> tuple[Path, dict]:
        key = (precision, method, *extra)
        if key not in made:
            out = tmp_path_factory.mktemp(f"encoder-{precision}-{method}")
            result = run_calibrate(
                out, "--precision", precision, "--method", method, *extra, "--json", model=MODEL, data=encoder_data
            )
            assert result.exit_code == 0, result.stderr
            made[key] = (out, json.loads(result.stdout))
        return made[key]

    return get


def _outputs(document: dict) -> dict[str, dict]:
    return {o["name"]: o for o in document["report"]["outputs"]}


def _build(model: Path, calibration: Path | None, precision: str, out: Path) -> list[dict]:
    args = build_args(out, ("rtx-4090",), (precision,), model=model, profiles=PROFILES)
    if calibration is not None:
        args += ["--calibration", calibration]
    result = run_cli(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads((out / "rtx-4090" / precision / "layers.json").read_text())["layers"]


def test_fixture_is_the_committed_model_and_shaped_like_a_hugging_face_export():
    assert build().SerializeToString() == MODEL.read_bytes()  # seeded weights: the script writes this very file
    proto = onnx.load_model(MODEL)
    for value in proto.graph.input:
        assert value.type.tensor_type.elem_type == TensorProto.INT64
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]
    ops = {node.op_type for node in proto.graph.node}
    assert {"Gather", "LayerNormalization", "MatMul", "Softmax", "Erf", "Range"} <= ops
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    assert float(constants["mask_min"]) == float(np.finfo(np.float32).min)
    assert constants["embeddings.position"].shape == (128, 64)


def test_fixture_data_has_padded_masks(encoder_data):
    with np.load(encoder_data) as data:
        assert set(data.files) == {"input_ids", "attention_mask"}
        mask, ids = data["attention_mask"], data["input_ids"]
    assert mask.dtype == ids.dtype == np.int64 and mask.shape == ids.shape
    lengths = mask.sum(axis=1)
    assert lengths.min() == 4 and lengths.max() == mask.shape[1]
    assert (ids[mask == 0] == 0).all()


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_int8_quantizes_only_what_tensorrt_runs_in_int8_and_is_accurate(calibrated, method):
    out, document = calibrated("int8", method)
    proto = onnx.load_model(out / "model.onnx")
    dequantized = {o for node in proto.graph.node if node.op_type == "DequantizeLinear" for o in node.output}
    consumers = {node.op_type for node in proto.graph.node if dequantized & set(node.input)}
    assert consumers == {"MatMul", "Gemm"}, consumers  # no Q/DQ on Add, Mul, LayerNorm, Gather, Softmax...
    # 2 layers x 6 MatMuls (Q, K, V, output, FFN up and down) + 2 attention MatMuls each, the pooler, the classifier
    assert document["quantized_nodes"] == 18
    assert document["quantized_ops"] == {"Gemm": 2, "MatMul": 16}
    assert document["report"]["quantized_nodes"] == 18
    written = json.loads((out / "calibration.json").read_text())
    assert written["quantized_nodes"] == 18
    assert json.loads((out / "report.json").read_text())["quantized_nodes"] == 18
    # statistics only around the quantized ops: never the -3.4e38 mask bias (entropy's "Too many bins")
    assert not {"mask/bias", "mask/unsqueeze", "layer.0/attention/mask"} & set(document["ranges"])
    assert len(document["ranges"]) <= 3 * 18
    outputs = _outputs(document)
    assert outputs["hidden"]["cosine_mean"] >= 0.99, outputs
    assert outputs["logits"]["cosine_mean"] >= 0.97, outputs


def test_int8_encoder_builds_with_int8_matmuls(calibrated, tmp_path):
    out, _ = calibrated("int8", "minmax")
    layers = _build(MODEL, out, "int8", tmp_path / "engines")
    int8_matmuls = [
        layer
        for layer in layers
        if layer["input_types"] == ["Int8"]
        and "Int8" in layer["constant_types"]
        and any("MatMul" in node or "Gemm" in node for node in layer["onnx_nodes"])
    ]
    assert len(int8_matmuls) >= 8, layers


def test_a_model_with_nothing_tensorrt_quantizes_is_refused(tmp_path):
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "bias"], ["y"], name="add"),
            helper.make_node("Relu", ["y"], ["z"], name="relu"),
        ],
        "adds",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 8])],
        [onnx.numpy_helper.from_array(np.ones(8, np.float32), "bias")],
    )
    model = tmp_path / "adds.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    data = tmp_path / "adds.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32))
    for precision in ("int8", "fp8"):
        result = run_calibrate(tmp_path / precision, "--precision", precision, model=model, data=data)
        assert_clean_error(result, 1, "quantized no node", str(model), "--precision fp16")
        assert not (tmp_path / precision / "calibration.json").exists()


def test_fp8_encoder_calibrates_at_opset_19_and_builds_fp8_matmuls_for_sm89(calibrated, tmp_path):
    out, document = calibrated("fp8", "minmax")
    proto = onnx.load_model(out / "model.onnx")
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 19
    assert {i.data_type for i in proto.graph.initializer} >= {TensorProto.FLOAT8E4M3FN}
    assert document["quantized_nodes"] == 18 and document["report"]["quantized_nodes"] == 18
    outputs = _outputs(document)
    assert outputs["hidden"]["cosine_mean"] >= 0.99, outputs
    assert outputs["logits"]["cosine_mean"] >= 0.9, outputs
    layers = _build(MODEL, out, "fp8", tmp_path / "engines")
    fp8_matmuls = [
        layer
        for layer in layers
        if "FP8" in layer["input_types"] and any("MatMul" in node or "Gemm" in node for node in layer["onnx_nodes"])
    ]
    assert len(fp8_matmuls) >= 8, layers


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_a_tensor_without_a_finite_range_is_named(tmp_path, precision):
    """x * 1e30 * 1e30 overflows float32 before the MatMul: no scale exists. Exit 1 naming the tensor, not 2."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "big"], ["a"], name="scale1"),
            helper.make_node("Mul", ["a", "big"], ["b"], name="scale2"),
            helper.make_node("MatMul", ["b", "w"], ["y"], name="matmul"),
        ],
        "inf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [
            onnx.numpy_helper.from_array(np.array(1e30, np.float32), "big"),
            onnx.numpy_helper.from_array(np.ones((8, 4), np.float32), "w"),
        ],
    )
    model = tmp_path / "inf.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    data = tmp_path / "inf.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32))
    result = run_calibrate(tmp_path / "out", "--precision", precision, model=model, data=data)
    assert_clean_error(result, 1, "tensor b", "not finite", "--exclude")


def _fp16_range(document: dict) -> dict:
    return document["report"]["fp16_range"]


def test_fp16_judges_the_hugging_face_mask_as_converted(calibrated):
    out, document = calibrated("fp16", "minmax")  # exit 0: the fp16-range gate passes
    assert [g["name"] for g in document["gates"] if not g["passed"]] == []
    figures = _fp16_range(document)
    assert figures["overflow"] == {} and figures["keep_fp32"] == []
    assert set(figures["saturated_into_softmax"]) == {"layer.0/attention/mask", "layer.1/attention/mask"}
    assert figures["clamped_constants"] == {"mask_min": pytest.approx(3.4028234663852886e38)}
    # what it was judged at is what the converter wrote: the mask constant clamped to FP16's lowest, not -inf
    proto = onnx.load_model(out / "model.onnx")
    mask_min = next(i for i in proto.graph.initializer if i.name == "mask_min")
    assert mask_min.data_type == TensorProto.FLOAT16
    assert float(onnx.numpy_helper.to_array(mask_min)) == -65504.0
    outputs = _outputs(document)
    assert outputs["logits"]["cosine_mean"] >= 0.999 and outputs["hidden"]["cosine_mean"] >= 0.999, outputs


def test_check_of_the_fp16_encoder_engine_passes_the_range_check(tmp_path, encoder_data):
    _build(MODEL, None, "fp16", tmp_path / "engines")
    result = run_cli("check", tmp_path / "engines", "--data", encoder_data, "--json")
    document = json.loads(result.stdout)
    (engine,) = document["engines"]
    checks = {c["name"]: c for c in engine["checks"]}
    assert checks["fp16-range"]["status"] == "ok", checks["fp16-range"]
    assert "saturate" in checks["fp16-range"]["summary"]
    assert result.exit_code == 0, result.stderr


def _overflowing_model(folder: Path) -> tuple[Path, Path, Path]:
    """MatMul, then x*900, *900 and *1e-6 into a Softmax: real-valued activations beyond 65504 mid-graph (positive
    and negative), which a GPU computes as inf in FP16 whatever follows."""
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
            helper.make_node("Mul", ["h", "k900"], ["a"], name="scale_up_1"),
            helper.make_node("Mul", ["a", "k900"], ["b"], name="scale_up_2"),
            helper.make_node("Mul", ["b", "k1e-6"], ["c"], name="scale_down"),
            helper.make_node("Softmax", ["c"], ["y"], name="softmax", axis=-1),
        ],
        "overflow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [
            onnx.numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(np.array(900, np.float32), "k900"),
            onnx.numpy_helper.from_array(np.array(1e-6, np.float32), "k1e-6"),
        ],
    )
    model, data, profiles = folder / "overflow.onnx", folder / "overflow.npz", folder / "profiles.yaml"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    np.savez(data, x=rng.standard_normal((40, 16)).astype(np.float32))
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [1, 16], opt: [4, 16], max: [8, 16]}\n")
    return model, data, profiles


def test_a_genuine_mid_graph_overflow_still_fails_naming_its_node(tmp_path):
    model, data, profiles = _overflowing_model(tmp_path)
    result = run_calibrate(tmp_path / "fp16", "--precision", "fp16", model=model, data=data)
    assert_clean_error(result, 1, "fp16-range")
    report = json.loads((tmp_path / "fp16" / "report.json").read_text())["fp16_range"]
    assert "scale_up_2" in report["keep_fp32"] and report["saturated_into_softmax"] == {}
    assert any("--exclude scale_up_2" in e for e in report["evidence"]), report["evidence"]
    result = run_build(tmp_path / "engines", model=model, profiles=profiles)
    assert result.exit_code == 0, result.stderr
    result = run_cli("check", tmp_path / "engines", "--data", data, "--json")
    assert result.exit_code == 1
    (engine,) = json.loads(result.stdout)["engines"]
    fp16_range = next(c for c in engine["checks"] if c["name"] == "fp16-range")
    assert fp16_range["status"] == "failed" and "scale_up_2" in fp16_range["summary"]
    assert "--exclude scale_up_2" in fp16_range["summary"]


def test_exclude_keeps_nodes_and_op_types_out_of_int8(calibrated):
    query = "layer.0/attention/query/MatMul"
    out, document = calibrated("int8", "minmax", "--exclude", query, "--exclude", "Gemm")
    assert document["quantized_nodes"] == 15 and document["quantized_ops"] == {"MatMul": 15}
    # the pooler's MatMul + Add is a Gemm once onnxruntime's pre-processing has fused them
    assert set(document["excluded"]) == {query, "pooler/dense/MatMul/MatMulAddFusion", "classifier/Gemm"}
    assert document["options"]["exclude"] == sorted([query, "Gemm"])
    proto = onnx.load_model(out / "model.onnx")
    dequantized = {o for node in proto.graph.node if node.op_type == "DequantizeLinear" for o in node.output}
    for node in proto.graph.node:
        if node.name in document["excluded"]:
            assert not dequantized & set(node.input), node  # reads the float tensor, its weight unquantized
    assert _outputs(document)["hidden"]["cosine_mean"] >= 0.99


def test_exclude_keeps_a_chain_in_fp32_for_fp16(tmp_path):
    model, data, _ = _overflowing_model(tmp_path)
    # keeping the overflowing node alone is not enough: its reader converts the value to FP16 again
    result = run_calibrate(tmp_path / "one", "--precision", "fp16", "--exclude", "scale_up_2", model=model, data=data)
    assert_clean_error(result, 1, "fp16-range")
    excluded = repeated("--exclude", ("scale_up_2", "scale_down"))
    result = run_calibrate(tmp_path / "chain", "--precision", "fp16", *excluded, "--json", model=model, data=data)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["excluded"] == ["scale_down", "scale_up_2"]
    proto = onnx.load_model(tmp_path / "chain" / "model.onnx")
    nodes = {node.name: node for node in proto.graph.node}
    # no FP32 -> FP16 -> FP32 round trip between the two kept nodes
    assert nodes["scale_down"].input[0] == nodes["scale_up_2"].output[0]
    assert document["report"]["fp16_range"]["overflow"] == {}
    result = run_calibrate(
        tmp_path / "ops", "--precision", "fp16", "--exclude", "Mul", "--json", model=model, data=data
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["excluded"] == ["scale_down", "scale_up_1", "scale_up_2"]


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_exclude_of_an_unknown_node_or_op_is_invalid_input(tmp_path, encoder_data, precision):
    result = run_calibrate(
        tmp_path / "out",
        "--precision",
        precision,
        *repeated("--exclude", ("Softmax", "no/such/node")),
        model=MODEL,
        data=encoder_data,
    )
    assert_clean_error(result, 2, "--exclude no/such/node", str(MODEL), "op types")
    assert not (tmp_path / "out" / "calibration.json").exists()


def test_exclude_from_python_and_the_pipeline_section():
    from compiler.core.errors import InvalidInput
    from compiler.core.options import CalibrationOptions

    assert CalibrationOptions(exclude="Softmax").exclude == ("Softmax",)
    assert CalibrationOptions(exclude=["Softmax", "a/b"]).exclude == ("Softmax", "a/b")
    with pytest.raises(InvalidInput, match="--exclude"):
        CalibrationOptions(exclude=[""])


def test_exclude_in_the_pipeline_calibration_section(tmp_path, encoder_data):
    from compiler.pipeline.spec import load_pipeline

    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"release: {{name: encoder, version: 1.0.0}}\nmodel: {MODEL}\nprofiles: {PROFILES}\n"
        f"targets: {{rtx-4090: [int8]}}\ncalibration:\n  data: {encoder_data}\n"
        f"  exclude: [Gemm, layer.0/attention/query/MatMul]\n"
    )
    loaded = load_pipeline(pipeline)
    assert loaded.spec.calibration.exclude == ("Gemm", "layer.0/attention/query/MatMul")
