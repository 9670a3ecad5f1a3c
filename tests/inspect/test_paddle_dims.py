"""Dims as Paddle2ONNX writes them (issue 40): ``dim_value: -1`` means dynamic (TensorRT's parser reads it so), not
"static -1"; every dynamic dim named ``?`` is one symbol to TensorRT, so differing H and W are refused with the way
to rename them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.data.protobuf_inputs import skim_inputs
from tests.support.cli import assert_clean_error, run_cli


def _model(path, dims) -> None:
    """A PP-OCR-detector-like stem: x [N, 3, H, W] -> Conv 3x3 -> Sigmoid -> y [N, 1, H, W]."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
        ],
        "paddle_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 1, dims[2], dims[3]])],
        [numpy_helper.from_array(rng.standard_normal((1, 3, 3, 3)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.save(model, path)


def _profiles(path) -> None:
    path.write_text("profiles:\n  - name: page\n    shapes:\n"
                    "      x: {min: [1, 3, 32, 64], opt: [1, 3, 64, 128], max: [2, 3, 96, 160]}\n")  # fmt: skip


def test_minus_one_dims_are_dynamic_and_build_with_different_h_and_w(tmp_path):
    _model(tmp_path / "m.onnx", [-1, 3, -1, -1])
    assert skim_inputs(tmp_path / "m.onnx") == {"x": [None, 3, None, None]}
    shown = json.loads(run_cli("inspect", tmp_path / "m.onnx", "--json").stdout)
    [model_input] = shown["model"]["inputs"] if "model" in shown else shown["inputs"]
    assert model_input["shape"] == [None, 3, None, None]
    _profiles(tmp_path / "p.yaml")
    built = run_cli("build", tmp_path / "m.onnx", "--profiles", tmp_path / "p.yaml", "--sku", "rtx-4090",
                    "--precision", "fp32", "--out", tmp_path / "build")  # fmt: skip
    assert built.exit_code == 0, built.stderr


def test_dims_all_named_question_mark_are_one_symbol_and_the_refusal_says_how_to_rename(tmp_path):
    _model(tmp_path / "m.onnx", ["?", 3, "?", "?"])
    _profiles(tmp_path / "p.yaml")
    refused = run_cli("build", tmp_path / "m.onnx", "--profiles", tmp_path / "p.yaml", "--sku", "rtx-4090",
                      "--precision", "fp32", "--out", tmp_path / "build")  # fmt: skip
    assert_clean_error(refused, 2, "symbolic dim '?' is shared", "an exporter named them all '?'",
                       "--dim x:0=D0 --dim x:2=D2")  # fmt: skip


@pytest.mark.parametrize("dims", [[-1, 3, 64, 64]])
def test_a_profile_may_not_ask_a_minus_one_dim_for_minus_one(tmp_path, dims):
    """What inspect once advised for a -1 dim ("use -1 for all three") is no shape: refused."""
    _model(tmp_path / "m.onnx", dims)
    (tmp_path / "p.yaml").write_text(
        "profiles:\n  - name: p\n    shapes:\n"
        "      x: {min: [-1, 3, 64, 64], opt: [-1, 3, 64, 64], max: [-1, 3, 64, 64]}\n"
    )
    refused = run_cli("inspect", tmp_path / "m.onnx", "--profiles", tmp_path / "p.yaml")
    assert_clean_error(refused, 2, "p.yaml")
