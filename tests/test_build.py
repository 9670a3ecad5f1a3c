"""compile build on the trained digits CNN with real TensorRT-RTX builds."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

import compiler.core.files
import compiler.engines
from compiler.backends import load_backend
from compiler.backends.tensorrt import DatacenterTensorRTBackend
from compiler.core.errors import EnvironmentProblem, Interrupted, InvalidInput, stop_signals_held
from compiler.engines import BuildOptions, build_engines, execute_builds, plan_builds, run_job
from compiler.engines.cache import ENGINE_FILES, BuildCache
from tests.conftest import EXAMPLES, CliResult, assert_clean_error, files_of_at_most, run_cli
from tests.onnx_files import save_model
from tests.synthetic import resnet

CC_BITS = {"7.5": 0x1, "8.0": 0x2, "8.6": 0x4, "8.9": 0x8, "12.0": 0x10, "12.1": 0x20}
SKUS = {"rtx-4090": "8.9", "rtx-3090": "8.6"}
PRECISIONS = ("fp32", "fp16", "int8")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def int8_calibration(workspace, digits_model, digits_data) -> Path:
    out = workspace / "calibration-int8"
    result = run_cli("calibrate", digits_model, "--data", digits_data, "--out", out, "--precision", "int8",
                     "--json")
    assert result.exit_code == 0, result.stderr
    return out


def build_args(model, profiles, out, cache, calibration, skus=tuple(SKUS), precisions=PRECISIONS):
    args = ["build", model, "--profiles", profiles, "--out", out, "--cache-dir", cache, "--json"]
    for sku in skus:
        args += ["--sku", sku]
    for precision in precisions:
        args += ["--precision", precision]
    return [*args, "--calibration", calibration]


@pytest.fixture(scope="module")
def matrix(workspace, digits_model, digits_profiles, int8_calibration):
    """Two SKUs x fp32/fp16/int8 with the two profiles of profiles/digits.yaml, built cold."""
    out, cache = workspace / "engines", workspace / "cache"
    result = run_cli(*build_args(digits_model, digits_profiles, out, cache, int8_calibration))
    assert result.exit_code == 0, result.stderr
    return out, cache, json.loads(result.stdout)


def test_every_target_builds_cold(matrix):
    out, _, report = matrix
    targets = {(t["sku"], t["precision"]): t for t in report["targets"]}
    assert set(targets) == {(s, p) for s in SKUS for p in PRECISIONS}
    assert all(t["status"] == "ok" and not t["cache_hit"] and t["warnings"] == [] for t in targets.values())
    assert json.loads((out / "build.json").read_text())["targets"] == report["targets"]


def test_engine_json_agrees_with_plan_header(matrix, digits_model):
    out, _, _ = matrix
    model_sha = hashlib.sha256(digits_model.read_bytes()).hexdigest()
    for sku, capability in SKUS.items():
        for precision in PRECISIONS:
            folder = out / sku / precision
            plan = (folder / "engine.plan").read_bytes()
            record = json.loads((folder / "engine.json").read_text())
            assert record["sha256"] == hashlib.sha256(plan).hexdigest()
            assert record["size_bytes"] == len(plan)
            assert (record["sku"], record["precision"]) == (sku, precision)
            assert record["compute_capabilities"] == [capability]
            assert record["backend"] == {"name": "tensorrt-rtx", "version": "1.7.1.116"}
            assert record["model_sha256"] == model_sha
            assert [p["name"] for p in record["profiles"]] == ["online", "batch"]
            assert record["cache_hit"] is False and record["build_seconds"] > 0
            # The raw header, read independently of the tool's own parser.
            assert plan[:4] == b"vtrt"
            assert list(plan[24:28]) == [1, 7, 1, 116]
            assert struct.unpack_from("<Q", plan, 32)[0] == CC_BITS[capability]
            assert record["plan_header"] == {"magic": "vtrt", "version": "1.7.1.116", "compute_capabilities": [
                capability], "compute_capability_mask": CC_BITS[capability]}
            assert {"engine.plan", "engine.json", "layers.json", "build.log"} <= {p.name for p in folder.iterdir()}


def _layers(out: Path, sku: str, precision: str) -> list[dict]:
    return json.loads((out / sku / precision / "layers.json").read_text())["layers"]


def test_fp32_fuses_conv_batchnorm_relu(matrix):
    out, _, _ = matrix
    chains = [set(layer["onnx_nodes"]) for layer in _layers(out, "rtx-4090", "fp32")]
    for block in ("0", "3"):
        conv = f"/features/features.{block}/Conv"
        bn = f"/features/features.{int(block) + 1}/BatchNormalization"
        relu = f"/features/features.{int(block) + 2}/Relu"
        assert any({conv, bn, relu} <= chain for chain in chains), chains
    assert all("Int8" not in layer["output_types"] for layer in _layers(out, "rtx-4090", "fp32"))
    assert {layer["precision"] for layer in _layers(out, "rtx-4090", "fp32")} == {"Float", None}


def test_int8_build_runs_int8_convolutions(matrix):
    out, _, _ = matrix
    # INT8 activations in, INT8 weights among the constants: not merely dequantized weights in a float kernel
    int8_convs = [
        layer for layer in _layers(out, "rtx-3090", "int8")
        if layer["input_types"] == ["Int8"] and "Int8" in layer["constant_types"]
        and any("Conv" in node for node in layer["onnx_nodes"])
    ]
    assert len(int8_convs) >= 2, _layers(out, "rtx-3090", "int8")
    assert all(layer["precision"] == "Int8" for layer in int8_convs)
    # the kernels that quantize (Float in, Int8 out) compute in Float; the summary counts both kinds
    quantizing = [layer for layer in _layers(out, "rtx-3090", "int8")
                  if layer["input_types"] == ["Float"] and layer["output_types"] == ["Int8"]]
    assert quantizing and all(layer["precision"] == "Float" for layer in quantizing)
    document = json.loads((out / "rtx-3090" / "int8" / "layers.json").read_text())
    assert document["kernel_precisions"]["Int8"] >= len(int8_convs)
    # the counts add up: kernels with no typed tensors (shape arithmetic) are counted as "none"
    assert sum(document["kernel_precisions"].values()) == document["kernels"] == len(document["layers"])
    assert document["kernel_precisions"].get("none", 0) == sum(1 for layer in document["layers"]
                                                               if layer["precision"] is None)
    # each kernel says which of the engine's two shape profiles it belongs to, and each profile has the convs
    assert {layer["profile"] for layer in document["layers"]} == {0, 1}
    for profile in (0, 1):
        assert sum(1 for layer in int8_convs if layer["profile"] == profile) == len(int8_convs) // 2
    maxpools = [layer for layer in _layers(out, "rtx-3090", "fp32") if layer["type"] == "maxpool"]
    assert maxpools and all(layer["constant_types"] == [] for layer in maxpools)


def test_fp16_build_runs_half_kernels(matrix):
    out, _, _ = matrix
    half = [layer for layer in _layers(out, "rtx-4090", "fp16") if "Half" in layer["output_types"]]
    assert any(any("Conv" in node for node in layer["onnx_nodes"]) for layer in half)
    convs = [layer for layer in _layers(out, "rtx-4090", "fp16") if "/features/features.3/Conv" in layer["onnx_nodes"]]
    assert convs and all(layer["precision"] == "Half" for layer in convs), convs


def test_second_run_is_all_cache_hits(matrix, digits_model, digits_profiles, int8_calibration, workspace):
    out, cache, _ = matrix
    again = workspace / "engines-again"
    result = run_cli(*build_args(digits_model, digits_profiles, again, cache, int8_calibration))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert all(t["cache_hit"] for t in report["targets"])
    for target in report["targets"]:
        first = json.loads((out / target["sku"] / target["precision"] / "engine.json").read_text())
        second = json.loads((again / target["sku"] / target["precision"] / "engine.json").read_text())
        assert second["cache_hit"] is True and second["sha256"] == first["sha256"]
        assert second["build_seconds"] == first["build_seconds"] > 0  # what the engine took, not the copy
        plan = (again / target["sku"] / target["precision"] / "engine.plan").read_bytes()
        assert hashlib.sha256(plan).hexdigest() == first["sha256"]


def test_changes_rebuild_only_what_they_must(matrix, digits_model, digits_profiles, int8_calibration, workspace):
    _, cache, _ = matrix
    # A new SKU next to cached ones builds only the new SKU's engines.
    out = workspace / "engines-more"
    result = run_cli(*build_args(digits_model, digits_profiles, out, cache, int8_calibration,
                                 skus=("rtx-4090", "rtx-5090"), precisions=("fp32", "fp16")))
    assert result.exit_code == 0, result.stderr
    hits = {(t["sku"], t["precision"]): t["cache_hit"] for t in json.loads(result.stdout)["targets"]}
    assert hits == {("rtx-4090", "fp32"): True, ("rtx-4090", "fp16"): True,
                    ("rtx-5090", "fp32"): False, ("rtx-5090", "fp16"): False}
    # One changed profile changes every engine that holds it, and nothing else is redone:
    # the FP16 model is converted once per source model.
    changed = yaml.safe_load(digits_profiles.read_text())
    changed["profiles"][1]["shapes"]["image"]["max"] = [128, 1, 8, 8]
    profiles = workspace / "changed.yaml"
    profiles.write_text(yaml.safe_dump(changed))
    converted = list(cache.glob("prepared/*/fp16.onnx"))
    assert len(converted) == 1
    stamp = converted[0].stat().st_mtime_ns
    result = run_cli(*build_args(digits_model, profiles, workspace / "engines-changed", cache, int8_calibration,
                                 skus=("rtx-4090",), precisions=("fp32", "fp16")))
    assert result.exit_code == 0, result.stderr
    assert [t["cache_hit"] for t in json.loads(result.stdout)["targets"]] == [False, False]
    assert converted[0].stat().st_mtime_ns == stamp
    record = json.loads((workspace / "engines-changed/rtx-4090/fp32/engine.json").read_text())
    assert record["profiles"][1]["shapes"]["image"]["max"] == [128, 1, 8, 8]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_failed_target_does_not_stop_the_others(digits_model, digits_profiles, tmp_path, jobs):
    # TensorRT-RTX cannot compile an FP32 GEMM for Turing (SM75): a real builder failure, in this process
    # or in a worker process (whose progress reaches the table through the parent).
    out = tmp_path / "out"
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-2080-ti",
                     "--sku", "rtx-4090", "--precision", "fp32", "--out", out, "--cache-dir", tmp_path / "c",
                     "--jobs", jobs)
    line = assert_clean_error(result, 1, "1 of 2 builds failed", "rtx-2080-ti/fp32", "FP32 GEMM is not supported")
    rows = {row.split("│")[1].strip(): row for row in result.stdout.splitlines() if row.count("│") > 5}
    assert "failed" in rows["rtx-2080-ti"] and "ok" in rows["rtx-4090"]
    assert "build.log" in line
    assert (out / "rtx-4090/fp32/engine.plan").is_file()
    failed = out / "rtx-2080-ti/fp32"
    assert not (failed / "engine.plan").exists() and not (failed / "engine.json").exists()
    assert "FP32 GEMM is not supported" in (failed / "build.log").read_text()
    statuses = {t["sku"]: t["status"] for t in json.loads((out / "build.json").read_text())["targets"]}
    assert statuses == {"rtx-2080-ti": "failed", "rtx-4090": "ok"}


def test_a_write_failure_fails_each_target_without_a_partial_plan(digits_model, digits_profiles, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--sku", "rtx-3090",
                     "--precision", "fp32", "--out", out, "--cache-dir", cache, preexec_fn=files_of_at_most(64))
    line = assert_clean_error(result, 1, "2 of 2 builds failed", "could not write the engine files", "File too large")
    assert "rtx-4090/fp32" in line
    for sku in ("rtx-4090", "rtx-3090"):
        assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
    assert not list(cache.glob("engines/*/*/engine.plan"))
    targets = json.loads((out / "build.json").read_text())["targets"]
    assert [t["status"] for t in targets] == ["failed", "failed"]
    assert all("File too large" in t["errors"][0] for t in targets)


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_outputs_and_cache_entries_get_the_permissions_the_umask_gives(digits_model, digits_profiles, tmp_path, umask):
    """Results are read by others (serving fleets, later CI steps, teammates sharing a cache): no owner-only
    staging permissions may leak into them."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "fp32",
                     "--out", out, "--cache-dir", cache, "--json", preexec_fn=lambda: os.umask(umask))
    assert result.exit_code == 0, result.stderr
    [entry] = cache.glob("engines/*/*")
    folders = [out, out / "rtx-4090", out / "rtx-4090" / "fp32", entry]
    files = [out / "build.json", *(out / "rtx-4090" / "fp32").iterdir(), *entry.iterdir()]
    assert len(files) == 9
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {oct(0o777 & ~umask)}
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o666 & ~umask)}


