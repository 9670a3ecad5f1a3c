"""Inputs whose samples are not on axis 0 (issue 40): ONNX's LSTM and GRU take ``x`` [steps, B, in] and states
[layers, B, hidden]. Stacking a file's samples on axis 0 fed several samples as one state; undeclared, such an input
is refused (exit 2), naming the input, the model's shape and the file's, before any work. A data file keeps samples
on axis 0; ``--sample-axis x=1 --sample-axis h0=1`` says where the model takes them, and outputs named by the same
dim (``state`` [1, B, 16]) are compared per sample."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.data.datasets import open_dataset
from compiler.data.model import load_model
from tests.support.cli import REPO, assert_clean_error, run_cli

HIDDEN, FEATURES, STEPS = 8, 4, 5


def _lstm(path, batch_first: bool) -> None:
    """An LSTM over x with initial state h0; batch first, its inputs are transposed into ONNX's layout inside."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, FEATURES)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, HIDDEN)).astype(np.float32), "R"),
    ]
    x = ["B", STEPS, FEATURES] if batch_first else [STEPS, "B", FEATURES]
    state = ["B", 1, HIDDEN] if batch_first else [1, "B", HIDDEN]
    nodes = []
    if batch_first:
        nodes += [helper.make_node("Transpose", ["x"], ["x_t"], name="x_t", perm=[1, 0, 2]),
                  helper.make_node("Transpose", ["h0"], ["h0_t"], name="h0_t", perm=[1, 0, 2])]  # fmt: skip
    inputs = ["x_t", "W", "R", "", "", "h0_t"] if batch_first else ["x", "W", "R", "", "", "h0"]
    nodes.append(helper.make_node("LSTM", inputs, ["", "hn"], name="lstm", hidden_size=HIDDEN))
    graph = helper.make_graph(
        nodes,
        "lstm",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
        ],
        [helper.make_tensor_value_info("hn", TensorProto.FLOAT, [1, "B", HIDDEN])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_state_whose_batch_is_not_axis_0_is_refused(tmp_path):
    _lstm(tmp_path / "m.onnx", batch_first=False)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((32, STEPS, FEATURES)).astype(np.float32),
             h0=np.zeros((32, 1, HIDDEN), np.float32))  # fmt: skip
    refused = run_cli("calibrate", tmp_path / "m.onnx", "--data", tmp_path / "d.npz", "--out", tmp_path / "cal")
    assert_clean_error(refused, 2, "input 'x' is [5, ?, 4]", "axis 1 is dynamic", "[32, 5, 4]")
    assert not (tmp_path / "cal" / "calibration.json").exists()


def test_the_same_model_with_its_batch_first_calibrates(tmp_path):
    _lstm(tmp_path / "m.onnx", batch_first=True)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((32, STEPS, FEATURES)).astype(np.float32),
             h0=np.zeros((32, 1, HIDDEN), np.float32))  # fmt: skip
    done = run_cli("calibrate", tmp_path / "m.onnx", "--data", tmp_path / "d.npz", "--out", tmp_path / "cal",
                   "--precision", "fp16")  # fmt: skip
    assert done.exit_code == 0, done.stderr


GRU = REPO / "tests" / "fixtures" / "gru_state.onnx"  # tests/fixtures/make_gru_state.py
AXES = ("--sample-axis", "x=1", "--sample-axis", "h0=1")


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "gru.npz"
    np.savez(path, x=rng.standard_normal((120, 4, 8)).astype(np.float32),
             h0=(rng.standard_normal((120, 1, 16)) * 0.5).astype(np.float32))  # fmt: skip
    (tmp_path / "profiles.yaml").write_text(
        "profiles:\n  - name: seq\n    shapes:\n      x: {min: [4, 1, 8], opt: [4, 8, 8], max: [4, 32, 8]}\n"
        "      h0: {min: [1, 1, 16], opt: [1, 8, 16], max: [1, 32, 16]}\n"
    )
    return path


