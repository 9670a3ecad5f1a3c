"""Shell completion (issue 43, footgun 4): `--show-completion SHELL` prints the script a shell sources, and a SKU
option completes from the catalog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli

COMPILE = Path(sys.executable).with_name("compile")  # the entry point pip installed: what a shell completes


def complete(words: str) -> list[str]:
    """What bash completion offers for the last word of ``words`` (Click's protocol, as the sourced script asks)."""
    env = {**os.environ, "_COMPILE_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    done = subprocess.run([COMPILE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_is_printed_for_each_shell(shell: str) -> None:
    """Typer's own switch makes the option take the shell named: otherwise it detects the shell from the parent
    processes, and a test run whose launching shell has exited (a background job) has none."""
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    result = run_cli("--show-completion", shell, env=env)
    assert result.exit_code == 0, result.stderr
    assert "_COMPILE_COMPLETE" in result.stdout


def test_a_sku_completes_from_the_catalog() -> None:
    assert complete("compile build m.onnx --sku rtx-4") == ["rtx-4090"]
    assert complete("compile pull digits@1.0.0 --sku h1") == ["h100"]
    assert set(complete("compile build m.onnx --sku ")) >= {"rtx-4090", "rtx-3090", "h100"}
    assert complete("compile build m.onnx --sku nothing-like-it") == []


def test_commands_complete() -> None:
    assert {"calibrate", "check"} <= set(complete("compile c"))
