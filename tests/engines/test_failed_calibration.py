"""`compile build --calibration DIR` refuses a folder whose calibration failed its gates (issue 40): calibrate keeps
its verdict beside the record (verdict.json), build names the failed gate and the way out (exit 1), --allow-failed
builds from it anyway, and a calibration judged again that passes is built from."""

from __future__ import annotations

import json

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
