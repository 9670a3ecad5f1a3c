"""Progress reports from stages that count work (samples), in the one shape every view takes."""

from __future__ import annotations

from collections.abc import Callable

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
