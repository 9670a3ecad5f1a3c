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


def test_doctor_reports_the_cache_the_driver_and_probes_stores_read_only(s3, tmp_path):
    cache = tmp_path / "cache"
    (cache / "engines" / "ab").mkdir(parents=True)
    (cache / "engines" / "ab" / "engine.plan").write_bytes(b"x" * 1000)
    (cache / "facts.json").write_bytes(b"{}")
    store = tmp_path / "store"
    missing = tmp_path / "no-store-here"
    env = {**os.environ, "COMPILE_CACHE_DIR": str(cache), "AWS_ACCESS_KEY_ID": "wrong-key-id-42"}
    env |= {"AWS_SECRET_ACCESS_KEY": "wrong-secret-value-7fe3", "AWS_ENDPOINT_URL": s3.endpoint}
    store.mkdir()
    done = run_cli("doctor", "--json", "--store", missing, "--remote-cache", "s3://cachebucket/team", env=env)
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cache"] == {"path": str(cache), "files": 2, "size_bytes": 1002, "complete": True}
    assert (report["driver"], report["cuda"]) == (None, None)  # no NVIDIA driver on this machine
    probed = {s["what"]: s for s in report["stores"]}
    assert probed["store"]["status"] == "unreachable" and "does not exist" in probed["store"]["detail"]
    assert not missing.exists()  # read-only: a probe creates nothing
    assert probed["remote cache"]["status"] == "unreachable"
    assert "wrong-secret-value" not in done.stdout + done.stderr
    unset = {k: v for k, v in env.items() if k not in ("COMPILE_STORE", "COMPILE_REMOTE_CACHE")}
    report = json.loads(run_cli("doctor", "--json", env=unset).stdout)
    assert [s["status"] for s in report["stores"]] == ["not configured", "not configured"]
    report = json.loads(run_cli("doctor", "--json", "--store", store, env=env).stdout)
    assert report["stores"][0] == {"what": "store", "uri": str(store), "status": "reachable", "detail": "0 releases"}
    table = run_cli("doctor", "--store", store, env=env).stdout
    assert "cache:" in table and "Stores (probed read-only)" in table and "0 releases" in table