def test_the_samples_are_fed_on_the_declared_axis_and_outputs_come_back_per_sample(data):
    dataset = open_dataset(data, load_model(GRU), sample_axes={"x": 1, "h0": 1})
    feed = dataset.read(np.arange(5))
    assert feed["x"].shape == (4, 5, 8) and feed["h0"].shape == (1, 5, 16)
    assert np.array_equal(feed["h0"][0, 3], np.load(data)["h0"][3, 0])  # sample 3's state, not a slice of four
    assert dataset.output_axes == {"state": 1}
    state, logits = dataset.batch_first(["state", "logits"], [np.zeros((1, 5, 16)), np.zeros((5, 2))], 5)
    assert state.shape == (5, 1, 16) and logits.shape == (5, 2)


def test_undeclared_the_layout_is_refused_naming_the_declaration(tmp_path, data):
    done = run_cli("calibrate", GRU, "--data", data, "--precision", "int8", "--out", tmp_path / "cal")
    assert_clean_error(done, 2, "input 'x' is [4, ?, 8]", "--sample-axis x=1")


@pytest.mark.parametrize(
    ("axes", "fragments"),
    [
        (("--sample-axis", "x=1", "--sample-axis", "h0=3"), ("--sample-axis h0=3", "give an axis from 0 to 2")),
        (("--sample-axis", "x=1", "--sample-axis", "c0=1"), ("--sample-axis c0=1", "has no input 'c0'")),
        (("--sample-axis", "x=one"), ("--sample-axis x=one", "give INPUT=AXIS")),
    ],
)
def test_a_declaration_that_does_not_fit_the_model_is_refused(tmp_path, data, axes, fragments):
    done = run_cli("calibrate", GRU, "--data", data, "--precision", "int8", "--out", tmp_path / "cal", *axes)
    assert_clean_error(done, 2, *fragments)


def test_a_state_laid_out_otherwise_in_the_file_is_refused(tmp_path):
    path = tmp_path / "wrong.npz"
    np.savez(path, x=np.zeros((40, 4, 8), np.float32), h0=np.zeros((40, 16, 1), np.float32))
    done = run_cli("calibrate", GRU, "--data", path, "--precision", "int8", "--out", tmp_path / "cal", *AXES)
    assert_clean_error(done, 2, "array 'h0' has shape [40, 16, 1]", "with samples on axis 1")


def test_a_gru_with_declared_sample_axes_calibrates_builds_and_checks(tmp_path, data):
    calibrated = run_cli("calibrate", GRU, "--data", data, "--precision", "int8", "--out", tmp_path / "cal",
                         "--json", *AXES)  # fmt: skip
    assert calibrated.exit_code == 0, calibrated.stderr
    report = json.loads(calibrated.stdout)["report"]
    assert {o["name"]: o["samples"] for o in report["outputs"]} == {"state": 24, "logits": 24}
    built = run_cli("build", GRU, "--profiles", tmp_path / "profiles.yaml", "--sku", "rtx-4090", "--precision",
                    "int8", "--calibration", tmp_path / "cal", "--out", tmp_path / "engines")  # fmt: skip
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "engines", "--data", data, "--calibration", tmp_path / "cal", "--json",
                      *AXES)  # fmt: skip
    assert checked.exit_code == 0, checked.stderr
    [engine] = json.loads(checked.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    assert accuracy["figures"]["state"]["samples"] == 24 and accuracy["figures"]["logits"]["cosine_mean"] > 0.99


def test_an_output_whose_samples_are_on_another_axis_is_found_by_its_length(data):
    """ddddocr's recogniser declares its output [1, seqlen] and returns [T, 1, classes] for each image: check once
    sliced the FP32 outputs by sample on axis 0 (time steps) and crashed comparing them (an internal error)."""
    dataset = open_dataset(data, load_model(GRU), sample_axes={"x": 1, "h0": 1})
    [steps] = dataset.batch_first(["recognised"], [np.zeros((24, 1, 37))], 1)
    assert steps.shape == (1, 24, 37) and dataset.output_axes["recognised"] == 1
    [again] = dataset.batch_first(["recognised"], [np.zeros((24, 3, 37))], 3)  # found once, kept for every batch
    assert again.shape == (3, 24, 37)
    [ambiguous] = dataset.batch_first(["pairs"], [np.zeros((6, 2, 2))], 2)  # two axes of 2: left as it is
    assert ambiguous.shape == (6, 2, 2) and "pairs" not in dataset.output_axes
