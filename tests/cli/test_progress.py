"""Progress people and CI can read: bars with a rate and the time left on a terminal; on a log that is not one (a
CI job), a line as each phase starts and a heartbeat line while any runs, with its count, rate and time left."""

from __future__ import annotations

import io
import os
import time

import pytest
from rich.console import Console

from compiler.cli import render
from compiler.cli.heartbeat import Heartbeat, clock
from tests.support.digits import run_calibrate


class _Log:
    """A console that is not a terminal, keeping what was printed."""

    is_terminal = False

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, **_) -> None:
        self.lines.append(text)


@pytest.fixture
def beat(monkeypatch) -> Heartbeat:
    """A heartbeat every 0.05 s into a log that is not a terminal."""
    monkeypatch.setenv("COMPILE_HEARTBEAT_SECONDS", "0.05")
    return Heartbeat(_Log(), "samples")


def test_a_running_phase_gets_heartbeat_lines_with_its_count_rate_and_time_left(beat):
    log = beat.console
    beat.note("calibrate", 0, 100)
    time.sleep(0.1)
    beat.note("calibrate", 40, 100)
    time.sleep(0.3)
    beat.stop()
    beats = [line for line in log.lines if line.startswith("still working: calibrate 40/100 samples (")]
    assert beats and " left, " in beats[-1] and "/s" in beats[-1]


def test_finished_phases_and_terminals_get_no_heartbeat(beat):
    log = beat.console
    beat.note("held-out", 32, 32)
    time.sleep(0.2)
    beat.stop()
    assert log.lines == []
    terminal = _Log()
    terminal.is_terminal = True
    Heartbeat(terminal, "samples").note("calibrate", 1, 2)
    assert terminal.lines == []
    assert (clock(65), clock(3725)) == ("1:05", "1:02:05")


def test_a_calibration_in_ci_gets_heartbeat_lines_naming_its_phase(tmp_path):
    # --no-reuse: a calibration this session's cache already holds would be taken in a blink, with no phase to beat;
    # a beat every millisecond: the digits' phases can end within 50 ms on an idle machine
    done = run_calibrate(tmp_path / "out", "--no-reuse", env={**os.environ, "COMPILE_HEARTBEAT_SECONDS": "0.001"})
    assert done.exit_code == 0, done.stderr
    beats = [line for line in done.stderr.splitlines() if line.startswith("still working: ")]
    assert beats and any(" samples (" in line and "/s" in line for line in beats), done.stderr
    ended = [line.split(":")[0] for line in done.stderr.splitlines() if " samples done in " in line]
    assert {"calibrate", "build proof", "sensitivity", "held-out"} <= set(ended), done.stderr  # a line per phase
    again = run_calibrate(tmp_path / "again", "--no-reuse", env={**os.environ, "COMPILE_HEARTBEAT_SECONDS": "600"})
    assert again.exit_code == 0 and "still working" not in again.stderr, again.stderr  # shorter: no heartbeat


def test_bars_on_a_terminal_show_the_rate_and_the_time_left(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(render.err_console, "_console", Console(file=screen, force_terminal=True, width=140))
    with render.phase_progress() as update:
        for done in range(0, 101, 10):
            update("calibrate", done, 200)
            time.sleep(0.05)
    assert "/s" in screen.getvalue() and "calibrate" in screen.getvalue()
