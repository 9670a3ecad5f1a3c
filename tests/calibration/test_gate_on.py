"""`--gate-on lower-bound` holds a figure's 95 % interval, not the figure alone (issue 41): a threshold inside the
interval over the held-out samples is "not enough held-out data to tell" (exit 1) in calibrate and check alike, the
default (`estimate`) holds the figure itself, and a threshold above the whole interval fails either way. The
thresholds are placed from the figures measured in the same test, so the test holds on any machine."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import first_digits, run_calibrate

TO_TELL = "not enough held-out data to tell"


@pytest.fixture(scope="module")
def thirty(tmp_path_factory):
    """30 digits: 6 held out at the default --holdout 0.2, enough for a verdict, few enough for a wide interval."""
    return first_digits(tmp_path_factory.mktemp("thirty") / "thirty.npz", 30)


def _inside(value: float, interval: list[float]) -> str:
    """A threshold between the interval's lower end and the figure."""
    low = interval[0]
    assert low < value, (low, value)  # a few samples of the digits CNN: the interval has width
    return f"{(low + value) / 2:.4f}"


def test_calibrate_says_not_enough_data_when_the_interval_holds_the_threshold(tmp_path, thirty):
    first = run_calibrate(tmp_path / "out", "--json", "--precision", "int8", data=thirty)
    assert first.exit_code == 0, first.stderr
    [sqnr] = [g for g in json.loads(first.stdout)["gates"] if g["name"] == "min-sqnr"]
    threshold = _inside(sqnr["value"], sqnr["interval"])
    gated = ("--precision", "int8", "--min-sqnr", threshold)
    bound = ("--gate-on", "lower-bound")
    unsure = run_calibrate(tmp_path / "out", *gated, *bound, "--json", data=thirty)  # reused, judged again
    line = assert_clean_error(unsure, 1, TO_TELL, "SQNR", "--gate-on estimate")  # what would hold the figure
    assert "95 % interval over the held-out samples" in line and "below --min-sqnr" not in line
    [gate] = [g for g in json.loads(unsure.stdout)["gates"] if g["name"] == "min-sqnr"]
    assert gate["passed"] is False and gate["value"] >= gate["threshold"] > gate["interval"][0]
    shown = run_calibrate(tmp_path / "out", *gated, *bound, data=thirty)
    assert "not enough data" in shown.stdout  # the gates table's status
    estimate = run_calibrate(tmp_path / "out", *gated, data=thirty)  # the default holds the figure
    assert estimate.exit_code == 0, estimate.stderr
    above = f"{sqnr['interval'][1] + 1:.4f}"
    failed = run_calibrate(tmp_path / "out", "--precision", "int8", "--min-sqnr", above, *bound, data=thirty)
    line = assert_clean_error(failed, 1, "min-sqnr")
    assert TO_TELL not in line


def test_check_gates_on_the_same_bound(built_digits, thirty, tmp_path):
    build = tmp_path / "build"  # a copy: check writes check.json and golden.npz into the folder it judges
    shutil.copytree(built_digits(("rtx-4090",), ("fp16",)), build)
    args = ("check", build, "--data", thirty, "--no-lint", "--json")
    first = run_cli(*args)
    assert first.exit_code == 0, first.stdout[-2000:] + first.stderr
    [engine] = json.loads(first.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    [figures] = accuracy["figures"].values()
    threshold = _inside(figures["sqnr_db"], figures["intervals"]["sqnr_db"])
    unsure = run_cli(*args, "--min-sqnr", threshold, "--gate-on", "lower-bound")
    assert unsure.exit_code == 1, unsure.stderr
    [engine] = json.loads(unsure.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    assert accuracy["status"] == "failed" and TO_TELL in accuracy["summary"], accuracy["summary"]
    estimate = run_cli(*args, "--min-sqnr", threshold)  # the default holds the figure
    assert estimate.exit_code == 0, estimate.stdout[-2000:]


def test_a_gate_on_value_other_than_the_two_is_refused(tmp_path, thirty):
    assert_clean_error(run_calibrate(tmp_path / "out", "--gate-on", "upper", data=thirty), 2, "--gate-on")
