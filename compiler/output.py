"""Rendering results: one JSON document for machines, Rich tables for people."""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

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
        view.add_row(*("" if cell is None else escape(str(cell)) for cell in row))
    return view


def status_text(status: str) -> str:
    colour = {"ok": "green", "failed": "red", "skipped": "yellow"}.get(status, "white")
    return f"[{colour}]{status}[/{colour}]"


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {message}", highlight=False)
