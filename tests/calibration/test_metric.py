"""The user's own metric (issue 30): ``--metric module:function`` with ``--labels``, gated by ``--min-metric`` in
calibrate and check, and the objective of ``--fallback auto``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures import make_outlier_mlp
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build, run_calibrate

METRICS = """
import numpy as np


def top1(outputs, reference, labels):
    return float((outputs["logits"].argmax(1) == labels["labels"]).mean())


def agreement(outputs, reference, labels):
    return float((outputs["logits"].argmax(1) == reference["logits"].argmax(1)).mean())


def broken(outputs, reference, labels):
    raise ValueError("no labels here")
"""


@pytest.fixture(scope="module")
def metrics(tmp_path_factory) -> tuple[Path, Path]:
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("metric")
    (folder / "metrics.py").write_text(METRICS)
    labels = folder / "labels.npz"
    np.savez(labels, labels=load_digits().target)  # digits.npz holds every digit image in this order
    return folder / "metrics.py", labels


def test_top1_against_labels_is_reported_and_gated(metrics, digits_model, digits_data, tmp_path):
    module, labels = metrics
    base = (
        "calibrate",
        digits_model,
        "--data",
        digits_data,
        "--out",
        tmp_path / "cal",
        "--metric",
        f"{module}:top1",
        "--labels",
        labels,
    )
    ok = run_cli(*base, "--min-metric", "0.9", "--json")
    assert ok.exit_code == 0, ok.stderr
    document = json.loads(ok.stdout)
    assert document["report"]["metric"]["name"] == f"{module}:top1"
    assert 0.9 < document["report"]["metric"]["value"] <= 1.0
    gate = next(g for g in document["gates"] if g["name"] == "min-metric")
    assert gate["passed"] is True and gate["threshold"] == 0.9
    strict = run_cli(*base, "--min-metric", "1.01")
    assert_clean_error(strict, 1, "min-metric", f"{module}:top1")


def test_check_scores_each_engine_with_the_metric(metrics, digits_data, tmp_path):
    module, labels = metrics
    built = run_build(tmp_path / "engines")
    assert built.exit_code == 0, built.stderr
    base = ("check", tmp_path / "engines", "--data", digits_data, "--no-lint", "--metric", f"{module}:top1")
    checked = run_cli(*base, "--labels", labels, "--min-metric", "0.9", "--json")
    assert checked.exit_code == 0, checked.stderr
    accuracy = next(c for c in json.loads(checked.stdout)["engines"][0]["checks"] if c["name"] == "accuracy")
    assert accuracy["figures"]["metric"]["value"] > 0.9
    failed = run_cli(*base, "--labels", labels, "--min-metric", "1.01")
    assert_clean_error(failed, 1, "accuracy", "below --min-metric 1.01")


def test_bad_metrics_are_usage_errors(metrics, digits_model, digits_data, tmp_path):
    module, _ = metrics
    base = ("calibrate", digits_model, "--data", digits_data, "--out", tmp_path / "cal")
    assert_clean_error(run_cli(*base, "--metric", "nocolon"), 2, "--metric nocolon", "MODULE:FUNCTION")
    assert_clean_error(run_cli(*base, "--metric", f"{module}:missing"), 2, "has no function missing")
    assert_clean_error(run_cli(*base, "--metric", "no_such_module_here:f"), 2, "cannot import")
    assert_clean_error(run_cli(*base, "--metric", f"{module}:broken"), 2, "raised ValueError: no labels here")
    assert_clean_error(run_cli(*base, "--min-metric", "0.5"), 2, "--min-metric needs --metric")
    short = tmp_path / "short.npz"
    np.savez(short, labels=np.zeros(3))
    assert_clean_error(run_cli(*base, "--metric", f"{module}:top1", "--labels", short), 2, "has 3 rows")


def test_the_metric_is_the_objective_of_the_fallback(metrics, tmp_path):
    module, _ = metrics
    model, data = make_outlier_mlp.save(tmp_path / "outlier.onnx")
    metric = ("--metric", f"{module}:agreement", "--min-metric", "0.9")
    result = run_calibrate(
        tmp_path / "cal", "--fallback", "auto", *metric, "--min-top1", "0", "--json", model=model, data=data
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["report"]["metric"]["value"] >= 0.9
    assert [e["node"] for e in document["exclusions"]] == ["block3.matmul/MatMulAddFusion", "block3.relu"]


def _with_labels(data: Path, out: Path, labels) -> Path:
    """``data`` with a ``labels`` array of its own."""
    with np.load(data) as archive:
        np.savez(out, **dict(archive), labels=labels)
    return out


def test_labels_inside_the_data_file_are_scored_and_never_fed_to_the_model(metrics, digits_data, tmp_path):
    from sklearn.datasets import load_digits

    module, labels = metrics
    data = _with_labels(digits_data, tmp_path / "labelled.npz", load_digits().target)
    common = ("--metric", f"{module}:top1", "--min-metric", "0.9", "--json")
    inline = run_calibrate(tmp_path / "inline", *common, data=data)
    assert inline.exit_code == 0, inline.stderr
    apart = run_calibrate(tmp_path / "apart", "--labels", labels, *common)
    assert apart.exit_code == 0, apart.stderr
    value = json.loads(inline.stdout)["report"]["metric"]["value"]
    assert 0.9 < value == json.loads(apart.stdout)["report"]["metric"]["value"]  # the same labels, the same rows
    both = run_calibrate(tmp_path / "both", "--labels", labels, *common, data=data)
    assert both.exit_code == 0, both.stderr  # given twice, agreeing
    plain = run_calibrate(tmp_path / "plain", "--json", data=data)
    assert plain.exit_code == 0, plain.stderr  # no --metric: the labels are simply not used
    built = run_build(tmp_path / "engines")
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "engines", "--data", data, "--no-lint", *common)
    assert checked.exit_code == 0, checked.stderr
    accuracy = next(c for c in json.loads(checked.stdout)["engines"][0]["checks"] if c["name"] == "accuracy")
    assert accuracy["figures"]["metric"]["value"] > 0.9


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (np.zeros(5, np.int64), "array 'labels' has 5 rows; the data has 1797 samples"),
        (np.array(["a"] * 1797), "array 'labels' is <U1; labels are numbers"),
        (np.zeros(1797, np.complex64), "array 'labels' is complex64"),
        (np.array(3), "array 'labels' is a scalar"),
    ],
)
def test_bad_labels_inside_the_data_file_are_usage_errors(metrics, digits_data, tmp_path, labels, said):
    module, _ = metrics
    data = _with_labels(digits_data, tmp_path / "bad.npz", labels)
    result = run_calibrate(tmp_path / "cal", "--metric", f"{module}:top1", data=data)
    assert_clean_error(result, 2, str(data), said)
    assert not (tmp_path / "cal").exists()


def test_object_labels_and_disagreeing_labels_are_usage_errors(metrics, digits_model, digits_data, tmp_path):
    from sklearn.datasets import load_digits

    module, labels = metrics
    objects = tmp_path / "objects.npz"
    with np.load(digits_data) as archive:
        np.savez(objects, **dict(archive), labels=np.array([{"a": 1}] * 1797, dtype=object))
    base = ("calibrate", digits_model, "--out", tmp_path / "cal", "--metric", f"{module}:top1")
    assert_clean_error(run_cli(*base, "--data", objects), 2, "array 'labels' holds Python objects")
    shifted = _with_labels(digits_data, tmp_path / "shifted.npz", (load_digits().target + 1) % 10)
    assert_clean_error(
        run_cli(*base, "--data", shifted, "--labels", labels),
        2,
        "array 'labels' disagrees with",
        "first at row 0: 0 against 1",
        "give the labels in one place",
    )
    assert not (tmp_path / "cal").exists()
