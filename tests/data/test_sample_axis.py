"""Inputs whose samples are not on axis 0 (issue 40): ONNX LSTM layouts put the batch on axis 1 (x [steps, B, in],
states [layers, B, hidden]). Stacking a file's samples on axis 0 fed several samples as one state; such an input is
refused (exit 2), naming the input, the model's shape and the file's, before any work."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import assert_clean_error, run_cli

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