def test_an_engine_the_cache_cannot_keep_is_delivered_with_a_warning(digits_model, digits_profiles, tmp_path):
    """The cache is an optimization: where it cannot take the entry (a full cache volume; here a file where its
    engines folder belongs) the built engine still lands in --out, and the run says it was not kept."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    cache.mkdir()
    (cache / "engines").write_text("in the way\n")
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "fp32",
                     "--out", out, "--cache-dir", cache, "--json")
    assert result.exit_code == 0, result.stderr
    [target] = json.loads(result.stdout)["targets"]
    assert target["status"] == "ok" and target["errors"] == []
    [warning] = target["warnings"]
    assert warning.startswith(f"not kept in the build cache {cache}: ") and "engines" in warning
    assert result.stderr == f"warning: rtx-4090/fp32: {warning}\n"
    record = json.loads((out / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert hashlib.sha256((out / "rtx-4090" / "fp32" / "engine.plan").read_bytes()).hexdigest() == record["sha256"]


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "engine.json"
    target.write_text("previous\n")
    write = "import sys; from pathlib import Path; from compiler.core.files import write_atomic; " \
            "write_atomic(Path(sys.argv[1]), bytes(1 << 20))"
    done = subprocess.run([sys.executable, "-c", write, str(target)], capture_output=True, text=True,
                          preexec_fn=files_of_at_most(64))
    assert done.returncode == 1 and "File too large" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["engine.json"]
    assert target.read_text() == "previous\n"


@pytest.mark.parametrize(("change", "code", "fragments"), [
    (["--sku", "rtx-9999"], 2, ["unknown SKU 'rtx-9999'", "rtx-4090"]),
    (["--sku", "h100"], 3, ["backend tensorrt is not installed", "trt-compile[tensorrt]"]),
    (["--sku", "rtx-4090", "--precision", "int8"], 2, ["int8 needs calibration", "--data", "--calibration"]),
    (["--sku", "rtx-3090", "--precision", "fp8"], 2, ["fp8 needs compute capability 8.9", "rtx-3090"]),
    (["--sku", "rtx-4090", "--precision", "bf12"], 2, ["unknown precision 'bf12'"]),
    (["--sku", "rtx-4090", "--backend", "tensorrt-rtx", "--sku", "h100"], 2,
     ["cannot target compute capability 9.0"]),
    (["--sku", "rtx-4090", "--method", "bogus"], 2, ["--method bogus chooses how --data is calibrated"]),
    (["--sku", "rtx-4090", "--precision", "int8", "--data", EXAMPLES / "digits.npz", "--method", "bogus"], 2,
     ["--method bogus: choose from minmax, entropy, percentile"]),
    (["--sku", "rtx-4090", "--precision", "int8", "--data", EXAMPLES / "digits.npz", "--calibration", EXAMPLES], 2,
     ["--calibration and --data both given"]),
])
def test_invalid_inputs_fail_before_any_build(change, code, fragments, digits_model, digits_profiles, tmp_path):
    args = ["build", digits_model, "--profiles", digits_profiles, "--out", tmp_path / "out",
            "--cache-dir", tmp_path / "cache"]
    if "--precision" not in change:
        args += ["--precision", "fp32"]
    assert_clean_error(run_cli(*args, *change), code, *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "path", "fragments"), [
    ("--out", "a-file/out", ["--out", "a-file/out", "cannot write there", "Not a directory"]),
    ("--out", "a-file", ["--out", "a-file", "a file is in the way"]),
    ("--cache-dir", "a-file/cache", ["--cache-dir", "a-file/cache", "Not a directory"]),
    ("--cache-dir", "a-file", ["--cache-dir", "a-file", "a file is in the way"]),
])
def test_unusable_output_or_cache_folder_fails_before_any_build(option, path, fragments, digits_model,
                                                                digits_profiles, tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    folders = {"--out": tmp_path / "out", "--cache-dir": tmp_path / "cache", option: tmp_path / path}
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "fp32",
                     "--json", *(str(a) for pair in folders.items() for a in pair), cwd=tmp_path)
    assert_clean_error(result, 2, *fragments, "choose another folder")
    assert result.stdout == ""
    assert (tmp_path / "a-file").read_text() == "not a folder\n"
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("**/engine.plan"))


def test_facts_that_cannot_be_remembered_do_not_fail_the_build(digits_model, digits_profiles, tmp_path):
    """The memo of the model's digest is an optimization: where it cannot be written the build still succeeds."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "facts").write_text("in the way\n")
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "fp32",
                     "--out", tmp_path / "out", "--cache-dir", cache, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "out" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert record["model_sha256"] == hashlib.sha256(digits_model.read_bytes()).hexdigest()
    assert (cache / "engines" / record["cache_key"][:2] / record["cache_key"] / "engine.plan").is_file()


