"""What every command does the same way: output whose reader goes away, output a full disk cuts short, and a stop
signal that a library turns into an error of its own."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.support.cli import files_of_at_most


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_whose_reader_went_away_ends_quietly_as_sigpipe_would(json_flag):
    """`compile doctor | head -1`: 141 (128 + SIGPIPE), as `yes | head -1` gives, not the contract's 1 (a failed
    check) and no error line; the reader here is gone before anything is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", "doctor", *json_flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait() == 128 + signal.SIGPIPE
    assert stderr == b""


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_cut_short_by_a_full_disk_fails_with_one_error_line(tmp_path, digits_model, json_flag):
    """`compile inspect --json > report.json` on a full disk must not exit 0 with the report cut short. The
    report (1.5-2 KiB) is still in Python's buffer when the command ends, so the failure comes at the last flush."""
    with open(tmp_path / "report", "wb") as report:
        done = subprocess.run(
            [sys.executable, "-m", "compiler", "inspect", str(digits_model), *json_flag],
            stdout=report,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=files_of_at_most(1),
        )
    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "File too large" in lines[0], done.stderr
    if json_flag:
        assert lines[0].startswith("error: standard output: ")


@pytest.mark.parametrize(
    ("signum", "code", "line"), [(signal.SIGTERM, 143, "error: terminated"), (signal.SIGINT, 130, "error: interrupted")]
)
def test_a_stop_that_a_library_turns_into_its_own_error_still_ends_as_the_stop(signum, code, line):
    """onnx's and onnxruntime's wrappers, or an extension module's import cut short, turn the stop into an error of
    their own (seen: exit 2 'ONNX checker rejected the model: terminated', exit 3 'backend … not installed
    (initialization failed)'); the run still ends as the stop the user asked for."""
    script = f"""
import os, time
from compiler.cli.app import app
from compiler.cli.main import main
from compiler.core.errors import InvalidInput

@app.command()
def wrapped():
    try:
        os.kill(os.getpid(), {int(signum)})
        time.sleep(10)
    except BaseException as exc:
        raise InvalidInput(f"onnxruntime failed while calibrating: {{exc!r}}") from None

@app.command()
def other():
    pass

main()
"""
    done = subprocess.run([sys.executable, "-c", script, "wrapped"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (code, line + "\n", "")


@pytest.mark.parametrize("debug", [False, True])
def test_a_bug_exits_70_not_the_exit_code_of_a_failed_gate(debug):
    """An exception no stage expects is ours to fix: exit 70 (EX_SOFTWARE) and one `error: internal error` line, so
    a CI job can tell a bug from a verdict (1); --debug adds the traceback."""
    script = """
from compiler.cli.app import app
from compiler.cli.main import main

@app.command()
def buggy():
    {}["missing"]

@app.command()
def other():
    pass

main()
"""
    args = ["--debug", "buggy"] if debug else ["buggy"]
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 70, done.stderr
    assert errors == ["error: internal error: KeyError: 'missing'; rerun with --debug and report it"]
    assert ("Traceback" in done.stderr) is debug and done.stdout == ""
