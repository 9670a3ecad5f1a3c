"""Paths in a pipeline file are relative to the file (issue 41), the metric and labels included, from any working
directory; --dry-run checks the metric the run would load (its file, its import) and the labels."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.pipeline.test_release import _pipeline
from tests.support.cli import assert_clean_error, run_cli

METRIC = """import numpy as np


def top1(outputs, reference, labels):
    return float(np.mean(outputs["logits"].argmax(1) == reference["logits"].argmax(1)))
"""


def _with_metric(tmp_path: Path, metric: str) -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "metrics.py").write_text(METRIC)
    (tmp_path / "pipes").mkdir(exist_ok=True)
    pipeline = _pipeline(tmp_path, targets={"rtx-4090": ["fp16"]})
    spec = yaml.safe_load(pipeline.read_text())
    spec["check"] |= {"metric": metric, "min_metric": 0.5, "samples": 16}
    moved = tmp_path / "pipes" / "release.yaml"
    moved.write_text(yaml.safe_dump(spec, sort_keys=False))
    return moved


def test_the_metric_is_found_relative_to_the_pipeline_from_any_directory(tmp_path):
    pipeline = _with_metric(tmp_path, "../code/metrics.py:top1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dry = run_cli("release", pipeline, "--dry-run", cwd=elsewhere)
    assert dry.exit_code == 0, dry.stderr
    done = run_cli("release", pipeline, "--work", tmp_path / "work", "--json", cwd=elsewhere)
    assert done.exit_code == 0, done.stderr


def test_a_dry_run_refuses_the_metric_the_run_would_refuse(tmp_path):
    missing = _with_metric(tmp_path, "../code/nothing.py:top1")
    assert_clean_error(run_cli("release", missing, "--dry-run"), 2, f"{tmp_path / 'code' / 'nothing.py'} is not a file")
    (tmp_path / "code" / "broken.py").write_text("def top1(:\n")
    broken = _with_metric(tmp_path, "../code/broken.py:top1")
    refused = run_cli("release", broken, "--dry-run")
    assert refused.exit_code == 2 and refused.error_lines and "broken.py" in refused.error_lines[0]
    assert not (tmp_path / "artifacts").exists()


def test_a_model_of_static_shapes_releases_without_profiles(tmp_path):
    """`profiles:` was required, so a pipeline of ddddocr's detector or PicoDet (every dim fixed) was refused with
    `profiles: Field required` although `compile build` takes such a model without one."""
    import numpy as np
    import onnx

    from tests.support.digits import DIGITS_DATA, DIGITS_MODEL

    model = onnx.load(DIGITS_MODEL)
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 4  # a fixed batch of 4: no dynamic dim left
    onnx.save(model, tmp_path / "static.onnx")
    np.savez(tmp_path / "data.npz", image=np.load(DIGITS_DATA)["image"][:64])
    spec = {
        "release": {"name": "static", "version": "1.0.0"},
        "model": "static.onnx",
        "targets": {"rtx-4090": ["fp16"]},
        "check": {"data": "data.npz", "samples": 64},
        "store": "store",
    }
    pipeline = tmp_path / "release.yaml"
    pipeline.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli("release", pipeline, "--work", tmp_path / "work", "--json")
    assert done.exit_code == 0, done.stderr
    assert (tmp_path / "store" / "releases" / "static" / "1.0.0" / "manifest.json").is_file()
