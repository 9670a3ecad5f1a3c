"""``--dim INPUT:AXIS=NAME`` (issue 40): a Paddle2ONNX-like model whose dynamic dims are all ``?`` (and one
``dim_value: -1``) is refused with a ``--dim`` example for it, and with ``--dim x:2=H --dim x:3=W`` and profiles
naming H and W it inspects and builds a real TensorRT-RTX engine; the user's file is never changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler.data.protobuf_inputs import skim_inputs
from tests.support.cli import assert_clean_error, run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIXTURES / "paddle_dims.onnx"
PROFILES = FIXTURES / "paddle_dims_profiles.yaml"
RENAMES = ("--dim", "x:2=H", "--dim", "x:3=W")


def _build(tmp_path: Path, *args: str):
    return run_cli("build", MODEL, "--profiles", PROFILES, "--sku", "rtx-4090", "--precision", "fp32",
                   "--out", tmp_path / "build", "--cache-dir", tmp_path / "cache", *args)  # fmt: skip


def test_without_dim_inspect_and_build_refuse_and_name_dim(tmp_path):
    inspected = run_cli("inspect", MODEL, "--profiles", PROFILES, "--cache-dir", tmp_path / "cache")
    assert_clean_error(inspected, 2, "symbolic dim '?' is shared", "--dim x:0=D0 --dim x:2=D2")
    assert_clean_error(_build(tmp_path), 2, "--dim x:0=D0 --dim x:2=D2")


def test_with_dim_inspect_shows_the_names_and_the_profiles_are_valid(tmp_path):
    before = MODEL.read_bytes()
    shown = run_cli("inspect", MODEL, "--profiles", PROFILES, *RENAMES, "--cache-dir", tmp_path / "cache", "--json")
    assert shown.exit_code == 0, shown.stderr
    report = json.loads(shown.stdout)
    summary = report.get("model", report)
    assert summary["path"] == str(MODEL)  # the user's file, not the cached copy
    assert summary["inputs"][0]["shape"] == ["?", 3, "H", "W"]
    assert report["profiles"]["valid"] is True
    assert MODEL.read_bytes() == before
    [copy] = (tmp_path / "cache" / "dims").glob("*/paddle_dims.onnx")
    assert skim_inputs(copy) == {"x": ["?", 3, "H", "W"]}


def test_with_dim_build_makes_a_real_engine_keyed_by_the_renames(tmp_path):
    built = _build(tmp_path, *RENAMES)
    assert built.exit_code == 0, built.stderr
    plan = tmp_path / "build" / "rtx-4090" / "fp32" / "engine.plan"
    assert plan.stat().st_size > 10_000
    record = json.loads((tmp_path / "build" / "build.json").read_text())
    renamed = onnx.load(next((tmp_path / "cache" / "dims").glob("*/paddle_dims.onnx")))
    assert record["model_sha256"] != json.loads(run_cli("inspect", MODEL, "--json").stdout)["model"]["sha256"]
    assert [d.dim_param for d in renamed.graph.input[0].type.tensor_type.shape.dim][2:] == ["H", "W"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("y:2=H", "'y' is not a model input (model inputs: x)"),
        ("x:4=H", "axis 4 is out of range for input 'x' of rank 4"),
        ("x:1=C", "dim 1 of input 'x' is static 3; only dynamic dims can be renamed"),
        ("x:2=", "the dim name '' must be"),
        ("x:2=1H", "the dim name '1H' must be"),
        ("x2=H", "expected INPUT:AXIS=NAME"),
        ("x:two=H", "expected INPUT:AXIS=NAME"),
    ],
)
def test_a_bad_dim_is_one_error_line(tmp_path, value, fragment):
    refused = run_cli("inspect", MODEL, "--dim", value, "--cache-dir", tmp_path / "cache")
    assert_clean_error(refused, 2, "--dim", value, fragment)


def test_calibrate_build_and_check_with_the_same_renames(tmp_path):
    """int8 through the renamed copy: the calibration is of the copy, build --dim reads the same copy (same
    content, so the calibration's model digest matches), and check needs the same renames to find the model."""
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((25, 3, 32, 48)).astype(np.float32))
    calibrated = run_cli("calibrate", MODEL, *RENAMES, "--data", data, "--out", tmp_path / "cal",
                         env={**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert calibrated.exit_code == 0, calibrated.stderr
    built = _build(tmp_path, *RENAMES, "--calibration", tmp_path / "cal", "--precision", "int8")
    assert built.exit_code == 0, built.stderr
    assert (tmp_path / "build" / "rtx-4090" / "int8" / "engine.plan").stat().st_size > 10_000
    check = ("check", tmp_path / "build", "--data", data, "--samples", "8", "--cache-dir", tmp_path / "cache")
    assert_clean_error(run_cli(*check), 2, "not the model of this build", "--dim")
    checked = run_cli(*check, *RENAMES)
    assert checked.exit_code == 0, checked.stderr