@pytest.mark.parametrize("calibrating", [False, True])
def test_bad_profile_fails_fast(digits_model, digits_data, tmp_path, calibrating):
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: online\n    shapes:\n"
                        "      image: {min: [4, 1, 8, 8], opt: [2, 1, 8, 8], max: [8, 1, 8, 8]}\n")
    precision = ["--precision", "int8", "--data", digits_data] if calibrating else ["--precision", "fp32"]
    result = run_cli("build", digits_model, "--profiles", profiles, "--sku", "rtx-4090", *precision,
                     "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache")
    assert_clean_error(result, 2, "profile 'online'", "input 'image' dim 0", "min <= opt <= max")
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1  # nothing but the error line
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "calibrations").exists()


def test_a_run_refused_for_its_profiles_still_remembers_the_new_model_digest(tmp_path):
    """The CLI leaves without the interpreter's teardown; a digest still being computed when the run stops (a
    64 MB model refused for its profiles within milliseconds) is finished and remembered first, whole."""
    width = 1 << 22
    model = save_model(tmp_path / "wide.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
                       [numpy_helper.from_array(np.ones((4, width), dtype=np.float32), "w")])
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [4, 4], opt: [2, 4], max: [8, 4]}\n")
    result = run_cli("build", model, "--profiles", profiles, "--sku", "rtx-4090", "--precision", "fp32",
                     "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache")
    assert_clean_error(result, 2, "profile 'p'", "min <= opt <= max")
    [memo] = (tmp_path / "cache" / "facts" / "model").iterdir()
    assert json.loads(memo.read_text())["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()


def test_calibration_of_another_model_is_refused(int8_calibration, digits_profiles, tmp_path):
    other = tmp_path / "other.onnx"
    shutil.copy(int8_calibration / "model.onnx", other)  # a different model file than the one calibrated
    result = run_cli("build", other, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "int8",
                     "--calibration", int8_calibration, "--out", tmp_path / "out")
    assert_clean_error(result, 2, "calibration.json", "calibrated from another model")


def test_cancel_through_the_progress_monitor_keeps_previous_output(digits_model, digits_profiles, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    [job] = plan_builds(digits_model, digits_profiles, ["rtx-4090"], ["fp32"], out,
                        options=BuildOptions(cache_dir=cache, use_cache=False))
    assert run_job(job, None, threading.Event()).status == "ok"
    previous = (out / "rtx-4090/fp32/engine.json").read_text()
    cancel, phases = threading.Event(), []

    def progress(phase: str, done: int, total: int) -> None:
        phases.append(phase)
        cancel.set()  # the user pressed Ctrl-C as soon as the build started

    status = run_job(job, progress, cancel)
    assert status.status == "cancelled" and status.errors == ["build cancelled"]
    assert phases[0] == "Building engine"
    assert (out / "rtx-4090/fp32/engine.json").read_text() == previous
    assert sorted(p.name for p in (out / "rtx-4090").iterdir()) == ["fp32"]


def test_parallel_jobs_and_concurrent_runs_share_one_cache(digits_model, digits_profiles, tmp_path):
    cache = tmp_path / "cache"
    results = []

    def build(out: Path) -> None:
        results.append(build_engines(digits_model, digits_profiles, list(SKUS), ["fp32"], out,
                                     options=BuildOptions(jobs=2, cache_dir=cache)))

    threads = [threading.Thread(target=build, args=(tmp_path / f"out{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2
    assert all(t.status == "ok" for report in results for t in report.targets)
    entries = [p for p in cache.glob("engines/*/*") if not p.name.startswith(".")]
    assert len(entries) == 2
    assert not list(cache.glob("engines/*/.*"))


def test_int8_with_data_calibrates_into_the_cache(digits_model, digits_profiles, digits_data, tmp_path):
    cache = tmp_path / "cache"
    args = ["build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "int8",
            "--data", digits_data, "--cache-dir", cache, "--json"]
    first = run_cli(*args, "--out", tmp_path / "a")
    assert first.exit_code == 0, first.stderr
    [calibrated] = cache.glob("calibrations/*/int8-minmax/calibration.json")
    assert json.loads(calibrated.read_text())["precision"] == "int8"
    layers = _layers(tmp_path / "a", "rtx-4090", "int8")
    assert any("Int8" in layer["input_types"] for layer in layers)
    second = run_cli(*args, "--out", tmp_path / "b")
    assert second.exit_code == 0, second.stderr
    assert [t["cache_hit"] for t in json.loads(second.stdout)["targets"]] == [True]
    # Calibrating while planning reports its progress (the CLI shows it as rows of samples), and the
    # calibration appears in the cache only when complete: concurrent runs may read it.
    reports, fresh = [], tmp_path / "fresh-cache"

    def report(*progress) -> None:
        reports.append(progress)
        assert not list(fresh.glob("calibrations/*/int8-minmax"))

    plan_builds(digits_model, digits_profiles, ["rtx-4090"], ["int8"], tmp_path / "d",
                options=BuildOptions(data=digits_data, cache_dir=fresh), calibration_progress=report)
    assert reports[-1] == ("held-out", 359, 359)
    assert ("calibrate", 1438, 1438) in reports and reports[0][1] == 0
    assert [p.name for p in fresh.glob("calibrations/*/*")] == ["int8-minmax"]


def _start_slow_build(tmp_path: Path, jobs: int, cache: bool = False) -> tuple[subprocess.Popen, Path, list[str]]:
    """`compile build` of ResNet-50 (batch up to 32) for ``jobs`` SKUs in its own session, returned once every
    target's build has started (its staging folder exists)."""
    model = resnet(tmp_path / "resnet50.onnx", depth=50)
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n"
                        "      image: {min: [1, 3, 224, 224], opt: [8, 3, 224, 224], max: [32, 3, 224, 224]}\n")
    out, skus = tmp_path / "out", list(SKUS)[:jobs]
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", "build", model, "--profiles", profiles,
         *[a for sku in skus for a in ("--sku", sku)], "--precision", "fp32", "--out", out,
         *([] if cache else ["--no-cache"]), "--cache-dir", tmp_path / "cache", "--jobs", str(jobs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not all(any((out / sku).glob(".fp32-*")) for sku in skus):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    time.sleep(0.1)
    return process, out, skus


def _processes_building_into(out: Path) -> list[str]:
    """Command lines of live (not zombie) processes whose arguments name ``out``: the CLI and its workers."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if str(out).encode() in argv:
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(("send", "code", "line"), [
    (lambda process: os.killpg(process.pid, signal.SIGINT), 130, "error: interrupted"),  # a terminal's Ctrl-C
    (lambda process: process.send_signal(signal.SIGTERM), 143, "error: terminated"),  # a CI job cancelled
], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_cancels_the_build_and_leaves_no_plan(tmp_path, jobs, send, code, line):
    """A real signal while TensorRT builds: the builders stop through their progress monitors, no plan and no
    staging folder stays, build.json says cancelled, and with --jobs 2 no worker outlives the command."""
    process, out, skus = _start_slow_build(tmp_path, jobs)
    send(process)
    stdout, stderr = process.communicate(timeout=120)
    assert assert_clean_error(CliResult(process.returncode, stdout, stderr), code) == line
    for sku in skus:
        assert list((out / sku).iterdir()) == []
    statuses = json.loads((out / "build.json").read_text())["targets"]
    assert [(t["sku"], t["status"], t["errors"]) for t in statuses] == [
        (sku, "cancelled", ["build cancelled"]) for sku in skus]
    assert _processes_building_into(out) == []



@pytest.mark.parametrize("signals", [1, 2], ids=["one signal, the grace runs out", "a second signal"])
def test_a_builder_that_does_not_stop_is_killed_and_its_target_cancelled(tmp_path, signals):
    """A builder that ignores its monitor (here: frozen with SIGSTOP) is killed 10 s after the stop, or at once on a
    second signal; its target is cancelled (not failed), build.json is written and nothing is left behind."""
    process, out, [sku] = _start_slow_build(tmp_path, 1)
    [builder] = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_worker_of(int(p), process.pid)]
    os.kill(builder, signal.SIGSTOP)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    if signals == 2:
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - started
    assert assert_clean_error(CliResult(process.returncode, stdout, stderr), 130) == "error: interrupted"
    assert (took < 5) if signals == 2 else (9 < took < 20), took
    [status] = json.loads((out / "build.json").read_text())["targets"]
    assert (status["status"], status["errors"]) == ("cancelled", ["build cancelled"])
    assert list((out / sku).iterdir()) == []
    assert _processes_building_into(out) == []


def test_a_worker_killed_outright_fails_its_targets_and_the_run_still_reports(tmp_path):
    """What the OOM killer does to one --jobs worker: the run ends with exit 1 and a build.json naming the failed
    targets instead of an internal error and no report; no process building into OUT outlives the command."""
    process, out, skus = _start_slow_build(tmp_path, 2)
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_worker_of(int(p), process.pid)]
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)
    assert_clean_error(CliResult(process.returncode, stdout, stderr), 1, "builds failed",
                       "the TensorRT builder process died of SIGKILL")
    statuses = json.loads((out / "build.json").read_text())["targets"]
    assert [t["sku"] for t in statuses] == skus
    assert any(t["status"] == "failed" and "builder process died of SIGKILL" in t["errors"][0] for t in statuses)
    for target in statuses:  # a target is either failed (no plan) or whole
        plan = out / target["sku"] / "fp32" / "engine.plan"
        assert plan.is_file() == (target["status"] == "ok")
    assert _processes_building_into(out) == []


@pytest.mark.parametrize("crash", [signal.SIGSEGV, signal.SIGABRT], ids=["SIGSEGV", "SIGABRT"])
def test_a_builder_that_crashes_fails_its_target_with_jobs_1_too(tmp_path, crash):
    """TensorRT-RTX's builder dies of SIGSEGV on some graphs. Every build runs in a child process, --jobs 1
    included, so the crash is one failed target naming the signal: the run goes on, writes build.json and exits 1,
    and leaves no staging folder (it used to die with 139, print nothing and leave the staging folder)."""
    process, out, [sku] = _start_slow_build(tmp_path, 1)
    [builder] = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_worker_of(int(p), process.pid)]
    os.kill(builder, crash)
    stdout, stderr = process.communicate(timeout=120)
    line = assert_clean_error(CliResult(process.returncode, stdout, stderr), 1, "1 of 1 builds failed",
                              f"the TensorRT builder process died of {crash.name}")
    [status] = json.loads((out / "build.json").read_text())["targets"]
    assert status["status"] == "failed" and crash.name in status["errors"][0] and status["errors"][0] in line
    assert sorted(p.name for p in (out / sku).iterdir()) == ["fp32"]  # no staging folder left
    assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
    assert crash.name in (out / sku / "fp32" / "build.log").read_text()


def _is_worker_of(pid: int, parent: int) -> bool:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, IndexError, ValueError):
        return False


def test_a_stop_signal_during_a_held_block_arrives_when_it_ends():
    """Where a folder is made and its removal set up, Ctrl-C and SIGTERM wait: raised between the two they would
    leave the folder behind (seen once in CI as an empty calibrate-* folder in $TMPDIR)."""
    def stop(signum, frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    steps = []
    try:
        with pytest.raises(Interrupted):
            with stop_signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                steps.append("the held block ran to its end")
            steps.append("after the block")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert steps == ["the held block ran to its end"]


def test_a_stop_signal_while_a_file_is_written_atomically_waits_until_it_is_in_place(tmp_path, monkeypatch):
    """A stop raised right after write_atomic creates its hidden temporary file (before the ``try`` that would
    remove it) would leave that file behind: the write finishes, then the stop arrives."""
    def stop(signum, frame):
        raise Interrupted(signum)

    def open_then_stop(*args, **kwargs):
        handle = open(*args, **kwargs)  # noqa: SIM115 - write_atomic closes it
        os.kill(os.getpid(), signal.SIGTERM)
        return handle

    monkeypatch.setattr(compiler.core.files, "open", open_then_stop, raising=False)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Interrupted):
            compiler.core.files.write_atomic(tmp_path / "engine.json", b'{"whole": true}')
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [p.name for p in tmp_path.iterdir()] == ["engine.json"]
    assert (tmp_path / "engine.json").read_bytes() == b'{"whole": true}'


def test_workers_of_a_killed_command_stop_instead_of_building_on(tmp_path):
    """SIGKILL cannot be handled: the parent dies at once, and its worker processes notice through their
    progress monitors and stop, leaving no plan put in place after the command has ended."""
    process, out, skus = _start_slow_build(tmp_path, 2)
    process.kill()
    process.wait(timeout=10)
    deadline = time.monotonic() + 30
    while _processes_building_into(out):
        assert time.monotonic() < deadline, _processes_building_into(out)
        time.sleep(0.05)
    for sku in skus:
        assert not (out / sku / "fp32").exists()
        assert list((out / sku).iterdir()) == []


def test_the_staging_folder_of_a_killed_run_is_swept_by_the_next_one(tmp_path, digits_model, digits_profiles):
    """A run killed outright with its builder (SIGKILL to the process group, as a container's end does) leaves its
    staging folder behind; the next build of that target removes it, but not one that a live run holds, nor one
    made too recently for its run to have locked it."""
    process, out, [sku] = _start_slow_build(tmp_path, 1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _processes_building_into(out):  # the builder, killed with it, is reaped by init
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [killed] = (out / sku).glob(".fp32-*")
    held, young = out / sku / f".fp32-{'a' * 12}", out / sku / f".fp32-{'b' * 12}"
    held.mkdir()
    young.mkdir()
    long_ago = time.time() - 120
    for folder in (killed, held):
        os.utime(folder, (long_ago, long_ago))
    handle = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a run still building there holds it
        result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", sku, "--precision", "fp32",
                         "--out", out, "--cache-dir", tmp_path / "cache", "--json")
    finally:
        os.close(handle)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (out / sku).iterdir()) == sorted(["fp32", held.name, young.name])


@pytest.mark.parametrize("same_bytes", [True, False], ids=["rewritten-same-bytes", "changed-bytes"])
def test_a_model_changed_during_its_build_fails_the_target_instead_of_caching_a_mislabelled_plan(tmp_path,
                                                                                               same_bytes):
    """The model file is replaced (new inode) while TensorRT builds: with other bytes the plan may be of a model
    other than the digest recorded, so the target fails and nothing is cached; the same bytes are no change."""
    process, out, [sku] = _start_slow_build(tmp_path, 1, cache=True)
    model = tmp_path / "resnet50.onnx"
    data = bytearray(model.read_bytes())
    if not same_bytes:
        data[len(data) // 2:len(data) // 2 + 8] = bytes(8)  # inside the weights: still a valid model
    (tmp_path / "next.onnx").write_bytes(data)
    os.replace(tmp_path / "next.onnx", model)
    stdout, stderr = process.communicate(timeout=300)
    engines = list((tmp_path / "cache").glob("engines/*/*/engine.plan"))
    if same_bytes:
        assert process.returncode == 0, stderr
        [plan] = engines
        assert plan.read_bytes() == (out / sku / "fp32" / "engine.plan").read_bytes()
    else:
        assert_clean_error(CliResult(process.returncode, stdout, stderr), 1, "1 of 1 builds failed",
                           f"{model} changed while its engine was built", "run compile build again")
        assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
        assert engines == []


def test_datacenter_tensorrt_refuses_without_a_gpu_of_the_sku():
    """TensorRT itself cannot be installed here; its GPU check runs against this machine's real NVML state."""
    backend = object.__new__(DatacenterTensorRTBackend)  # the check needs no TensorRT module
    with pytest.raises(EnvironmentProblem) as refused:
        backend.check_targets(("9.0",))
    message = str(refused.value)
    assert "builds only for the local GPU" in message
    assert "compute capability 9.0" in message and "this host has none" in message
    assert refused.value.exit_code == 3


def _overwrite(path: Path, data: bytes) -> None:
    path.unlink()  # a new file, not a write through the hard links to it
    path.write_bytes(data)


@pytest.mark.parametrize("damage", [
    lambda entry: _overwrite(entry / "engine.plan", b"vtrt truncated"),  # someone overwrote the cached plan
    lambda entry: _overwrite(entry / "engine.json", b'{"trunc'),  # a record cut short
    lambda entry: (entry / "layers.json").unlink(),  # a file deleted by hand or by a cleaner
], ids=["plan", "record", "missing file"])
def test_damaged_cache_entry_is_rebuilt_not_served(damage, digits_model, digits_profiles, tmp_path):
    cache = tmp_path / "cache"
    args = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"])
    first = build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    [entry] = [p for p in cache.glob("engines/*/*") if not p.name.startswith(".")]
    damage(entry)
    second = build_engines(*args, tmp_path / "b", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in first.targets + second.targets] == [False, False]
    plan = (tmp_path / "b/rtx-4090/fp32/engine.plan").read_bytes()
    record = json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())
    assert len(plan) == record["size_bytes"] > 1000
    third = build_engines(*args, tmp_path / "c", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in third.targets] == [True]


def test_plan_rewritten_in_place_through_out_is_not_served_from_the_cache(digits_model, digits_profiles, tmp_path):
    """OUT's plan is a hard link to the cache entry's: `cp other.plan OUT/.../engine.plan` writes into the cached
    plan too. Same size, other bytes: the next run must rebuild, not hand out a plan engine.json does not name."""
    cache, args = tmp_path / "cache", (digits_model, digits_profiles, ["rtx-4090"], ["fp32"])
    build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    second = build_engines(*args, tmp_path / "b",
                           options=BuildOptions(cache_dir=cache))  # a hit: links the plan once more
    assert [t.cache_hit for t in second.targets] == [True]
    delivered = tmp_path / "b/rtx-4090/fp32/engine.plan"
    recorded = json.loads(delivered.with_name("engine.json").read_text())["sha256"]
    with open(delivered, "r+b") as plan:  # in place, as cp onto an existing file does
        plan.seek(4096)
        plan.write(bytes(64))
    third = build_engines(*args, tmp_path / "c", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in third.targets] == [False]
    plan = (tmp_path / "c/rtx-4090/fp32/engine.plan").read_bytes()
    assert hashlib.sha256(plan).hexdigest() == json.loads((tmp_path / "c/rtx-4090/fp32/engine.json").read_text())[
        "sha256"]
    assert hashlib.sha256(delivered.read_bytes()).hexdigest() != recorded  # b's copy was the one damaged
    assert [t.cache_hit for t in build_engines(*args, tmp_path / "d",
                                               options=BuildOptions(cache_dir=cache)).targets] == [True]


def test_a_folder_that_cannot_be_put_in_place_leaves_the_previous_one(digits_model, digits_profiles, tmp_path,
                                                                       monkeypatch):
    """The finished folder is renamed into place; when the filesystem refuses that rename, the previous build's
    folder is put back untouched and the target fails with the reason."""
    args = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"], tmp_path / "out")
    build_engines(*args, options=BuildOptions(cache_dir=tmp_path / "cache"))
    target = tmp_path / "out/rtx-4090/fp32"
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    rename = os.rename

    def refusing(source, destination):
        if Path(destination) == target and "-old-" not in str(source):  # the new folder, not the old one back
            raise OSError(errno.EIO, "Input/output error")
        return rename(source, destination)

    monkeypatch.setattr(os, "rename", refusing)
    report = build_engines(*args, options=BuildOptions(cache_dir=tmp_path / "cache"))
    [status] = report.targets
    assert status.status == "failed" and "could not put the engine files in place" in status.errors[0]
    assert "Input/output error" in status.errors[0]
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in target.parent.iterdir()] == ["fp32"]  # no staging or old folder left behind


def _new_file_with_digest_held(model: Path, folder: Path, monkeypatch) -> tuple[Path, threading.Event]:
    """A copy of ``model`` the cache has never seen, whose digest cannot finish until the event is set."""
    folder.mkdir()
    copy = folder / "model.onnx"
    shutil.copy(model, copy)
    release, hash_model_file = threading.Event(), compiler.engines.plan.hash_model_file_mapped

    def held(path: Path):
        release.wait()
        return hash_model_file(path)

    monkeypatch.setattr(compiler.engines.plan, "hash_model_file_mapped", held)
    return copy, release


def test_a_new_model_file_builds_while_hashed_and_stops_on_a_cache_hit(digits_model, digits_profiles, tmp_path,
                                                                       monkeypatch):
    """A file with no remembered digest starts building at once; when its digest names an engine the cache
    already has (here: a copy of a cached model), the build is stopped and the cached engine served."""
    cache = tmp_path / "cache"
    first = build_engines(digits_model, digits_profiles, ["rtx-4090"], ["fp32"], tmp_path / "a",
                          options=BuildOptions(cache_dir=cache))
    copy, release = _new_file_with_digest_held(digits_model, tmp_path / "copy", monkeypatch)
    phases = []

    def progress(index: int, phase: str, done: int, total: int) -> None:
        phases.append(phase)
        release.set()  # the build is running: now let the digest finish

    second = build_engines(copy, digits_profiles, ["rtx-4090"], ["fp32"], tmp_path / "b",
                           options=BuildOptions(cache_dir=cache), progress=progress)
    assert "Building engine" in phases and phases[-1] == "ok (cache hit)"
    assert [t.cache_hit for t in first.targets + second.targets] == [False, True]
    a = json.loads((tmp_path / "a/rtx-4090/fp32/engine.json").read_text())
    b = json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())
    assert b["sha256"] == a["sha256"] and b["model_sha256"] == a["model_sha256"] == second.model_sha256
    assert sorted(p.name for p in (tmp_path / "b/rtx-4090").iterdir()) == ["fp32"]
    # A model the cache does not have builds to the end while it is hashed, and is then cached.
    other, release = _new_file_with_digest_held(digits_model, tmp_path / "other", monkeypatch)
    profiles = tmp_path / "p.yaml"  # new profiles: an engine the cache has never seen
    profiles.write_text(digits_profiles.read_text().replace("max: [64, 1, 8, 8]", "max: [48, 1, 8, 8]"))
    third = build_engines(other, profiles, ["rtx-4090"], ["fp32"], tmp_path / "c",
                          options=BuildOptions(cache_dir=cache), progress=progress)
    assert [(t.status, t.cache_hit) for t in third.targets] == [("ok", False)]
    fourth = build_engines(other, profiles, ["rtx-4090"], ["fp32"], tmp_path / "d",
                           options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in fourth.targets] == [True]


def test_parallel_builds_run_while_the_model_is_hashed(digits_model, digits_profiles, tmp_path, monkeypatch):
    """With --jobs the builds start before the new file's digest is known; when it is, a cache hit still stops
    them, and a digest that fails fails each target with the reason."""
    cache = tmp_path / "cache"
    build_engines(digits_model, digits_profiles, list(SKUS), ["fp32"], tmp_path / "a",
                  options=BuildOptions(cache_dir=cache))
    copy, release = _new_file_with_digest_held(digits_model, tmp_path / "copy", monkeypatch)
    events = []

    def progress(index: int, phase: str, done: int, total: int) -> None:
        events.append((index, phase))
        release.set()  # a worker is building: only now may the digest finish

    report = build_engines(copy, digits_profiles, list(SKUS), ["fp32"], tmp_path / "b",
                           options=BuildOptions(cache_dir=cache, jobs=2), progress=progress)
    assert [(t.status, t.cache_hit) for t in report.targets] == [("ok", True), ("ok", True)]
    assert report.model_sha256 == hashlib.sha256(copy.read_bytes()).hexdigest()
    for index in (0, 1):
        phases = [phase for i, phase in events if i == index]
        assert phases[0] != "ok (cache hit)" and phases[-1] == "ok (cache hit)"  # built first, then served

    # The file disappears before its digest is computed (once both builders have parsed it): both builds
    # finish, neither is passed off as done.
    gone, release = _new_file_with_digest_held(digits_model, tmp_path / "gone", monkeypatch)
    building: set[int] = set()

    def remove_then_release(index: int, phase: str, done: int, total: int) -> None:
        building.add(index)
        if building == {0, 1} and gone.exists():
            gone.unlink()
            release.set()

    report = build_engines(gone, digits_profiles, list(SKUS), ["fp32"], tmp_path / "c",
                           options=BuildOptions(cache_dir=cache, jobs=2), progress=remove_then_release)
    assert [t.status for t in report.targets] == ["failed", "failed"]
    assert all("could not read the model to hash it" in t.errors[0] and "model.onnx" in t.errors[0]
               for t in report.targets)
    assert not list((tmp_path / "c").glob("*/*/engine.plan"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_cache_hit_records_the_sku_it_was_built_for(digits_model, digits_profiles, tmp_path, jobs):
    """rtx-3090 and rtx-a6000 are both compute capability 8.6: one engine serves both, built once (with --jobs 2
    the second target waits for it rather than build it again beside it), and each engine.json names its SKU."""
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-3090", "--sku", "rtx-a6000",
                     "--precision", "fp32", "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--json",
                     "--jobs", jobs)
    assert result.exit_code == 0, result.stderr
    assert [(t["sku"], t["cache_hit"]) for t in json.loads(result.stdout)["targets"]] == [
        ("rtx-3090", False), ("rtx-a6000", True)]
    records = {sku: json.loads((tmp_path / "out" / sku / "fp32" / "engine.json").read_text())
               for sku in ("rtx-3090", "rtx-a6000")}
    assert {sku: r["sku"] for sku, r in records.items()} == {"rtx-3090": "rtx-3090", "rtx-a6000": "rtx-a6000"}
    assert records["rtx-3090"]["sha256"] == records["rtx-a6000"]["sha256"]


def _calibration_copy(source: Path, target: Path, external: bool = False, **record_changes) -> Path:
    """A copy of a calibration folder; ``external`` re-saves its Q/DQ model with the weights beside it in
    model.onnx.data and records both files, as compile calibrate does for a model beyond protobuf's limit."""

    shutil.copytree(source, target)
    record = json.loads((target / "calibration.json").read_text())
    if external:
        onnx.save_model(onnx.load(target / "model.onnx"), target / "model.onnx", save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
        record["files"].update({name: hashlib.sha256((target / name).read_bytes()).hexdigest()
                                for name in ("model.onnx", "model.onnx.data")})
    (target / "calibration.json").write_text(json.dumps({**record, **record_changes}))
    return target


def _build_int8(model, profiles, calibration, out, cache) -> CliResult:
    return run_cli("build", model, "--profiles", profiles, "--sku", "rtx-4090", "--precision", "int8",
                   "--calibration", calibration, "--out", out, "--cache-dir", cache, "--json")


def test_calibration_artifacts_key_the_cache_by_content(int8_calibration, digits_model, digits_profiles, tmp_path):
    """The Q/DQ model (with its external data) keys the engine; the record's run facts (folder, seconds) do not."""
    cache = tmp_path / "cache"
    first = _build_int8(digits_model, digits_profiles, int8_calibration, tmp_path / "a", cache)
    assert first.exit_code == 0, first.stderr
    # The same calibration, recorded by another run in another folder: the same engine, this run's provenance.
    again = _calibration_copy(int8_calibration, tmp_path / "again", out=str(tmp_path / "again"), seconds=99.0)
    second = _build_int8(digits_model, digits_profiles, again, tmp_path / "b", cache)
    assert second.exit_code == 0, second.stderr
    assert [t["cache_hit"] for t in json.loads(second.stdout)["targets"]] == [True]
    record = json.loads((tmp_path / "b/rtx-4090/int8/engine.json").read_text())
    assert record["calibration_sha256"] == hashlib.sha256((again / "calibration.json").read_bytes()).hexdigest()
    # Weights in external data are part of the key: new weights bytes, a new engine.
    external = _calibration_copy(int8_calibration, tmp_path / "external", external=True)
    third = _build_int8(digits_model, digits_profiles, external, tmp_path / "c", cache)
    assert third.exit_code == 0, third.stderr
    weights = bytearray((external / "model.onnx.data").read_bytes())
    weights[:4] = bytes(4) if weights[:4] != bytes(4) else b"\1\1\1\1"
    (external / "model.onnx.data").write_bytes(weights)
    # ...changed behind compile calibrate's back, it is refused before any build
    assert_clean_error(_build_int8(digits_model, digits_profiles, external, tmp_path / "d", cache), 2,
                       "model.onnx.data", "changed since compile calibrate wrote it", "re-run compile calibrate")
    assert not (tmp_path / "d").exists()
    # ...and recorded (as a new calibration run would), it builds anew
    record = json.loads((external / "calibration.json").read_text())
    record["files"]["model.onnx.data"] = hashlib.sha256(bytes(weights)).hexdigest()
    (external / "calibration.json").write_text(json.dumps(record))
    fourth = _build_int8(digits_model, digits_profiles, external, tmp_path / "e", cache)
    assert fourth.exit_code == 0, fourth.stderr
    assert [t["cache_hit"] for t in json.loads(fourth.stdout)["targets"]] == [False]


@pytest.mark.parametrize(("damage", "fragments"), [
    ("garbage", ["model.onnx", "changed since compile calibrate wrote it"]),
    ("another model", ["model.onnx", "changed since compile calibrate wrote it"]),
    ("record not an object", ["calibration.json", "not a calibration.json this version writes"]),
    ("weights outside", ["model.onnx.data", "points outside the model's folder"]),
    # a folder whose record lost its file list and whose model.onnx is the FP32 model built an "int8" engine
    # with no Int8 kernel (exit 0)
    ("file list lost, fp32 model", ["calibration.json", "records no model.onnx"]),
    ("model a link out", ["model.onnx", "leads out of the calibration folder"]),
    ("weights not recorded", ["model.onnx.data", "not recorded in", "calibration.json"]),
    ("older format", ["calibration.json", "format_version None, this version reads 2"]),
])
def test_a_damaged_calibration_folder_is_refused_before_any_build(damage, fragments, int8_calibration, digits_model,
                                                                   digits_profiles, tmp_path):
    folder = _calibration_copy(int8_calibration, tmp_path / "calibration",
                               external=damage in ("weights outside", "weights not recorded"))
    if damage == "garbage":
        (folder / "model.onnx").write_bytes(b"\x08\x07garbage" * 100)
    elif damage == "another model":
        shutil.copy(digits_model, folder / "model.onnx")
    elif damage == "record not an object":
        (folder / "calibration.json").write_text("[]")
    elif damage == "file list lost, fp32 model":
        shutil.copy(digits_model, folder / "model.onnx")
        record = json.loads((folder / "calibration.json").read_text())
        del record["files"]
        (folder / "calibration.json").write_text(json.dumps({**record, "files": {}}))
    elif damage == "model a link out":
        outside = tmp_path / "elsewhere.onnx"
        (folder / "model.onnx").rename(outside)
        (folder / "model.onnx").symlink_to(outside)
    elif damage == "weights not recorded":
        record = json.loads((folder / "calibration.json").read_text())
        del record["files"]["model.onnx.data"]
        (folder / "calibration.json").write_text(json.dumps(record))
    elif damage == "older format":  # as compile calibrate wrote it before format 2: "format", no "format_version"
        record = json.loads((folder / "calibration.json").read_text())
        del record["format_version"]
        (folder / "calibration.json").write_text(json.dumps({**record, "format": 1}))
    else:  # the weights are a symlink to a file elsewhere: TensorRT would read it
        outside = tmp_path / "elsewhere.data"
        (folder / "model.onnx.data").rename(outside)
        (folder / "model.onnx.data").symlink_to(outside)
    result = _build_int8(digits_model, digits_profiles, folder, tmp_path / "out", tmp_path / "cache")
    assert_clean_error(result, 2, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_file_in_the_way_of_an_engine_folder_fails_before_any_calibration(digits_model, digits_profiles,
                                                                           digits_data, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    (out / "rtx-4090").mkdir(parents=True)
    (out / "rtx-4090" / "int8").write_text("not a folder\n")
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-3090", "--sku", "rtx-4090",
                     "--precision", "int8", "--data", digits_data, "--out", out, "--cache-dir", cache)
    assert_clean_error(result, 2, "--out", str(out / "rtx-4090" / "int8"), "a file is in the way")
    assert not (cache / "calibrations").exists() and not (out / "rtx-3090").exists()
    assert (out / "rtx-4090" / "int8").read_text() == "not a folder\n"


def test_a_target_whose_folder_cannot_be_made_fails_alone(digits_model, digits_profiles, tmp_path):
    """A file put in the way after the checks (another process): that target fails, the other is built and
    build.json says which."""
    out = tmp_path / "out"
    planned = plan_builds(digits_model, digits_profiles, ["rtx-3090", "rtx-4090"], ["fp32"], out,
                          options=BuildOptions(cache_dir=tmp_path / "cache"))
    (out / "rtx-3090").write_text("in the way\n")
    report = execute_builds(planned, digits_model, out)
    statuses = {t.sku: t for t in report.targets}
    assert statuses["rtx-4090"].status == "ok" and (out / "rtx-4090" / "fp32" / "engine.plan").is_file()
    assert statuses["rtx-3090"].status == "failed"
    assert f"could not make a folder in {out / 'rtx-3090'}" in statuses["rtx-3090"].errors[0]
    assert json.loads((out / "build.json").read_text())["targets"][0]["status"] == "failed"
    assert (out / "rtx-3090").read_text() == "in the way\n"


@pytest.mark.parametrize(("offset", "value", "fragment"), [
    (0, b"xtrt", "plan magic 'xtrt' is not 'vtrt'"),
    (24, bytes([1, 7, 2, 0]), "plan says version 1.7.2.0 but the backend is 1.7.1.116"),
    (32, struct.pack("<Q", CC_BITS["8.6"]), "plan targets compute capabilities ['8.6'] but ['8.9'] were requested"),
])
def test_the_plan_header_check_catches_a_plan_that_is_not_what_was_asked_for(matrix, offset, value, fragment):
    """The check every build runs on its plan before writing engine.json, on a real plan with one field changed."""
    out, _, _ = matrix
    backend = load_backend("tensorrt-rtx")
    plan = (out / "rtx-4090" / "fp32" / "engine.plan").read_bytes()
    assert backend.plan_mismatch(plan, ("8.9",)) is None
    changed = plan[:offset] + value + plan[offset + len(value):]
    assert backend.plan_mismatch(changed, ("8.9",)) == fragment
    assert backend.plan_mismatch(plan[:40], ("8.9",)) == "plan has 40 bytes, fewer than its 64-byte header"


def test_builder_options_key_the_cache(digits_model, digits_profiles, tmp_path):
    args, cache = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"]), tmp_path / "cache"
    hits = [build_engines(*args, tmp_path / str(i),
                          options=BuildOptions(cache_dir=cache, **options)).targets[0].cache_hit
            for i, options in enumerate([{}, {"optimization_level": 1}, {"workspace_mb": 64},
                                         {"optimization_level": 1}, {}])]
    assert hits == [False, False, False, True, True]
    record = json.loads((tmp_path / "1" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert record["builder_options"] == {"network": "strongly typed", "profiling_verbosity": "detailed",
                                         "workspace_mb": None, "optimization_level": 1}


def test_builder_warnings_reach_the_user_and_survive_the_cache(digits_model, tmp_path):
    """A profile whose largest batch (the largest dim TensorRT takes) overflows an inner tensor's volume builds,
    but TensorRT warns; that must not hide in build.log, and a cache hit must say it again."""
    profiles = tmp_path / "huge.yaml"
    profiles.write_text("profiles:\n  - name: huge\n    shapes:\n"
                        "      image: {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [2147483647, 1, 8, 8]}\n")
    for run, hit in (("a", False), ("b", True)):
        result = run_cli("build", digits_model, "--profiles", profiles, "--sku", "rtx-4090", "--precision", "fp32",
                         "--out", tmp_path / run, "--cache-dir", tmp_path / "cache", "--json")
        assert result.exit_code == 0, result.stderr
        [target] = json.loads(result.stdout)["targets"]
        assert (target["status"], target["cache_hit"]) == ("ok", hit)
        assert [w.split(".")[0] for w in target["warnings"]] == ["builder: Profile kMAX values are not self-consistent"]
        assert result.stderr.startswith("warning: rtx-4090/fp32: builder: Profile kMAX values are not self-consistent")
        record = json.loads((tmp_path / run / "rtx-4090" / "fp32" / "engine.json").read_text())
        assert record["builder_warnings"] == [target["warnings"][0].removeprefix("builder: ")]


def test_an_entry_renamed_into_place_during_a_lookup_is_a_miss_not_evicted(tmp_path, monkeypatch):
    """A run's lookup can race another's store: the entry may appear between the lookup's looks. It is whole
    (entries are renamed into place), so it must not be taken for a damaged one and evicted (seen in CI: a build
    whose digest watcher looked while the same run stored its engine left an empty cache)."""
    cache = BuildCache(tmp_path / "cache")
    key = "ab" * 32
    entry, whole = cache.entry(key), tmp_path / "whole"
    whole.mkdir()
    for name in ENGINE_FILES:
        (whole / name).write_text(name)
    entry.parent.mkdir(parents=True)
    looks = {"is_dir": Path.is_dir, "is_file": Path.is_file}

    def arriving(method: str):
        def look(self: Path) -> bool:
            if (self == entry or self.parent == entry) and whole.exists():
                whole.rename(entry)  # the other run's store lands right after this look
                return False
            return looks[method](self)
        return look

    monkeypatch.setattr(Path, "is_dir", arriving("is_dir"))
    monkeypatch.setattr(Path, "is_file", arriving("is_file"))
    assert cache.lookup(key) is None  # not there when looked: a miss
    monkeypatch.undo()
    assert sorted(p.name for p in entry.iterdir()) == sorted(ENGINE_FILES)
    assert cache.lookup(key) == entry


def test_a_cache_entry_removed_while_it_is_taken_is_a_miss(digits_model, digits_profiles, tmp_path, monkeypatch):
    """A cache cleaner (`find ~/.cache/compile -mtime +30 -delete`) or a concurrent eviction can remove an entry
    between its lookup and its hard links: the target is then built, not failed."""
    args, cache = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"]), tmp_path / "cache"
    build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    link = compiler.engines.target.link_or_copy

    def cleaner_strikes(source: Path, target: Path) -> None:
        shutil.rmtree(source.parent)
        link(source, target)

    monkeypatch.setattr(compiler.engines.target, "link_or_copy", cleaner_strikes)
    [target] = build_engines(*args, tmp_path / "b", options=BuildOptions(cache_dir=cache)).targets
    assert (target.status, target.cache_hit) == ("ok", False)
    plan = (tmp_path / "b/rtx-4090/fp32/engine.plan").read_bytes()
    assert json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())["sha256"] == hashlib.sha256(
        plan).hexdigest()
    monkeypatch.setattr(compiler.engines.target, "link_or_copy", link)
    assert build_engines(*args, tmp_path / "c",
                         options=BuildOptions(cache_dir=cache)).targets[0].cache_hit  # stored again


def _put_in_place_repeatedly(target: Path, rounds: int) -> int:
    """One of several processes finishing the same target over and over; returns how many attempts failed."""
    failures = 0
    for i in range(rounds):
        with compiler.core.files.staging_folder(target.parent, target.name) as staging:
            (staging / "engine.plan").write_bytes(os.urandom(64))
            (staging / "engine.json").write_text(json.dumps({"writer": os.getpid(), "round": i}))
            try:
                compiler.core.files.replace_dir(target, staging)
            except OSError:
                failures += 1
    return failures


def test_runs_finishing_the_same_target_at_once_each_put_a_whole_folder_in_place(tmp_path):
    """Two CI jobs building into one shared OUT: every put-in-place succeeds, the target is always one whole
    folder, and nothing is left beside it (seen before: ENOTEMPTY failures and leftover `.fp32-old-*` folders)."""
    import multiprocessing

    target = tmp_path / "rtx-4090" / "fp32"
    target.parent.mkdir()
    with multiprocessing.get_context("fork").Pool(3) as pool:
        failures = pool.starmap(_put_in_place_repeatedly, [(target, 150)] * 3)
    assert failures == [0, 0, 0]
    assert sorted(p.name for p in target.iterdir()) == ["engine.json", "engine.plan"]
    assert [p.name for p in target.parent.iterdir()] == ["fp32"]


@pytest.mark.parametrize("refused", [False, True], ids=["put in place", "refused"])
def test_without_an_atomic_swap_the_previous_folder_goes_aside_and_comes_back_on_failure(tmp_path, monkeypatch,
                                                                                         refused):
    """Filesystems without RENAME_EXCHANGE (NFS): two renames, and a refused one puts the previous folder back."""
    def no_swap(first, second):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(compiler.core.files, "_exchange", no_swap)
    target, staging = tmp_path / "fp32", tmp_path / ".fp32-0123456789ab"
    for folder, text in ((target, "previous"), (staging, "new")):
        folder.mkdir()
        (folder / "engine.json").write_text(text)
    if not refused:
        compiler.core.files.replace_dir(target, staging)
        assert (target / "engine.json").read_text() == "new"
        assert [p.name for p in tmp_path.iterdir()] == ["fp32"]
        return
    rename, calls = os.rename, []

    def refusing(source, destination):
        calls.append(source)
        if Path(source) == staging and len(calls) > 1:  # the first try meets the previous folder (ENOTEMPTY)
            raise OSError(errno.EIO, "Input/output error")
        return rename(source, destination)

    monkeypatch.setattr(os, "rename", refusing)
    with pytest.raises(OSError, match="Input/output error"):
        compiler.core.files.replace_dir(target, staging)
    assert (target / "engine.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging.name, "fp32"]  # the staging folder is its caller's


def test_a_ci_log_gets_a_line_per_finished_target_and_unfolded_paths(digits_model, digits_profiles, tmp_path):
    """Not a terminal: no progress bars (which would show only at the end) but a line as each target ends, no
    escape codes, and a table wide enough that paths are not folded mid-word."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TERM")}
    out = tmp_path / "a-rather-long-folder-name-as-ci-runners-make-them" / "build"
    result = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--sku", "rtx-3090",
                     "--precision", "fp32", "--out", out, "--cache-dir", tmp_path / "cache", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == ["rtx-4090 fp32: ok", "rtx-3090 fp32: ok"]
    assert "\x1b" not in result.stdout + result.stderr
    assert str(out / "rtx-4090" / "fp32") in result.stdout


def test_the_python_api_checks_what_the_cli_checks(digits_model, digits_profiles, tmp_path):
    """A library caller gets the same InvalidInput as the CLI's options would, not a TensorRT error or a build of
    something else; a single SKU or precision may be given as a plain string."""
    args = (digits_model, digits_profiles)
    for options, fragment in (({"optimization_level": 9}, "--optimization-level 9: give 0 to 5"),
                              ({"workspace_mb": -1}, "--workspace-mb -1: give 1 to 1048576")):
        with pytest.raises(InvalidInput, match=fragment):
            plan_builds(*args, ["rtx-4090"], ["fp32"], tmp_path / "out",
                        options=BuildOptions(cache_dir=tmp_path / "cache", **options))
    [target] = build_engines(*args, "rtx-4090", "fp32", tmp_path / "out",
                             options=BuildOptions(cache_dir=tmp_path / "cache")).targets
    assert (target.sku, target.precision, target.status) == ("rtx-4090", "fp32", "ok")


def test_layers_json_keeps_node_names_with_commas_brackets_and_spaces(tmp_path):
    """Exporters name nodes freely: the ONNX nodes a kernel covers come back whole, and constants (weights) are not
    counted among a kernel's inputs."""
    weights = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 1, 3, 3)).astype(np.float32), "w")
    names = ["conv, first [0]", "relu]x[y"]
    model = save_model(tmp_path / "odd.onnx", [
        helper.make_node("Conv", ["image", "w"], ["c"], name=names[0], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["out"], name=names[1]),
    ], [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4, 8, 8])], [weights])
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      image: {min: [1, 1, 8, 8], opt: [2, 1, 8, 8], "
                        "max: [4, 1, 8, 8]}\n")
    [target] = build_engines(model, profiles, ["rtx-4090"], ["fp32"], tmp_path / "out",
                             options=BuildOptions(cache_dir=tmp_path / "cache")).targets
    assert target.status == "ok", target.errors
    layers = _layers(tmp_path / "out", "rtx-4090", "fp32")
    assert set(names) <= {node for layer in layers for node in layer["onnx_nodes"]}, layers
    [conv] = [layer for layer in layers if names[0] in layer["onnx_nodes"]]
    assert conv["input_types"] == ["Float"] and conv["constant_types"] == ["Float"] and conv["precision"] == "Float"
