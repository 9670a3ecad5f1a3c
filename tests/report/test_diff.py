"""`compile diff A B` (issue 44) through the real CLI: two releases of identical builds show no change; a release
calibrated again with another method shows the figures that moved; an injected accuracy drop is a regression that
`--fail-on-regression` turns into exit 1, and the report page of B against A shows it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.pipeline.test_release import _pipeline, _release
from tests.support.cli import assert_clean_error, run_cli


def _diff(*args) -> dict:
    result = run_cli("diff", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_release_against_itself_and_its_work_folder_has_no_change(released: Path) -> None:
    store = released.parent / "artifacts"
    assert _diff("digits@1.0.0", "digits@1.0.0", "--store", store)["changes"] == []
    assert _diff(released, "digits@1.0.0", "--store", store)["changes"] == []
    shown = run_cli("diff", "digits@1.0.0", released, "--store", store)
    assert shown.exit_code == 0 and "no change" in shown.stdout


def test_a_release_calibrated_again_shows_the_figures_that_moved(released: Path, tmp_path: Path) -> None:
    calibration = yaml.safe_load(_pipeline(tmp_path).read_text())["calibration"]
    pipeline = _pipeline(tmp_path, calibration={**calibration, "method": "entropy"})
    again = _release(pipeline, tmp_path / "work", "--store", released.parent / "artifacts-entropy")
    assert again.exit_code == 0, again.stderr
    changes = _diff(released, tmp_path / "work")["changes"]
    moved = {(c["where"], c["what"]) for c in changes}
    assert ("rtx-4090/int8 logits", "min-sqnr") in moved
    assert all(c["where"].split()[0].endswith("int8") for c in changes if c["what"].startswith("min-"))


def test_an_accuracy_drop_is_a_regression_that_fails_the_gate(released: Path, tmp_path: Path) -> None:
    worse = tmp_path / "worse"
    shutil.copytree(released, worse)
    check = worse / "builds" / "rtx-4090" / "check.json"
    record = json.loads(check.read_text())
    [engine] = [e for e in record["engines"] if e["precision"] == "int8"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    accuracy["figures"]["logits"]["sqnr_db"] -= 5.0  # injected: 5 dB worse, still above the 12 dB gate
    check.write_text(json.dumps(record))
    result = _diff(released, worse)
    [regression] = [c for c in result["changes"] if c["regression"]]
    assert (regression["where"], regression["what"]) == ("rtx-4090/int8 logits", "min-sqnr")
    assert result["changes"][0] == regression  # regressions first
    failed = run_cli("diff", released, worse, "--fail-on-regression")
    assert_clean_error(failed, 1, "1 regression(s)", "rtx-4090/int8 logits min-sqnr")
    page = tmp_path / "page.html"
    assert run_cli("report", worse, "--previous", released, "--out", page).exit_code == 0
    assert "1 regression(s)" in page.read_text()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("no-such-thing", "digits@1.0.0"), "neither a folder nor NAME@VERSION"),
        (("digits@9.9.9", "digits@1.0.0"), "9.9.9"),
    ],
)
def test_what_cannot_be_compared_is_refused(released: Path, args, fragment) -> None:
    result = run_cli("diff", *args, "--store", released.parent / "artifacts")
    assert_clean_error(result, 2, fragment)


def test_the_next_version_is_reported_against_the_one_before(released: Path, tmp_path: Path) -> None:
    """A release's page and job summary compare it with the newest earlier version in its store."""
    pipeline = _pipeline(tmp_path, release={"name": "digits", "version": "1.0.1"})
    store = released.parent / "artifacts"
    result = _release(pipeline, tmp_path / "work", "--store", store)
    assert result.exit_code == 0, result.stderr
    page = (tmp_path / "work" / "release-report.html").read_text()
    assert "Against digits@1.0.0: no change" in page  # the same builds under a new version
    summary = (tmp_path / "work" / "release-report.md").read_text()
    assert "Against digits@1.0.0: 0 regression(s)" in summary and "| rtx-4090/int8 | " in summary
    assert "Full report: `release-report.html`" in summary
