"""`compile build --calibration DIR` refuses a folder whose calibration failed its gates (issue 40): calibrate keeps
its verdict beside the record (verdict.json), build names the failed gate and the way out (exit 1), --allow-failed
builds from it anyway, and a calibration judged again that passes is built from."""

from __future__ import annotations

import json

from tests.fixtures import make_outlier_mlp
from tests.support.cli import assert_clean_error
from tests.support.digits import run_build, run_calibrate


def test_a_failed_calibration_is_refused_by_build_unless_allowed(tmp_path):
    folder = tmp_path / "cal"
    failed = run_calibrate(folder, "--min-cosine", "0.9999999")
    assert failed.exit_code == 1, failed.stderr
    verdict = json.loads((folder / "verdict.json").read_text())
    assert verdict["passed"] is False and "below --min-cosine 0.9999999" in verdict["failed"][0]
    refused = run_build(tmp_path / "refused", ("rtx-4090",), ("int8",), "--calibration", folder)
    assert_clean_error(refused, 1, f"--calibration {folder}: its calibration failed its accuracy gates",
                       "below --min-cosine 0.9999999", "--allow-failed")  # fmt: skip
    assert not (tmp_path / "refused" / "rtx-4090" / "int8" / "engine.plan").exists()
    allowed = run_build(tmp_path / "allowed", ("rtx-4090",), ("int8",), "--calibration", folder, "--allow-failed")
    assert allowed.exit_code == 0, allowed.stderr
    again = run_calibrate(folder)  # the same calibration, judged at the default gates: it passes
    assert again.exit_code == 0, again.stderr
    assert json.loads((folder / "verdict.json").read_text()) == {"passed": True, "failed": []}
    built = run_build(tmp_path / "built", ("rtx-4090",), ("int8",), "--calibration", folder)
    assert built.exit_code == 0, built.stderr


def test_a_verdict_that_is_not_ours_is_refused(tmp_path):
    folder = tmp_path / "cal"
    assert run_calibrate(folder).exit_code == 0
    (folder / "verdict.json").write_text('{"passed": "maybe"}')
    refused = run_build(tmp_path / "out", ("rtx-4090",), ("int8",), "--calibration", folder)
    assert_clean_error(refused, 2, "verdict.json: not a verdict of compile calibrate")


def test_a_verdict_that_failed_without_naming_a_gate_is_still_refused(tmp_path):
    folder = tmp_path / "cal"
    assert run_calibrate(folder).exit_code == 0
    (folder / "verdict.json").write_text('{"passed": false, "failed": []}')
    refused = run_build(tmp_path / "out", ("rtx-4090",), ("int8",), "--calibration", folder)
    assert_clean_error(refused, 1, "its calibration failed its accuracy gates (a gate it does not name)")


def test_build_data_refuses_a_calibration_that_failed_its_gates_unless_allowed(tmp_path):
    model, data = make_outlier_mlp.save(tmp_path / "mlp.onnx")  # int8 per-tensor cannot hold its outlier channel
    profiles = make_outlier_mlp.profiles(tmp_path / "profiles.yaml")
    args = ("rtx-4090",), ("fp32", "int8"), "--data", data, "--cache-dir", tmp_path / "cache"
    refused = run_build(tmp_path / "refused", *args, "--json", model=model, profiles=profiles)
    assert_clean_error(refused, 1, "1 of 2 builds failed", f"--data {data} (int8): its calibration failed its accuracy "
                       "gates", "--allow-failed")  # fmt: skip
    targets = {t["precision"]: t for t in json.loads(refused.stdout)["targets"]}  # the report, the other target built
    assert targets["fp32"]["status"] == "ok" and targets["int8"]["status"] == "failed"
    assert "its calibration failed its accuracy gates" in targets["int8"]["errors"][0]
    assert not (tmp_path / "refused" / "rtx-4090" / "int8" / "engine.plan").exists()
    allowed = run_build(tmp_path / "allowed", *args, "--allow-failed", model=model, profiles=profiles)
    assert allowed.exit_code == 0, allowed.stderr  # the cached calibration, built as asked
    assert (tmp_path / "allowed" / "rtx-4090" / "int8" / "engine.plan").is_file()
