"""A verdict on too few samples is neither pass nor fail (issue 41): Basic Pitch's 12 windows left 2 held out, and
`--fallback auto` passed on them. Below `--min-samples` (5) calibrate and check say "not enough held-out data",
exit 1; with enough samples, or `--min-samples 0`, the figures decide as before."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import first_digits, run_calibrate

NOT_ENOUGH = "not enough held-out data"


@pytest.fixture(scope="module")
def few(tmp_path_factory):
    """12 digits: 2 held out at the default --holdout 0.2."""
    return first_digits(tmp_path_factory.mktemp("few") / "few.npz", 12)


def test_calibrate_on_two_held_out_samples_says_not_enough_data_and_passes_with_enough(tmp_path, few):
    done = run_calibrate(tmp_path / "few", "--json", data=few)
    line = assert_clean_error(done, 1, NOT_ENOUGH)
    assert "2 sample(s) judged, fewer than --min-samples 5" in line
    [gate] = [g for g in json.loads(done.stdout)["gates"] if g["name"] == "min-samples"]
    assert (gate["value"], gate["threshold"], gate["passed"]) == (2, 5, False)
    accepted = run_calibrate(tmp_path / "accepted", "--json", "--min-samples", "0", data=few)
    assert NOT_ENOUGH not in accepted.stderr
    assert all(g["name"] != "min-samples" for g in json.loads(accepted.stdout)["gates"])
    enough = run_calibrate(tmp_path / "enough", "--json", "--holdout", "5", data=few)
    assert enough.exit_code in (0, 1) and NOT_ENOUGH not in enough.stderr
    [gate] = [g for g in json.loads(enough.stdout)["gates"] if g["name"] == "min-samples"]
    assert gate["passed"] and gate["value"] == 5


def test_check_on_three_samples_says_not_enough_data(built_digits, few, tmp_path):
    import shutil

    build = tmp_path / "build"  # a copy: check writes check.json and golden.npz into the folder it judges
    shutil.copytree(built_digits(("rtx-4090",), ("fp16",)), build)
    done = run_cli("check", build, "--data", few, "--samples", "3", "--no-lint", "--json")
    assert done.exit_code == 1, done.stderr
    [engine] = json.loads(done.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    assert accuracy["status"] == "failed" and NOT_ENOUGH in accuracy["summary"]
    assert "3 sample(s) judged, fewer than --min-samples 5" in accuracy["summary"]
    enough = run_cli("check", build, "--data", few, "--samples", "12", "--no-lint", "--json")
    [engine] = json.loads(enough.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    assert accuracy["status"] == "ok", accuracy["summary"]
