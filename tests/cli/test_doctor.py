"""`compile doctor`: what this machine can build and check, as JSON and as a table."""

from __future__ import annotations

import json
import os

import onnxruntime

from compiler.inspect.doctor import diagnose
from tests.support.cli import run_cli


def test_doctor_json():
    result = run_cli("doctor", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # the whole of stdout is one JSON document
    backends = {b["name"]: b for b in report["backends"]}
    assert set(backends) == {"tensorrt-rtx", "tensorrt"}
    assert backends["tensorrt-rtx"] == {"name": "tensorrt-rtx", "installed": True, "version": "1.7.1.116", "detail": ""}
    datacenter = backends["tensorrt"]
    assert datacenter["installed"] is False and datacenter["version"] is None
    assert "not installed" in datacenter["detail"]
    assert "pip install 'trt-compile[tensorrt]'" in datacenter["detail"]
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
    assert " no " in datacenter and "pip install 'trt-compile[tensorrt]'" in datacenter
    assert "GPUs" in out and "none (" in out and diagnose().gpu_detail in out
    assert "CPUExecutionProvider" in out
    assert f"onnxruntime {onnxruntime.__version__}" in out


def test_doctor_works_from_any_directory(tmp_path):
    result = run_cli("doctor", "--json", cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["backends"][0]["version"] == "1.7.1.116"
