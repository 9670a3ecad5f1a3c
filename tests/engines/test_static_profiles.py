"""A model of static input shapes builds without a profiles file (its one profile, 'static', is its shapes, recorded
like any other); a model with a dynamic dim is told to give one, naming the input; empty profiles and shapes get a
sentence, not pydantic's words."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def static_model(tmp_path_factory) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path_factory.mktemp("static") / "relu.onnx"
    onnx.save(model, path)
    return path


def test_a_static_model_builds_without_profiles(static_model, tmp_path):
    done = run_cli("build", static_model, "--sku", "rtx-4090", "--precision", "fp16", "--out", tmp_path / "engines")
    assert done.exit_code == 0, done.stderr
    engine = json.loads((tmp_path / "engines" / "rtx-4090" / "fp16" / "engine.json").read_text())
    assert engine["profiles"] == [
        {"name": "static", "shapes": {"x": {"min": [2, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [2, 3, 8, 8]}}}
    ]


def test_a_dynamic_model_without_profiles_is_told_which_input_needs_them(digits_model, tmp_path):
    done = run_cli("build", digits_model, "--sku", "rtx-4090", "--precision", "fp16", "--out", tmp_path / "e")
    assert_clean_error(done, 2, "--profiles is needed", "image: [B, 1, 8, 8]")
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("profiles: []\n", "profiles: empty; list at least one profile"),
        ("profiles:\n  - name: a\n    shapes: {}\n", "profile 'a' shapes: empty; give min, opt and max"),
    ],
)
def test_empty_profiles_and_shapes_are_named_in_words(digits_model, tmp_path, text, fragment):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(text)
    done = run_cli("build", digits_model, "--profiles", profiles, "--sku", "rtx-4090", "--precision", "fp16",
                   "--out", tmp_path / "e")  # fmt: skip
    line = assert_clean_error(done, 2, fragment)
    assert "Dictionary should" not in line and "List should" not in line
