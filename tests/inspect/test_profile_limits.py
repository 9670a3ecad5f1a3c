"""Profiles the model cannot run are refused before any build (issue 33): dims past what the model's own constants
allow (a position table, a reshape), found by shape inference and folding, and what TensorRT's builder finds not
self-consistent. The int64 binding warning of token-id inputs is not repeated to the user."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from compiler.core.profiles import load_profiles
from compiler.data.shape_limits import profile_limit_errors, weightless_model
from tests.fixtures.make_encoder import MODEL, POSITIONS, build
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build


def _profiles(path, sequence: tuple[int, int, int], batch: tuple[int, int, int] = (1, 4, 8)):
    shape = {key: [b, s] for key, b, s in zip(("min", "opt", "max"), batch, sequence, strict=True)}
    path.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {
                        "name": "short",
                        "shapes": {
                            "input_ids": {"min": [1, 8], "opt": [4, 32], "max": [8, 64]},
                            "attention_mask": {"min": [1, 8], "opt": [4, 32], "max": [8, 64]},
                        },
                    },
                    {"name": "long", "shapes": {"input_ids": shape, "attention_mask": shape}},
                ]
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def buffer_encoder(tmp_path_factory):
    """The encoder with Hugging Face's position ids: a Slice of a [1, 128] buffer, then a broadcast Add."""
    path = tmp_path_factory.mktemp("buffer-encoder") / "encoder.onnx"
    onnx.save_model(build(positions="buffer"), path)
    return path


def test_a_sequence_past_the_position_table_is_refused_by_inspect_and_build(tmp_path):
    profiles = _profiles(tmp_path / "long.yaml", (8, 128, 512))
    inspected = run_cli("inspect", MODEL, "--profiles", profiles)
    line = assert_clean_error(
        inspected,
        2,
        "long.yaml",
        "profile 'long'",
        "input 'input_ids' dim 1 ('sequence')",
        "attention_mask",
        "max 512",
        "embeddings/position",
        "(Gather)",
        "index 511 of the 128",
        "lower the max to 128",
    )
    assert "profile 'short'" not in line
    built = run_build(tmp_path / "engines", ("rtx-4090",), ("fp32",), model=MODEL, profiles=profiles)
    assert_clean_error(built, 2, "profile 'long'", "input 'input_ids' dim 1", "lower the max to 128")
    assert not (tmp_path / "engines").exists()


def test_hugging_face_position_ids_past_the_buffer_are_refused(tmp_path, buffer_encoder):
    profiles = _profiles(tmp_path / "long.yaml", (8, 128, 512))
    inspected = run_cli("inspect", buffer_encoder, "--profiles", profiles)
    assert_clean_error(
        inspected,
        2,
        "input 'input_ids' dim 1",
        "node 'embeddings/add' (Add)",
        "Incompatible dimensions",
        "lower the max to 128",
    )


@pytest.mark.parametrize("positions", ["range", "buffer"])
def test_the_largest_size_named_is_exactly_the_one_the_model_takes(tmp_path, positions):
    model = build(positions=positions)
    for largest, errors in ((POSITIONS, 0), (POSITIONS + 1, 1)):
        profiles = load_profiles(_profiles(tmp_path / f"{largest}.yaml", (1, 1, largest), batch=(1, 1, 2)))
        assert len(profile_limit_errors(model, profiles)) == errors


@pytest.mark.parametrize("sequence", [(8, 32, 128), (8, 128, 512)])
def test_the_model_read_without_its_weights_finds_what_the_full_model_does(tmp_path, buffer_encoder, sequence):
    profiles = load_profiles(_profiles(tmp_path / "p.yaml", sequence))
    for path in (MODEL, buffer_encoder):
        weightless = weightless_model(path)
        assert weightless.ByteSize() < path.stat().st_size / 10
        assert profile_limit_errors(weightless, profiles) == profile_limit_errors(onnx.load(path), profiles)
    assert len(profile_limit_errors(weightless, profiles)) == (sequence[2] > POSITIONS)


def _reshaping_model() -> onnx.ModelProto:
    """x [B, S] -> Reshape to [B, 4, 16]: runs only when S is 64."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="to_heads")],
        "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4, 16])],
        [numpy_helper.from_array(np.array([0, 4, 16], np.int64), "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_reshape_the_min_shapes_cannot_take_is_named(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save_model(_reshaping_model(), path)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [1, 32], opt: [1, 64], max: [1, 64]}\n")
    inspected = run_cli("inspect", path, "--profiles", profiles)
    assert_clean_error(inspected, 2, "profile 'p'", "min shapes (x [1, 32])", "node 'to_heads' (Reshape)")
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [1, 64], opt: [1, 64], max: [4, 64]}\n")
    assert run_cli("inspect", path, "--profiles", profiles).exit_code == 0


def test_what_the_builder_finds_not_self_consistent_fails_the_target_as_bad_input(tmp_path, buffer_encoder):
    """The last line of defence, for what the static check cannot see: TensorRT's own verdict at build time."""
    from compiler.engines import plan_builds, run_job

    fine = _profiles(tmp_path / "fine.yaml", (8, 64, 128))
    (job,) = plan_builds(buffer_encoder, fine, "rtx-4090", "fp32", tmp_path / "engines")
    too_long = load_profiles(_profiles(tmp_path / "long.yaml", (8, 128, 512))).profiles
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, profiles=tuple(too_long)), use_cache=False)
    status = run_job(job, None, None)
    assert status.status == "failed" and status.refused
    assert "not self-consistent" in status.errors[0] and "512 != 128" in status.errors[0]
    assert not (tmp_path / "engines" / "rtx-4090" / "fp32" / "engine.plan").exists()


def test_the_int64_binding_warning_stays_in_the_log_not_on_screen(tmp_path):
    built = run_build(
        tmp_path / "engines",
        ("rtx-4090",),
        ("fp32",),
        "--no-cache",
        model=MODEL,
        profiles=_profiles(tmp_path / "p.yaml", (8, 64, 128)),
    )
    assert built.exit_code == 0, built.stderr
    assert "Int64 binding" not in built.stderr and "warning:" not in built.stderr
    record = json.loads((tmp_path / "engines" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert sum("Int64 binding" in w for w in record["builder_warnings"]) == 2
