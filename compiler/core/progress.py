"""Progress reports from stages that count work (samples), in the one shape every view takes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from compiler.core.records import Progress


def counter(phase: str, total: int, progress: Progress | None) -> Callable[[int], None]:
    """Turns "n more samples done" into (phase, done, total) progress reports, starting at 0."""
    done = 0
    if progress:
        progress(phase, 0, total)

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(phase, done, total)

    return advance


@contextmanager
def timed(phases: dict[str, float], phase: str) -> Iterator[None]:
    """Adds the block's wall-clock seconds to ``phases[phase]``: what a record reports each phase took."""
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[phase] = round(phases.get(phase, 0.0) + time.perf_counter() - started, 3)


def phase_summary(seconds: float, phases: dict[str, float]) -> str:
    """``12.3 s (quantize 8.1 s, build proof 1.2 s, ...)``: a record's time with its phases, for people."""
    parts = ", ".join(f"{phase} {spent:.1f} s" for phase, spent in phases.items())
    return f"{seconds:.1f} s" + (f" ({parts})" if parts else "")
