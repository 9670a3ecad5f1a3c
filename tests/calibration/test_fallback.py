"""Sensitivity and ``--fallback auto`` (issue 30): an outlier channel fails plain INT8 naming the nodes around it;
the fallback keeps the fewest nodes in float, records them, and the result builds; an FP16 mid-graph overflow
passes with the overflowing nodes in FP32."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx

from calibration import calibrate
from calibration.fallback import TIE_DB, Search, fusion_groups
from calibration.sensitivity import Region
from compiler.core.options import CalibrationOptions
from tests.calibration.test_transformer import _overflowing_model
from tests.fixtures import make_outlier_mlp
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import repeated, run_build, run_calibrate


def test_plain_int8_fails_naming_the_nodes_around_the_outlier(outlier, tmp_path):
    model, data, _ = outlier
    result = run_calibrate(tmp_path / "cal", "--json", model=model, data=data)
    line = assert_clean_error(
        result, 1, "min-cosine", "most sensitive nodes: block3.matmul", "--exclude block3.matmul", "--fallback auto"
    )
    assert "report.json" in line
    report = json.loads((tmp_path / "cal" / "report.json").read_text())
    ranked = report["sensitivity"]
    assert ranked[0]["exclude"] == "block3.matmul" and ranked[0]["tensors"] == ["block2.out"]  # reads the outlier
    assert ranked[0]["sqnr_db"] < 3 < 25 < min(s["sqnr_db"] for s in ranked[1:])
    assert [s["rank"] for s in ranked] == list(range(1, len(ranked) + 1)) and len(ranked) == 7
    assert "Most sensitive quantized nodes" in run_calibrate(tmp_path / "cal", model=model, data=data).stdout


def test_fallback_auto_passes_keeping_most_matmuls_quantized_and_records_why(outlier, tmp_path):
    model, data, profiles = outlier
    result = run_calibrate(tmp_path / "cal", "--fallback", "auto", "--json", model=model, data=data)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["passed"] is True and document["report"]["outputs"][0]["cosine_mean"] > 0.99
    record = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    kept = ["block3.matmul/MatMulAddFusion", "block3.relu"]  # the Gemm with the activation fused into it
    assert record["excluded"] == kept
    why, fused = record["exclusions"]
    assert why["reason"] == "found" and why["tensor"] == "block2.out" and why["sqnr_db"] < 3
    assert fused == {**why, "node": "block3.relu", "why": "fused with block3.matmul/MatMulAddFusion"}
    fallback = record["fallback"]
    assert fallback["needed"] is True and fallback["passed"] is True and fallback["regions_kept"] == 1
    assert record["quantized_nodes"] == 6 and fallback["low_precision_work"] > 0.75  # 6 of 7 MatMul/Gemm in INT8
    assert fallback["evaluations"] <= 2 * math.ceil(math.log2(fallback["regions"])) + 4
    # the cost read from the proof's real engine, whose batch is dynamic as a served engine's: the graph input's
    # quantize is a kernel of its own in both; keeping block3 in float adds none there (with a fixed batch of 1 it
    # left block3.out's quantize alone too)
    assert record["reformats"]["count"] == fallback["reformats"] >= fallback["plain_reformats"] >= 1
    ops = {n.name: n.op_type for n in onnx.load_model(tmp_path / "cal" / "model.onnx").graph.node}
    assert {ops[n] for layer in record["reformats"]["layers"] for n in layer.split(", ")} == {"QuantizeLinear"}
    assert (
        "precision-boundary reformat kernel(s) (plain int8: "
        in run_calibrate(tmp_path / "cal", "--fallback", "auto", model=model, data=data).stdout
    )
    _build_calibrated(tmp_path / "engines", "int8", tmp_path / "cal", model, profiles)
    layers = json.loads((tmp_path / "engines" / "rtx-4090" / "int8" / "layers.json").read_text())
    assert layers["kernel_precisions"].get("Int8", 0) >= 1
    engine = json.loads((tmp_path / "engines" / "rtx-4090" / "int8" / "engine.json").read_text())
    assert engine["excluded"] == kept
    (tmp_path / "store").mkdir()
    published = run_cli(
        "publish", tmp_path / "engines", "--name", "outlier", "--version", "1", "--store", tmp_path / "store"
    )
    assert published.exit_code == 0, published.stderr
    [manifest] = (tmp_path / "store").rglob("outlier/1/manifest.json")
    assert json.loads(manifest.read_text())["excluded"] == {"rtx-4090/int8": kept}


def test_the_final_calibration_reuses_the_first_ones_ranges_unchanged(outlier, tmp_path):
    """The fallback does not quantize, collect ranges or measure sensitivity again for its final calibration: its
    model, ranges and ranking are the ones a calibration with the same exclusions given makes itself."""
    model, data, _ = outlier
    found = run_calibrate(tmp_path / "found", "--fallback", "auto", model=model, data=data)
    assert found.exit_code == 0, found.stderr
    record = json.loads((tmp_path / "found" / "calibration.json").read_text())
    assert record["excluded"] == ["block3.matmul/MatMulAddFusion", "block3.relu"]
    excluded = repeated("--exclude", ("block3.matmul", "block3.relu"))
    given = run_calibrate(tmp_path / "given", "--min-top1", "0", "--json", *excluded, model=model, data=data)
    assert given.exit_code == 0, given.stderr
    assert json.loads(given.stdout)["ranges"] == record["ranges"] and "block2.out" not in record["ranges"]
    report = json.loads((tmp_path / "found" / "report.json").read_text())
    assert json.loads(given.stdout)["report"]["outputs"] == report["outputs"]
    assert json.loads(given.stdout)["report"]["sensitivity"] == report["sensitivity"]  # the first's, ranked again
    assert len(report["sensitivity"]) == 6 and [s["rank"] for s in report["sensitivity"]] == list(range(1, 7))
    made = {name: onnx.load_model(tmp_path / name / "model.onnx").graph for name in ("found", "given")}
    assert sorted(n.op_type for n in made["found"].node) == sorted(n.op_type for n in made["given"].node)
    assert {i.name for i in made["found"].initializer} == {i.name for i in made["given"].initializer}
    assert record["reformats"] == json.loads(given.stdout)["reformats"]


def test_fallback_finds_two_outlier_regions(tmp_path):
    model, data = make_outlier_mlp.save(tmp_path / "two.onnx", layers=8, outliers=(1, 5))
    result = run_calibrate(tmp_path / "cal", "--fallback", "auto", "--json", model=model, data=data)
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    found = {e["node"] for e in record["exclusions"]}
    assert {"block2.matmul/MatMulAddFusion", "block6.matmul/MatMulAddFusion"} <= found, found
    assert record["fallback"]["evaluations"] <= 2 * math.ceil(math.log2(record["fallback"]["regions"])) + 4
    assert record["quantized_nodes"] >= 6


def _build_calibrated(out, precision: str, calibration, model, profiles) -> None:
    """The rtx-4090 engine of a calibration folder, which must build."""
    built = run_build(out, ("rtx-4090",), (precision,), "--calibration", calibration, model=model, profiles=profiles)
    assert built.exit_code == 0, built.stderr


def test_given_exclusions_are_recorded_as_given(outlier, tmp_path):
    model, data, _ = outlier
    result = run_calibrate(
        tmp_path / "cal", "--exclude", "block3.matmul", "--min-top1", "0.5", "--json", model=model, data=data
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["exclusions"] == [{"node": "block3.matmul/MatMulAddFusion", "reason": "given"}]


def test_fp16_mid_graph_overflow_passes_with_fallback_auto(tmp_path):
    model, data, profiles = _overflowing_model(tmp_path)
    result = run_calibrate(
        tmp_path / "fp16", "--precision", "fp16", "--fallback", "auto", "--json", model=model, data=data
    )
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "fp16" / "calibration.json").read_text())
    assert "scale_up_2" in record["excluded"] and record["fallback"]["passed"] is True
    assert all(e["reason"] == "found" and e["why"] == "overflows FP16" for e in record["exclusions"])
    assert json.loads(result.stdout)["report"]["fp16_range"]["overflow"] == {}
    # the engine is built from that conversion (its folder given), and check finds no overflow in it
    _build_calibrated(tmp_path / "engines", "fp16", tmp_path / "fp16", model, profiles)
    checked = run_cli("check", tmp_path / "engines", "--data", data, "--json")
    assert checked.exit_code == 0, checked.stderr
    [engine] = json.loads(checked.stdout)["engines"]
    assert {c["name"]: c["status"] for c in engine["checks"]}["fp16-range"] == "ok"


def test_bad_fallback_is_a_usage_error(outlier, tmp_path):
    model, data, _ = outlier
    assert_clean_error(
        run_calibrate(tmp_path / "c", "--fallback", "manual", model=model, data=data),
        2,
        "--fallback manual",
    )


def _graph(*nodes, outputs=("y",)):
    """A graph of ``(name, op, inputs, outputs)`` nodes, float tensors, ``w``/``b``/``s`` as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.ones(4, np.float32), name) for name in ("w", "b", "s")]
    return helper.make_graph(
        [helper.make_node(op, list(i), list(o), name) for name, op, i, o in nodes],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        weights,
    )


