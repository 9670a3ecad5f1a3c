"""Inputs that are not samples (issue 40): a VAD-style model takes a scalar sample rate ``sr`` beside its audio,
which no data file can hold (it has no sample axis) and an ``If`` reads. ``--const sr=16000`` (and ``const:`` in a
pipeline) freezes it: the If folds to its branch, the data needs only ``audio``, and the engine no longer takes
``sr``, so what a server sends is the audio alone."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest

from compiler.data.freeze import FROZEN_KEY, SOURCE_KEY, frozen_model
from compiler.data.model import load_model
from tests.support.cli import REPO, assert_clean_error, run_cli

VAD = REPO / "tests" / "fixtures" / "vad_like.onnx"  # tests/fixtures/make_vad_like.py


@pytest.fixture
def audio(tmp_path):
    path = tmp_path / "audio.npz"
    np.savez(path, audio=np.random.default_rng(1).standard_normal((200, 64)).astype(np.float32))
    (tmp_path / "profiles.yaml").write_text(
        "profiles:\n  - name: audio\n    shapes:\n      audio: {min: [1, 64], opt: [8, 64], max: [32, 64]}\n"
    )
    return path


def test_the_frozen_model_computes_what_the_model_computes_at_that_value_without_control_flow(tmp_path):
    frozen = frozen_model(VAD, {"sr": 8000.0}, tmp_path)
    model = onnx.load_model(frozen)
    assert [i.name for i in model.graph.input] == ["audio"]
    assert "If" not in {n.op_type for n in model.graph.node}
    props = {p.key: p.value for p in model.metadata_props}
    assert json.loads(props[FROZEN_KEY]) == {"sr": 8000.0} and props[SOURCE_KEY] == load_model(VAD).sha256
    batch = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    both = onnxruntime.InferenceSession(str(VAD)).run(None, {"audio": batch, "sr": np.array(8000, np.int64)})[0]
    assert np.allclose(onnxruntime.InferenceSession(str(frozen)).run(None, {"audio": batch})[0], both, atol=1e-6)
    assert frozen_model(VAD, {"sr": 8000.0}, tmp_path) == frozen  # one file per model and values


def test_without_const_the_data_is_refused_naming_the_const_to_give(tmp_path, audio):
    done = run_cli("calibrate", VAD, "--data", audio, "--precision", "int8", "--out", tmp_path / "cal")
    assert_clean_error(done, 2, "no array for model input(s) sr", "--const sr=VALUE", "sr is a scalar")


def test_inspect_calibrate_build_and_check_take_the_frozen_model(tmp_path, audio):
    inspected = run_cli("inspect", VAD, "--const", "sr=16000", "--json", "--cache-dir", tmp_path / "cache")
    assert inspected.exit_code == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert [i["name"] for i in report["model"]["inputs"]] == ["audio"] and report["model"]["control_flow"] == []
    calibrated = run_cli("calibrate", VAD, "--data", audio, "--precision", "int8", "--const", "sr=16000",
                         "--out", tmp_path / "cal", "--json")  # fmt: skip
    assert calibrated.exit_code == 0, calibrated.stderr
    built = run_cli("build", VAD, "--profiles", tmp_path / "profiles.yaml", "--sku", "rtx-4090", "--precision",
                    "int8", "--calibration", tmp_path / "cal", "--const", "sr=16000", "--out", tmp_path / "engines",
                    "--cache-dir", tmp_path / "cache", "--json")  # fmt: skip
    assert built.exit_code == 0, built.stderr
    engine = json.loads((tmp_path / "engines" / "rtx-4090" / "int8" / "engine.json").read_text())
    frozen = load_model(frozen_model(VAD, {"sr": 16000.0}, tmp_path / "cache"))
    assert engine["model_sha256"] == frozen.sha256  # built from the frozen model, whose one input is the audio:
    assert [i.name for i in frozen.proto.graph.input] == ["audio"]  # a server sends the audio alone
    checked = run_cli("check", tmp_path / "engines", "--data", audio, "--calibration", tmp_path / "cal")
    assert checked.exit_code == 0, checked.stderr


def test_a_pipeline_freezes_its_const_inputs_for_every_stage(tmp_path, audio):
    pipeline = tmp_path / "vad.yaml"
    pipeline.write_text(
        f"release: {{name: vad, version: 1.0.0}}\nmodel: {VAD}\nconst: {{sr: 16000}}\nprofiles: profiles.yaml\n"
        "targets:\n  rtx-4090: [fp16, int8]\ncalibration:\n  data: audio.npz\ncheck:\n  data: audio.npz\n"
        "store: store\n"
    )
    done = run_cli("release", pipeline, "--work", tmp_path / "work", "--json")
    assert done.exit_code == 0, done.stderr
    manifest = json.loads(run_cli("ls", "vad@1.0.0", "--store", tmp_path / "store", "--json").stdout)
    assert manifest, manifest
    stray = tmp_path / "bad.yaml"
    stray.write_text(pipeline.read_text().replace("{sr: 16000}", "{rate: 16000}"))
    assert_clean_error(run_cli("release", stray, "--dry-run"), 2, "--const rate=16000", "has no input 'rate'")
