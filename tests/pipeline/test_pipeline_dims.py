"""``dims:`` in a pipeline (issue 40): the Paddle2ONNX-like model whose H and W are both ``?`` goes through
``compile release`` (inspect, calibrate, build, check, publish) with its dims renamed for every stage; without
``dims:`` the release refuses it, and a malformed entry is refused when the file is read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import yaml

from tests.support.cli import assert_clean_error, run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _pipeline(tmp_path: Path, **changes) -> Path:
    data = tmp_path / "images.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((24, 3, 32, 48)).astype(np.float32))
    spec = {
        "release": {"name": "paddle-dims", "version": "1.0.0"},
        "model": str(FIXTURES / "paddle_dims.onnx"),
        "profiles": str(FIXTURES / "paddle_dims_profiles.yaml"),
        "dims": ["x:2=H", "x:3=W"],
        "targets": {"rtx-4090": ["fp32", "int8"]},
        "calibration": {"data": str(data)},
        "check": {"data": str(data), "samples": 8},
        "store": str(tmp_path / "artifacts"),
    } | changes
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _release(pipeline: Path, tmp_path: Path):
    env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "cache")}
    return run_cli("release", pipeline, "--work", tmp_path / "work", "--json", env=env)


def test_dims_in_a_pipeline_release_the_model_end_to_end(tmp_path):
    model = (FIXTURES / "paddle_dims.onnx").read_bytes()
    done = _release(_pipeline(tmp_path), tmp_path)
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert all(s["status"] == "ok" for s in report["stages"]), report["stages"]
    assert sorted(e["precision"] for e in report["engines"] if e["status"] == "ok") == ["fp32", "int8"]
    assert report["published"]["status"] == "published"
    assert (FIXTURES / "paddle_dims.onnx").read_bytes() == model  # the user's file is never changed


def test_without_dims_the_release_names_the_dims_to_rename(tmp_path):
    refused = _release(_pipeline(tmp_path, dims=[]), tmp_path)
    assert refused.exit_code == 2, refused.stderr
    assert "--dim x:0=D0 --dim x:2=D2" in refused.stderr


def test_a_malformed_or_impossible_dims_entry_is_refused(tmp_path):
    malformed = _release(_pipeline(tmp_path, dims=["x2=H"]), tmp_path)
    assert_clean_error(malformed, 2, "dims: 'x2=H': expected INPUT:AXIS=NAME")
    static = _release(_pipeline(tmp_path, dims=["x:1=C"]), tmp_path)
    assert_clean_error(static, 2, "release.yaml", "dim 1 of input 'x' is static 3")