def test_fusion_groups_take_a_conv_with_its_epilogue_and_a_residual_add_with_both_branches():
    graph = _graph(
        ("conv", "Conv", ("x", "w"), ("c",)),
        ("bn", "BatchNormalization", ("c", "s", "b", "b", "s"), ("n",)),
        ("relu", "Relu", ("n",), ("r",)),
        ("conv2", "Conv", ("r", "w"), ("c2",)),
        ("proj", "Conv", ("x", "w"), ("p",)),
        ("add", "Add", ("c2", "p"), ("a",)),
        ("act", "Relu", ("a",), ("y",)),
    )
    assert fusion_groups(graph, {"bn"}) == {"conv", "bn", "relu"}  # from the middle of the chain: all of it
    assert fusion_groups(graph, {"conv"}) == {"conv", "bn", "relu"}  # not conv2: a quantized reader, not fused
    assert fusion_groups(graph, {"conv2"}) == {"conv2", "add", "proj", "act"}  # the residual Add's both inputs


def test_fusion_groups_stop_where_a_value_is_materialized_anyway():
    graph = _graph(
        ("mm", "MatMul", ("x", "w"), ("m",)),
        ("bias", "Add", ("m", "b"), ("y",)),
        ("gelu", "Relu", ("y",), ("g",)),
        ("other", "Relu", ("m",), ("o",)),
        outputs=("y", "g", "o"),
    )
    assert fusion_groups(graph, {"mm"}) == {"mm"}  # its value has two readers
    assert fusion_groups(graph, {"bias"}) == {"bias"}  # a graph output: the next Relu reads a written tensor
    assert fusion_groups(graph, {"missing"}) == set()


