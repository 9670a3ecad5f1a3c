"""Every command's --help, held to a snapshot: the CLI's parameters are generated from the option groups'
declarations (compiler/core/flags.py), and a change of what a user reads must be a change someone meant.

    UPDATE_HELP=1 python -m pytest -q tests/cli/test_help.py   # after a deliberate change: rewrites the snapshots
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compiler.cli.app import app

SNAPSHOTS = Path(__file__).parent / "help"
COMMANDS = (
    "doctor",
    "skus",
    "inspect",
    "build",
    "calibrate",
    "check",
    "publish",
    "pull",
    "ls",
    "promote",
    "yank",
    "gc",
    "verify",
    "provenance",
    "export triton",
    "export rtx",
    "plan",
    "release",
    "report",
    "diff",
)


def help_text(command: str) -> str:
    """The help as a terminal 120 columns wide shows it, without colour."""
    result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "120", "NO_COLOR": "1"}, color=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_reads_as_its_snapshot(command):
    snapshot = SNAPSHOTS / f"{command.replace(' ', '-')}.txt"
    text = help_text(command)
    if os.environ.get("UPDATE_HELP"):
        snapshot.write_text(text)
    assert text == snapshot.read_text()


def test_every_command_has_a_snapshot():
    import typer

    group = typer.main.get_command(app)
    registered = set()
    for name, command in group.commands.items():
        subcommands = getattr(command, "commands", None)  # a group (export)
        registered |= {f"{name} {sub}" for sub in subcommands} if subcommands else {name}
    assert registered == set(COMMANDS)
