"""Signs of life where progress bars do not show: on a log that is not a terminal (a CI job), a heartbeat line at
least every ``$COMPILE_HEARTBEAT_SECONDS`` (30) naming every running phase with its count, rate and time left, and
a line as each phase that ran that long ends, so a long calibration or build never looks hung. A run shorter than
that prints nothing more than before: its stderr stays the one ``error:`` line a failure gets."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

HEARTBEAT_ENV = "COMPILE_HEARTBEAT_SECONDS"
DEFAULT_SECONDS = 30.0


def interval() -> float:
    """Seconds between heartbeat lines ($COMPILE_HEARTBEAT_SECONDS, a positive number; 30 otherwise)."""
    try:
        seconds = float(os.environ.get(HEARTBEAT_ENV, DEFAULT_SECONDS))
    except ValueError:
        return DEFAULT_SECONDS
    return seconds if 0 < seconds < 86400 else DEFAULT_SECONDS


def clock(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


class Heartbeat:
    """Phases as they report (phase, done, total), printed to ``console`` as one line every :func:`interval` seconds
    while any runs. A no-op on a terminal, where the bars show the same."""

    def __init__(self, console: Any, unit: str) -> None:
        self.console, self.unit = console, unit
        self.enabled = not console.is_terminal
        self.phases: dict[str, tuple[int, int | None, float]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def note(self, phase: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        with self._lock:
            before = self.phases.get(phase, (0, None, time.monotonic()))
            started = before[2]
            self.phases[phase] = (done, total, started)
        elapsed = time.monotonic() - started
        if total and done >= total and not (before[1] and before[0] >= before[1]) and elapsed >= interval():
            rate = f", {done / max(elapsed, 1e-9):.1f}/s" if done > 1 else ""
            self.console.print(f"{phase}: {done}/{total} {self.unit} done in {clock(elapsed)}{rate}", highlight=False)
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()

    def line(self) -> str:
        """``still working: calibrate 40/128 samples (12.0/s, 0:07 left), held-out 0/32 samples``."""
        parts = []
        with self._lock:
            phases = dict(self.phases)
        for phase, (done, total, started) in phases.items():
            if total and done >= total:
                continue
            elapsed = max(time.monotonic() - started, 1e-9)
            rate = done / elapsed
            counted = f"{done}/{total}" if total else f"{done}"
            left = f", {clock((total - done) / rate)} left" if total and rate > 0 else ""
            parts.append(f"{phase} {counted} {self.unit} ({rate:.1f}/s{left}, {clock(elapsed)} in)")
        return "still working: " + ", ".join(parts) if parts else ""

    def _beat(self) -> None:
        while not self._stop.wait(interval()):
            text = self.line()
            if text:
                self.console.print(text, highlight=False)

    def stop(self) -> None:
        self._stop.set()