def test_of_two_tied_sets_that_pass_the_one_whose_engine_gets_fewer_reformats_is_kept(tmp_path):
    """Gates every set passes, and two regions of the digits CNN the ranking cannot tell apart: the float first Conv
    leaves the quantize of its output for the next Conv alone in a kernel; the float classifier Gemm leaves no
    boundary (read from both builds, whose batch is dynamic as a served engine's)."""
    from tests.support.digits import DIGITS_DATA, DIGITS_MODEL

    lenient = CalibrationOptions(precision="int8", min_cosine=-1, min_top1=0, min_sqnr=-200, reuse=False)
    first = calibrate(DIGITS_MODEL, DIGITS_DATA, tmp_path / "cal", lenient)
    search = Search(tmp_path / "cal" / "model.onnx", DIGITS_MODEL, DIGITS_DATA, first, lenient, None)
    try:
        middle = Region("image", ("/features/features.0/Conv",), 30.0)
        last = Region("/Flatten_output_0", ("/classifier/Gemm",), 30.0 + TIE_DB / 2)
        chosen, weighed = search.fewest_reformats([middle, last], 1)
        assert chosen == [last] and search.evaluations == 1  # the swapped set evaluated once
        assert [w["tensors"] for w in weighed] == [["image"], ["/Flatten_output_0"]]
        assert weighed[0]["reformats"] > weighed[1]["reformats"] >= 0
        assert search.fewest_reformats(
            [middle, Region("/Flatten_output_0", ("/classifier/Gemm",), 30.0 + 2 * TIE_DB)], 1
        ) == (
            [middle],
            [],
        )  # no tie: nothing weighed, nothing built
    finally:
        search.close()


def test_fp8_fallback_ranks_its_nodes(outlier, tmp_path):
    """FP8 Q/DQ needs opset 19: the sensitivity model takes the Q/DQ model's opset (it failed on the prepared
    model's 13, so an fp8 fallback had nothing to rank)."""
    model, data, _ = outlier
    result = run_calibrate(
        tmp_path / "cal", "--precision", "fp8", "--fallback", "auto", "--json", model=model, data=data
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "cal" / "report.json").read_text())
    assert (
        report["sensitivity_error"] is None
        and len(report["sensitivity"]) == json.loads(result.stdout)["quantized_nodes"] >= 1
    )


def test_fallback_auto_and_exclude_work_on_a_model_whose_nodes_have_no_names(outlier, tmp_path):
    """torch's old exporter names no node (CenterFace in the field zoo): the sensitivity model once failed with
    duplicate node names, then --fallback auto "kept" nodes the quantizer could not exclude by name and reported
    that even all regions in float failed. A node without a name is named by its first output, everywhere."""
    model, data, _ = outlier
    proto = onnx.load(model)
    for node in proto.graph.node:
        node.name = ""
    onnx.save(proto, tmp_path / "unnamed.onnx")
    outputs = {node.output[0] for node in proto.graph.node}
    result = run_calibrate(
        tmp_path / "auto", "--fallback", "auto", "--json", model=tmp_path / "unnamed.onnx", data=data
    )
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "auto" / "calibration.json").read_text())
    assert record["fallback"]["passed"] is True and record["quantized_nodes"] >= 5
    assert all(e["node"].split("/")[0] in outputs for e in record["exclusions"]), record["exclusions"]
    given = record["exclusions"][0]["node"].split("/")[0]
    excluded = run_calibrate(
        tmp_path / "given", "--exclude", given, "--json", model=tmp_path / "unnamed.onnx", data=data
    )
    assert excluded.exit_code in (0, 1), excluded.stderr
    [kept] = json.loads((tmp_path / "given" / "calibration.json").read_text())["exclusions"]
    assert kept["node"].split("/")[0] == given and kept["reason"] == "given"
