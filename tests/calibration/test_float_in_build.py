"""Calibrate never makes what check refuses (issue 41): a Conv/MatMul/Gemm given Q/DQ that TensorRT computes in
float anyway is kept in float by calibrate's build proof, and a node kept in float reads float weights even where
onnxruntime quantized a weight it shares with quantized nodes. The model is an RNN unrolled as PyTorch exports an
``LSTMCell`` loop (captcha-whisperer's CRNN): its first step's ``Gemm(h0, W_hh)`` reads a zero state sized from the
batch, which TensorRT-RTX 1.7 computes in float despite its Q/DQ."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.fixtures.make_unrolled_rnn import make_data
from tests.support.cli import REPO, run_cli
from tests.support.digits import run_calibrate

MODEL = REPO / "tests" / "fixtures" / "unrolled_rnn.onnx"
FIRST_STEP = "/rnn/cell_0/Gemm"


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("rnn") / "sequences.npz")


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    path = tmp_path_factory.mktemp("rnn-profiles") / "profiles.yaml"
    path.write_text(
        "profiles:\n  - name: default\n    shapes:\n      x: {min: [1, 4, 8], opt: [4, 4, 8], max: [8, 4, 8]}\n"
    )
    return path


def _dequantized_inputs(model, node_name: str) -> list[str]:
    proto = onnx.load_model(model)
    dequantized = {o for n in proto.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    [node] = [n for n in proto.graph.node if n.name == node_name]
    return [i for i in node.input if i in dequantized]


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_what_the_build_computes_in_float_is_kept_in_float_and_check_passes(tmp_path, sequences, profiles, precision):
    # random weights leave near ties between logits: one flipped top-1 of 8 held out is 12.5 %; this is about placement
    gates = ("--min-top1", "0")
    shown = run_calibrate(tmp_path / "calibration", "--precision", precision, *gates, model=MODEL, data=sequences)
    assert shown.exit_code == 0, shown.stderr
    assert f"kept in float: {FIRST_STEP} (1 node(s) the build computed in float despite their {precision} Q/DQ)" in (
        " ".join(shown.stdout.split())
    )
    record = json.loads((tmp_path / "calibration" / "calibration.json").read_text())
    assert record["exclusions"] == [
        {
            "node": FIRST_STEP,
            "reason": "build-proof",
            "why": "TensorRT computes it in float despite its Q/DQ (calibrate's build proof)",
        }
    ]
    assert "batch 1 to 2" in record["build_proof"]  # the proof keeps the batch dynamic, as the served engine does
    assert _dequantized_inputs(tmp_path / "calibration" / "model.onnx", FIRST_STEP) == []  # W_hh in float too
    assert len(_dequantized_inputs(tmp_path / "calibration" / "model.onnx", "/rnn/cell_1/Gemm")) == 2
    built = run_cli(
        "build",
        MODEL,
        "--profiles",
        profiles,
        "--sku",
        "rtx-4090",
        "--precision",
        precision,
        "--calibration",
        tmp_path / "calibration",
        "--out",
        tmp_path / "builds",
    )
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "builds", "--data", sequences, "--json", *gates)
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    [engine] = json.loads(checked.stdout)["engines"]
    fusions = next(c for c in engine["checks"] if c["name"] == "fusions")
    assert fusions["status"] == "ok" and fusions["figures"]["violations"]["quantized-matmul"] == 0
    gain = next(c for c in engine["checks"] if c["name"] == "precision-gain")
    assert (gain["figures"]["quantized"], gain["figures"]["heavy"]) == (8, 9)  # the first step's Gemm in float
    store = tmp_path / "store"
    published = run_cli("publish", tmp_path / "builds", "--name", "rnn", "--version", "1.0.0", "--store", store)
    assert published.exit_code == 0, published.stderr
    listed = run_cli("ls", "rnn@1.0.0", "--store", store, "--json")
    [shown] = json.loads(listed.stdout)["manifest"]["content"]["engines"]
    assert shown["low_precision_share"] == pytest.approx(8 / 9, abs=1e-4)
    assert "89%" in run_cli("ls", "rnn@1.0.0", "--store", store).stdout  # the engines table's "in precision"


def test_a_node_excluded_by_name_reads_float_weights_it_shares_with_quantized_nodes(tmp_path, sequences):
    """``--exclude`` of one cell of the unrolled RNN: onnxruntime quantizes W_hh once for every cell that reads it,
    and the excluded cell read it dequantized (a Q/DQ input check's quantized-matmul gate refuses)."""
    excluded = "/rnn/cell_1/Gemm"
    made = run_calibrate(tmp_path / "out", "--exclude", excluded, model=MODEL, data=sequences)
    assert made.exit_code == 0, made.stderr
    model = tmp_path / "out" / "model.onnx"
    assert _dequantized_inputs(model, excluded) == []
    assert len(_dequantized_inputs(model, "/rnn/cell_2/Gemm")) == 2  # the others keep the quantized W_hh
    weights = {i.name for i in onnx.load_model(model).graph.initializer}
    assert {"w_hh", "w_hh_quantized"} <= weights
    record = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert {"node": excluded, "reason": "given"} in record["exclusions"]
