"""The default accuracy gates (compiler.data.agreement), the same in calibrate and check: a sound INT8 build of a
model with large logits passes them, a collapsed one fails at calibrate and at check (issue 30)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler.data.agreement import DEFAULTS, Agreement, judge
from tests.fixtures import make_large_logits_cnn, make_outlier_mlp
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build, run_calibrate

SKU = "rtx-4090"


def _gates(output, precision="int8") -> dict[str, object]:
    return {g.name: g for g in judge(output, DEFAULTS[precision])}


def test_the_large_logits_fixture_is_what_its_script_trains():
    model, accuracy = make_large_logits_cnn.train()
    assert model.SerializeToString() == make_large_logits_cnn.MODEL.read_bytes()
    assert accuracy > 0.98


@pytest.fixture(scope="module")
def large_logits(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("large-logits")
    data = folder / "digits.npz"
    np.savez(data, image=make_large_logits_cnn.images())
    profiles = folder / "profiles.yaml"
    profiles.write_text(
        "profiles:\n  - name: online\n    shapes:\n"
        "      image: {min: [1, 1, 8, 8], opt: [8, 1, 8, 8], max: [32, 1, 8, 8]}\n"
    )
    return data, profiles


def test_large_logits_int8_passes_the_default_gates_in_calibrate_and_check(large_logits, tmp_path):
    """The face-style false failure: logits in the tens, INT8 moves them by units while every decision agrees."""
    data, profiles = large_logits
    model = make_large_logits_cnn.MODEL
    calibrated = run_calibrate(tmp_path / "cal", "--method", "entropy", "--json", model=model, data=data)
    assert calibrated.exit_code == 0, calibrated.stderr
    document = json.loads(calibrated.stdout)
    logits = document["report"]["outputs"][0]
    assert logits["max_abs_error"] > 0.5, logits  # an absolute tolerance of 0.1 would call this broken
    assert logits["top1_agreement"] == 1.0 and logits["cosine_mean"] > 0.999 and logits["sqnr_db"] > 20, logits
    assert document["passed"] is True and all(g["passed"] for g in document["gates"])

    built = run_build(
        tmp_path / "engines", (SKU,), ("int8",), "--calibration", tmp_path / "cal", model=model, profiles=profiles
    )
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "engines", "--data", data, "--samples", "256", "--json")
    assert checked.exit_code == 0, checked.stderr
    engine = json.loads(checked.stdout)["engines"][0]
    accuracy = next(c for c in engine["checks"] if c["name"] == "accuracy")
    assert accuracy["status"] == "ok", accuracy
    figures = accuracy["figures"]["logits"]
    assert figures["max_abs_error"] > 0.5 and figures["top1_agreement"] == 1.0 and figures["sqnr_db"] > 20
    assert figures["thresholds"]["min-sqnr"] == DEFAULTS["int8"].min_sqnr_db  # check's defaults are calibrate's

    # an absolute tolerance stays available for who wants it, and is what called this model broken
    strict = run_cli(
        "check", tmp_path / "engines", "--data", data, "--samples", "256", "--atol", "0.1", "--error-stat", "max"
    )
    assert_clean_error(strict, 1, "accuracy", "--atol 0.1")


def test_a_collapsed_int8_calibration_fails_at_calibrate_and_its_build_at_check(outlier, tmp_path):
    model, data, profiles = outlier
    calibrated = run_calibrate(tmp_path / "cal", "--json", model=model, data=data)
    line = assert_clean_error(calibrated, 1, "min-cosine", "logits")
    document = json.loads(calibrated.stdout)
    assert document["passed"] is False and document["report"]["outputs"][0]["cosine_mean"] < 0.9
    # the outputs are written either way: build refuses them unless told (issue 40), and check catches it again
    assert "report.json" in line and (tmp_path / "cal" / "calibration.json").is_file()
    args = ((SKU,), ("int8",), "--calibration", tmp_path / "cal")
    refused = run_build(tmp_path / "refused", *args, model=model, profiles=profiles)
    assert_clean_error(refused, 1, "its calibration failed its accuracy gates", "--allow-failed")
    built = run_build(tmp_path / "engines", *args, "--allow-failed", model=model, profiles=profiles)
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "engines", "--data", data, "--json")
    assert checked.exit_code == 1, checked.stderr
    accuracy = next(c for c in json.loads(checked.stdout)["engines"][0]["checks"] if c["name"] == "accuracy")
    assert accuracy["status"] == "failed" and "below --min-cosine 0.98" in accuracy["summary"], accuracy
    # with its calibration folder at hand, the failure names the most sensitive nodes and what to do
    named = run_cli("check", tmp_path / "engines", "--data", data, "--calibration", tmp_path / "cal", "--json")
    assert named.exit_code == 1, named.stderr
    accuracy = next(c for c in json.loads(named.stdout)["engines"][0]["checks"] if c["name"] == "accuracy")
    assert "most sensitive nodes: block3.matmul" in accuracy["summary"], accuracy["summary"]
    assert "--exclude block3.matmul" in accuracy["summary"] and "--fallback auto" in accuracy["summary"]


def test_one_near_zero_sample_does_not_fail_a_tensor_output_but_a_tail_of_bad_ones_does():
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 1, (64, 100)).astype(np.float32)
    reference[3] *= 1e-6  # an all-but-zero output: any rounding turns its direction
    candidate = reference + rng.normal(0, 0.01, reference.shape).astype(np.float32)
    agreement = Agreement(["y"])
    agreement.add([reference], [candidate])
    [report] = agreement.reports()
    assert report.cosine_min < 0.5 and report.cosine_low > 0.999
    assert all(g.passed for g in _gates(report).values())
    bad = candidate.copy()
    bad[:8] = rng.normal(0, 1, (8, 100))  # an eighth of the samples unrelated to the reference
    agreement = Agreement(["y"])
    agreement.add([reference], [bad])
    gates = _gates(agreement.reports()[0])
    assert not gates["min-cosine-low"].passed and not gates["min-sqnr"].passed


def test_nan_or_inf_always_fails_and_scale_does_not_matter():
    rng = np.random.default_rng(1)
    reference = rng.normal(0, 1, (32, 10)).astype(np.float32)
    noise = rng.normal(0, 0.01, reference.shape).astype(np.float32)
    scaled = {}
    for scale in (1e-3, 1.0, 1e4):
        agreement = Agreement(["logits"])
        agreement.add([reference * scale], [(reference + noise) * scale])
        scaled[scale] = agreement.reports()[0]
    figures = {(round(r.cosine_mean, 6), round(r.sqnr_db, 2), r.top1_agreement) for r in scaled.values()}
    assert len(figures) == 1, scaled  # the same verdict at any scale; the absolute error is not
    assert scaled[1e4].max_abs_error > 1e6 * scaled[1e-3].max_abs_error
    broken = (reference + noise).copy()
    broken[5, 2] = np.nan
    agreement = Agreement(["logits"])
    agreement.add([reference], [broken])
    gates = _gates(agreement.reports()[0], "fp16")
    assert not gates["finite"].passed and gates["finite"].value == 1


def test_the_outlier_fixture_is_seeded():
    assert make_outlier_mlp.build().SerializeToString() == make_outlier_mlp.build().SerializeToString()
    assert {n.name for n in make_outlier_mlp.build().graph.node} >= {"block2.matmul", "block3.matmul", "head"}
    assert onnx.checker.check_model(make_outlier_mlp.build()) is None


def test_a_constant_output_is_measured_against_its_own_energy():
    reference = np.full((16, 4), 3.0, np.float32)  # no spread at all: a constant score
    agreement = Agreement(["score"])
    agreement.add([reference], [reference * (1 + 1e-4)])
    report = agreement.reports()[0]
    assert 70 < report.sqnr_db < 90 and all(g.passed for g in _gates(report, "fp16").values()), report
