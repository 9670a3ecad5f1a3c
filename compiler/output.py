"""Rendering results: one JSON document for machines, Rich tables for people."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from compiler.records import Progress


class _LazyConsole:
    """A Rich console created on first use: `--json` runs (CI) never pay Rich's import time."""

    def __init__(self, **options: Any) -> None:
        self._options, self._console = options, None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
            if not self._console.is_terminal and "COLUMNS" not in os.environ:
                self._console.width = 512  # a CI log: Rich's 80 columns would fold paths and errors mid-word
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        """Rich's print, each string made :func:`printable` first: what we print is one line per string, and a name
        from an input file (a model's input, a profile, a path) cannot add lines or reach the terminal as escape
        codes. Tables escape their cells themselves (:func:`table`)."""
        self.get().print(*(printable(o) if isinstance(o, str) else o for o in objects), **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (from an input file: a name, a path, a library's message) made safe to print on one line.

    Line breaks and every other control character are written as escapes (``\\n``, ``\\r``, ``\\t``,
    ``\\x1b``, ``\\x7f``, ``\\x85``...): C0, DEL and C1 controls, Unicode's line and paragraph separators
    (``str.splitlines`` breaks there), bidirectional overrides (they reorder what a terminal shows) and lone
    surrogates (undecodable bytes of a file name; a strict stream cannot encode them). So a name holding
    ``\\nerror: ...`` cannot forge a second error line and an ESC cannot drive the terminal. Other text,
    backslashes included, is left as it is.
    """
    return _UNPRINTABLE.sub(_escape, str(text))


def markdown_cell(text: object) -> str:
    """``text`` made safe for one cell of a Markdown table (a job summary): printable, its pipes escaped."""
    return printable(text).replace("|", "\\|")


console = _LazyConsole(soft_wrap=False, highlight=False)
err_console = _LazyConsole(stderr=True)


def emit_json(result: BaseModel | dict[str, Any] | list[Any]) -> None:
    """Write the document straight to stdout's file until every byte is out: Python's buffered stdout drops
    the rest of a short write without a word (a disk filling up under `> report.json`), which would leave a
    cut-short document behind a successful exit."""
    import json

    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    text = json.dumps(data, indent=2) + "\n"
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stdout (main() called from Python)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    unwritten = memoryview(text.encode())
    try:
        while unwritten:
            unwritten = unwritten[os.write(fd, unwritten):]
    except OSError as exc:  # named, for the error line
        raise OSError(exc.errno, exc.strerror, "standard output") from None


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text


    view = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        view.add_column(column, overflow="fold")
    for row in rows:
        view.add_row(*(cell if isinstance(cell, Text) else escape(printable("" if cell is None else cell))
                       for cell in row))
    return view


def human_size(size: int) -> str:
    """``1.2 MiB``, ``39.5 KiB``, ``512 B``: sizes as a person reads them (never ``0.0 MiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} B"


def gate_figure(gate: str, value: float) -> str:
    """A gate's value or threshold in the unit the accuracy table shows it: top-1 agreement as a percentage."""
    return f"{value:.2%}" if gate == "min-top1" else f"{value:.5g}"


def status_text(status: str) -> Text:
    from rich.text import Text


    styles = {"ok": "green", "failed": "red", "skipped": "yellow", "cancelled": "magenta"}
    return Text(status, style=styles.get(status, "white"))


@contextmanager
def build_progress(jobs) -> Iterator:
    """One progress row per build, fed by TensorRT's progress monitor: (job, phase, done, total)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<22}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[phase]}"), TimeElapsedColumn())
    console = err_console.get()
    # Not a terminal (a CI log): no bars, which would show only at the end, but a line as each target ends,
    # so a long matrix shows signs of life
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bars:
        tasks = [bars.add_task(f"{job.sku} {job.precision}", total=None, phase="waiting") for job in jobs]

        def update(index: int, phase: str, done: int, total: int) -> None:
            bars.update(tasks[index], completed=done, total=total or None, phase=phase)
            if not console.is_terminal and phase.split(" ")[0] in ("ok", "failed", "cancelled"):
                console.print(f"{jobs[index].sku} {jobs[index].precision}: {phase}", highlight=False)

        yield update


@contextmanager
def phase_progress(unit: str = "samples") -> Iterator:
    """One progress row per phase (calibrate, held-out; upload), added when the phase first reports (phase, done,
    total), counting ``unit``.

    The display starts with the first report: a run that fails before (or reuses earlier work) prints nothing.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
               TimeElapsedColumn())
    console = err_console.get()
    bars = Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
    tasks: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        if not tasks:
            bars.start()
        if phase not in tasks:
            tasks[phase] = bars.add_task(phase, total=total)
        bars.update(tasks[phase], completed=done, total=total)

    try:
        yield update
    finally:
        if tasks:
            bars.stop()


def append_step_summary(markdown: str) -> None:
    """Add a report to the GitHub Actions job summary, when running in one."""
    import os

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


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
