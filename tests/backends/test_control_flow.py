"""Control flow (issue 40): `compile inspect` says when a model has If/Loop/Scan that the parser takes but the
builder may refuse (TensorRT-RTX 1.7 asserts inside its builder on an If-wrapped LSTM of a trained VAD model), and a
failed build of a network with control flow says what usually helps, which the builder's own message does not."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.backends import load_backend
from compiler.backends.base import _control_flow_hint
from tests.support.cli import EXAMPLES, run_cli

HIDDEN, FEATURES, STEPS = 8, 4, 10


def _branch(tag: str, rng) -> onnx.GraphProto:
    weights = [
        numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, FEATURES)).astype(np.float32), f"W_{tag}"),
        numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, HIDDEN)).astype(np.float32), f"R_{tag}"),
    ]
    nodes = [
        helper.make_node("LSTM", ["x", f"W_{tag}", f"R_{tag}"], [f"y_{tag}"], name=f"lstm_{tag}", hidden_size=HIDDEN),
        helper.make_node("Squeeze", [f"y_{tag}", "axis1"], [f"out_{tag}"], name=f"squeeze_{tag}"),
    ]
    output = helper.make_tensor_value_info(f"out_{tag}", TensorProto.FLOAT, [STEPS, 1, HIDDEN])
    return helper.make_graph(nodes, f"branch_{tag}", [], [output], weights)


def vad_like(path) -> None:
    """A VAD-like model: an LSTM chosen by If(sr == 16000), sr a scalar input (silero-VAD's structure, not its
    model)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Equal", ["sr", "k16000"], ["is_16k"], name="is_16k"),
        helper.make_node(
            "If", ["is_16k"], ["y"], name="by_rate", then_branch=_branch("a", rng), else_branch=_branch("b", rng)
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "vad_like",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, FEATURES]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [STEPS, 1, HIDDEN])],
        [
            numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_inspect_says_the_builder_may_refuse_control_flow(tmp_path):
    vad_like(tmp_path / "vad.onnx")
    shown = run_cli("inspect", tmp_path / "vad.onnx")
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.split())  # as a terminal wraps it
    assert "control flow: If by_rate (decided by input 'sr')" in text  # what --const could freeze
    assert "the builder may still refuse them" in text and "--build-check" in text
    report = json.loads(run_cli("inspect", tmp_path / "vad.onnx", "--json").stdout)
    assert report["model"]["control_flow"] == ["If by_rate (decided by input 'sr')"]
    plain = run_cli("inspect", EXAMPLES / "digits_cnn.onnx")
    assert "control flow" not in plain.stdout


def _network(path):
    backend = load_backend("tensorrt-rtx")
    trt = backend.trt
    builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    network = backend._network(builder)
    parser = trt.OnnxParser(network, trt.Logger(trt.Logger.ERROR))
    assert parser.parse_from_file(str(path))
    return trt, network, parser, builder  # the parser and builder live as long as the network


def test_a_failed_build_with_control_flow_gets_the_hint_and_one_without_none(tmp_path):
    vad_like(tmp_path / "vad.onnx")
    trt, network, *_ = _network(tmp_path / "vad.onnx")
    hint = _control_flow_hint(trt, network)
    assert hint.startswith("; the model has If/Loop/Scan") and "export the model without control flow" in hint
    trt, network, *_ = _network(EXAMPLES / "digits_cnn.onnx")
    assert _control_flow_hint(trt, network) == ""
