"""Rendering results: one JSON document for machines, Rich tables for people."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

console = Console(soft_wrap=False, highlight=False)
err_console = Console(stderr=True)


def emit_json(result: BaseModel | dict[str, Any] | list[Any]) -> None:
    import json

    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    view = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        view.add_column(column, overflow="fold")
    for row in rows:
        view.add_row(*(cell if isinstance(cell, Text) else escape("" if cell is None else str(cell)) for cell in row))
    return view


def status_text(status: str) -> Text:
    return Text(status, style={"ok": "green", "failed": "red", "skipped": "yellow"}.get(status, "white"))


@contextmanager
def build_progress(jobs) -> Iterator:
    """One progress row per build, fed by TensorRT's progress monitor: (job, phase, done, total)."""
    columns = (TextColumn("{task.description:<22}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[phase]}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=False) as bars:
        tasks = [bars.add_task(f"{job.sku} {job.precision}", total=None, phase="waiting") for job in jobs]

        def update(index: int, phase: str, done: int, total: int) -> None:
            bars.update(tasks[index], completed=done, total=total or None, phase=phase)

        yield update


@contextmanager
def sample_progress() -> Iterator:
    """One progress row per phase (calibrate, held-out), added when the phase first reports (phase, done, total)."""
    columns = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TextColumn("samples"),
               TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bars:
        tasks: dict[str, int] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bars.add_task(phase, total=total)
            bars.update(tasks[phase], completed=done, total=total)

        yield update
