"""`compile doctor`: what this machine can build and check, as JSON and as a table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import onnxruntime
import pytest

from compiler.doctor import diagnose
from tests.conftest import files_of_at_most, run_cli


def test_doctor_json():
    result = run_cli("doctor", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # the whole of stdout is one JSON document
    backends = {b["name"]: b for b in report["backends"]}
    assert set(backends) == {"tensorrt-rtx", "tensorrt"}
    assert backends["tensorrt-rtx"] == {"name": "tensorrt-rtx", "installed": True, "version": "1.7.1.116",
                                        "detail": ""}
    datacenter = backends["tensorrt"]
    assert datacenter["installed"] is False and datacenter["version"] is None
    assert "not installed" in datacenter["detail"]
    assert "pip install 'compile[tensorrt]'" in datacenter["detail"]
    # No GPU here, and doctor says why instead of listing nothing silently.
    assert report["gpus"] == []
    assert report["gpu_detail"]
    assert "CPUExecutionProvider" in report["onnxruntime_providers"]
    assert report["onnxruntime_providers"] == onnxruntime.get_available_providers()
    assert report["onnxruntime"] == onnxruntime.__version__
    assert report["onnx"].count(".") >= 2 and report["polygraphy"]
    assert report["compile_version"] == "0.1.0"
    assert result.stderr.strip() == ""


def test_doctor_table_mentions_the_same_facts():
    result = run_cli("doctor", env={**os.environ, "COLUMNS": "250"})
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    rtx = next(line for line in out.splitlines() if "tensorrt-rtx" in line)
    assert "yes" in rtx and "1.7.1.116" in rtx
    datacenter = next(line for line in out.splitlines() if "tensorrt " in line and "tensorrt-rtx" not in line)
    assert " no " in datacenter and "pip install 'compile[tensorrt]'" in datacenter
    assert "GPUs" in out and "none (" in out and diagnose().gpu_detail in out
    assert "CPUExecutionProvider" in out
    assert f"onnxruntime {onnxruntime.__version__}" in out


def test_doctor_works_from_any_directory(tmp_path):
    result = run_cli("doctor", "--json", cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["backends"][0]["version"] == "1.7.1.116"


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_whose_reader_went_away_ends_quietly_as_sigpipe_would(json_flag):
    """`compile doctor | head -1`: 141 (128 + SIGPIPE), as `yes | head -1` gives, not the contract's 1 (a failed
    check) and no error line; the reader here is gone before anything is written."""
    process = subprocess.Popen([sys.executable, "-m", "compiler", "doctor", *json_flag], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait() == 128 + signal.SIGPIPE
    assert stderr == b""


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_cut_short_by_a_full_disk_fails_with_one_error_line(tmp_path, digits_model, json_flag):
    """`compile inspect --json > report.json` on a full disk must not exit 0 with the report cut short. The
    report (1.5-2 KiB) is still in Python's buffer when the command ends, so the failure comes at the last flush."""
    with open(tmp_path / "report", "wb") as report:
        done = subprocess.run([sys.executable, "-m", "compiler", "inspect", str(digits_model), *json_flag],
                              stdout=report, stderr=subprocess.PIPE, text=True, preexec_fn=files_of_at_most(1))
    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "File too large" in lines[0], done.stderr
    if json_flag:
        assert lines[0].startswith("error: standard output: ")


@pytest.mark.parametrize(("signum", "code", "line"), [(signal.SIGTERM, 143, "error: terminated"),
                                                      (signal.SIGINT, 130, "error: interrupted")])
def test_a_stop_that_a_library_turns_into_its_own_error_still_ends_as_the_stop(signum, code, line):
    """onnx's and onnxruntime's wrappers, or an extension module's import cut short, turn the stop into an error of
    their own (seen: exit 2 'ONNX checker rejected the model: terminated', exit 3 'backend … not installed
    (initialization failed)'); the run still ends as the stop the user asked for."""
    script = f"""
import os, time
from compiler import cli
from compiler.errors import InvalidInput

@cli.app.command()
def wrapped():
    try:
        os.kill(os.getpid(), {int(signum)})
        time.sleep(10)
    except BaseException as exc:
        raise InvalidInput(f"onnxruntime failed while calibrating: {{exc!r}}") from None

@cli.app.command()
def other():
    pass

cli.main()
"""
    done = subprocess.run([sys.executable, "-c", script, "wrapped"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (code, line + "\n", "")
