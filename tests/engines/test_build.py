"""compile build on the trained digits CNN with real TensorRT-RTX builds: the matrix, failures, bad inputs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from compiler.engines import BuildOptions, build_engines, plan_builds, run_job
from tests.support.cli import EXAMPLES, assert_clean_error, files_of_at_most, run_cli
from tests.support.digits import run_build
from tests.support.engines import CC_BITS, PRECISIONS, SKUS, layers_of, matrix_args
from tests.support.onnx_files import save_model


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
            assert record["plan_header"] == {
                "magic": "vtrt",
                "version": "1.7.1.116",
                "compute_capabilities": [capability],
                "compute_capability_mask": CC_BITS[capability],
            }
            assert {"engine.plan", "engine.json", "layers.json", "build.log"} <= {p.name for p in folder.iterdir()}


def test_fp32_fuses_conv_batchnorm_relu(matrix):
    out, _, _ = matrix
    chains = [set(layer["onnx_nodes"]) for layer in layers_of(out, "rtx-4090", "fp32")]
    for block in ("0", "3"):
        conv = f"/features/features.{block}/Conv"
        bn = f"/features/features.{int(block) + 1}/BatchNormalization"
        relu = f"/features/features.{int(block) + 2}/Relu"
        assert any({conv, bn, relu} <= chain for chain in chains), chains
    assert all("Int8" not in layer["output_types"] for layer in layers_of(out, "rtx-4090", "fp32"))
    assert {layer["precision"] for layer in layers_of(out, "rtx-4090", "fp32")} == {"Float", None}


def test_int8_build_runs_int8_convolutions(matrix):
    out, _, _ = matrix
    # INT8 activations in, INT8 weights among the constants: not merely dequantized weights in a float kernel
    int8_convs = [
        layer
        for layer in layers_of(out, "rtx-3090", "int8")
        if layer["input_types"] == ["Int8"]
        and "Int8" in layer["constant_types"]
        and any("Conv" in node for node in layer["onnx_nodes"])
    ]
    assert len(int8_convs) >= 2, layers_of(out, "rtx-3090", "int8")
    assert all(layer["precision"] == "Int8" for layer in int8_convs)
    # the kernels that quantize (Float in, Int8 out) compute in Float; the summary counts both kinds
    quantizing = [
        layer
        for layer in layers_of(out, "rtx-3090", "int8")
        if layer["input_types"] == ["Float"] and layer["output_types"] == ["Int8"]
    ]
    assert quantizing and all(layer["precision"] == "Float" for layer in quantizing)
    document = json.loads((out / "rtx-3090" / "int8" / "layers.json").read_text())
    assert document["kernel_precisions"]["Int8"] >= len(int8_convs)
    # the counts add up: kernels with no typed tensors (shape arithmetic) are counted as "none"
    assert sum(document["kernel_precisions"].values()) == document["kernels"] == len(document["layers"])
    assert document["kernel_precisions"].get("none", 0) == sum(
        1 for layer in document["layers"] if layer["precision"] is None
    )
    # each kernel says which of the engine's two shape profiles it belongs to, and each profile has the convs
    assert {layer["profile"] for layer in document["layers"]} == {0, 1}
    for profile in (0, 1):
        assert sum(1 for layer in int8_convs if layer["profile"] == profile) == len(int8_convs) // 2
    maxpools = [layer for layer in layers_of(out, "rtx-3090", "fp32") if layer["type"] == "maxpool"]
    assert maxpools and all(layer["constant_types"] == [] for layer in maxpools)


def test_fp16_build_runs_half_kernels(matrix):
    out, _, _ = matrix
    half = [layer for layer in layers_of(out, "rtx-4090", "fp16") if "Half" in layer["output_types"]]
    assert any(any("Conv" in node for node in layer["onnx_nodes"]) for layer in half)
    convs = [
        layer for layer in layers_of(out, "rtx-4090", "fp16") if "/features/features.3/Conv" in layer["onnx_nodes"]
    ]
    assert convs and all(layer["precision"] == "Half" for layer in convs), convs


def test_second_run_is_all_cache_hits(matrix, int8_calibration, workspace):
    out, cache, _ = matrix
    again = workspace / "engines-again"
    result = run_cli(*matrix_args(again, cache, int8_calibration))
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


def test_changes_rebuild_only_what_they_must(matrix, digits_profiles, int8_calibration, workspace):
    _, cache, _ = matrix
    # A new SKU next to cached ones builds only the new SKU's engines.
    out = workspace / "engines-more"
    result = run_cli(
        *matrix_args(out, cache, int8_calibration, skus=("rtx-4090", "rtx-5090"), precisions=("fp32", "fp16"))
    )
    assert result.exit_code == 0, result.stderr
    hits = {(t["sku"], t["precision"]): t["cache_hit"] for t in json.loads(result.stdout)["targets"]}
    assert hits == {
        ("rtx-4090", "fp32"): True,
        ("rtx-4090", "fp16"): True,
        ("rtx-5090", "fp32"): False,
        ("rtx-5090", "fp16"): False,
    }
    # One changed profile changes every engine that holds it, and nothing else is redone:
    # the FP16 model is converted once per source model.
    changed = yaml.safe_load(digits_profiles.read_text())
    changed["profiles"][1]["shapes"]["image"]["max"] = [128, 1, 8, 8]
    profiles = workspace / "changed.yaml"
    profiles.write_text(yaml.safe_dump(changed))
    converted = list(cache.glob("prepared/*/fp16.onnx"))
    assert len(converted) == 1
    stamp = converted[0].stat().st_mtime_ns
    result = run_cli(
        *matrix_args(
            workspace / "engines-changed",
            cache,
            int8_calibration,
            skus=("rtx-4090",),
            precisions=("fp32", "fp16"),
            profiles=profiles,
        )
    )
    assert result.exit_code == 0, result.stderr
    assert [t["cache_hit"] for t in json.loads(result.stdout)["targets"]] == [False, False]
    assert converted[0].stat().st_mtime_ns == stamp
    record = json.loads((workspace / "engines-changed/rtx-4090/fp32/engine.json").read_text())
    assert record["profiles"][1]["shapes"]["image"]["max"] == [128, 1, 8, 8]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_failed_target_does_not_stop_the_others(tmp_path, jobs):
    # TensorRT-RTX cannot compile an FP32 GEMM for Turing (SM75): a real builder failure, in this process
    # or in a worker process (whose progress reaches the table through the parent).
    out = tmp_path / "out"
    result = run_build(out, ("rtx-2080-ti", "rtx-4090"), ("fp32",), "--cache-dir", tmp_path / "c", "--jobs", jobs)
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


def test_a_write_failure_fails_each_target_without_a_partial_plan(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = run_build(out, ("rtx-4090", "rtx-3090"), ("fp32",), "--cache-dir", cache, preexec_fn=files_of_at_most(64))
    line = assert_clean_error(result, 1, "2 of 2 builds failed", "could not write the engine files", "File too large")
    assert "rtx-4090/fp32" in line
    for sku in ("rtx-4090", "rtx-3090"):
        assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
    assert not list(cache.glob("engines/*/*/engine.plan"))
    targets = json.loads((out / "build.json").read_text())["targets"]
    assert [t["status"] for t in targets] == ["failed", "failed"]
    assert all("File too large" in t["errors"][0] for t in targets)


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_outputs_and_cache_entries_get_the_permissions_the_umask_gives(tmp_path, umask):
    """Results are read by others (serving fleets, later CI steps, teammates sharing a cache): no owner-only
    staging permissions may leak into them."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = run_build(
        out, ("rtx-4090",), ("fp32",), "--cache-dir", cache, "--json", preexec_fn=lambda: os.umask(umask)
    )
    assert result.exit_code == 0, result.stderr
    [entry] = cache.glob("engines/*/*")
    folders = [out, out / "rtx-4090", out / "rtx-4090" / "fp32", entry]
    files = [out / "build.json", *(out / "rtx-4090" / "fp32").iterdir(), *entry.iterdir()]
    assert len(files) == 9
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {oct(0o777 & ~umask)}
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o666 & ~umask)}


def test_an_engine_the_cache_cannot_keep_is_delivered_with_a_warning(tmp_path):
    """The cache is an optimization: where it cannot take the entry (a full cache volume; here a file where its
    engines folder belongs) the built engine still lands in --out, and the run says it was not kept."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    cache.mkdir()
    (cache / "engines").write_text("in the way\n")
    result = run_build(out, ("rtx-4090",), ("fp32",), "--cache-dir", cache, "--json")
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
    write = (
        "import sys; from pathlib import Path; from compiler.core.files import write_atomic; "
        "write_atomic(Path(sys.argv[1]), bytes(1 << 20))"
    )
    done = subprocess.run(
        [sys.executable, "-c", write, str(target)], capture_output=True, text=True, preexec_fn=files_of_at_most(64)
    )
    assert done.returncode == 1 and "File too large" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["engine.json"]
    assert target.read_text() == "previous\n"


@pytest.mark.parametrize(
    ("change", "code", "fragments"),
    [
        (["--sku", "rtx-9999"], 2, ["unknown SKU 'rtx-9999'", "rtx-4090"]),
        (["--sku", "h100"], 3, ["backend tensorrt is not installed", "trt-compile[tensorrt]"]),
        (["--sku", "rtx-4090", "--precision", "int8"], 2, ["int8 needs calibration", "--data", "--calibration"]),
        (["--sku", "rtx-3090", "--precision", "fp8"], 2, ["fp8 needs compute capability 8.9", "rtx-3090"]),
        (["--sku", "rtx-4090", "--precision", "bf12"], 2, ["unknown precision 'bf12'"]),
        (
            ["--sku", "rtx-4090", "--backend", "tensorrt-rtx", "--sku", "h100"],
            2,
            ["cannot target compute capability 9.0"],
        ),
        (["--sku", "rtx-4090", "--method", "bogus"], 2, ["--method bogus chooses how --data is calibrated"]),
        (
            ["--sku", "rtx-4090", "--precision", "int8", "--data", EXAMPLES / "digits.npz", "--method", "bogus"],
            2,
            ["--method bogus: choose from minmax, entropy, percentile"],
        ),
        (
            ["--sku", "rtx-4090", "--precision", "int8", "--data", EXAMPLES / "digits.npz", "--calibration", EXAMPLES],
            2,
            ["--calibration and --data both given"],
        ),
    ],
)
def test_invalid_inputs_fail_before_any_build(change, code, fragments, digits_model, digits_profiles, tmp_path):
    args = [
        "build",
        digits_model,
        "--profiles",
        digits_profiles,
        "--out",
        tmp_path / "out",
        "--cache-dir",
        tmp_path / "cache",
    ]
    if "--precision" not in change:
        args += ["--precision", "fp32"]
    assert_clean_error(run_cli(*args, *change), code, *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "path", "fragments"),
    [
        ("--out", "a-file/out", ["--out", "a-file/out", "cannot write there", "Not a directory"]),
        ("--out", "a-file", ["--out", "a-file", "a file is in the way"]),
        ("--cache-dir", "a-file/cache", ["--cache-dir", "a-file/cache", "Not a directory"]),
        ("--cache-dir", "a-file", ["--cache-dir", "a-file", "a file is in the way"]),
    ],
)
def test_unusable_output_or_cache_folder_fails_before_any_build(option, path, fragments, tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    folders = {"--out": tmp_path / "out", "--cache-dir": tmp_path / "cache", option: tmp_path / path}
    out, cache = folders["--out"], folders["--cache-dir"]
    result = run_build(out, ("rtx-4090",), ("fp32",), "--json", "--cache-dir", cache, cwd=tmp_path)
    assert_clean_error(result, 2, *fragments, "choose another folder")
    assert result.stdout == ""
    assert (tmp_path / "a-file").read_text() == "not a folder\n"
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("**/engine.plan"))


def test_facts_that_cannot_be_remembered_do_not_fail_the_build(digits_model, tmp_path):
    """The memo of the model's digest is an optimization: where it cannot be written the build still succeeds."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "facts").write_text("in the way\n")
    result = run_build(tmp_path / "out", ("rtx-4090",), ("fp32",), "--cache-dir", cache, "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "out" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert record["model_sha256"] == hashlib.sha256(digits_model.read_bytes()).hexdigest()
    assert (cache / "engines" / record["cache_key"][:2] / record["cache_key"] / "engine.plan").is_file()


@pytest.mark.parametrize("calibrating", [False, True])
def test_bad_profile_fails_fast(digits_model, digits_data, tmp_path, calibrating):
    profiles = tmp_path / "p.yaml"
    profiles.write_text(
        "profiles:\n  - name: online\n    shapes:\n"
        "      image: {min: [4, 1, 8, 8], opt: [2, 1, 8, 8], max: [8, 1, 8, 8]}\n"
    )
    precision = ["--precision", "int8", "--data", digits_data] if calibrating else ["--precision", "fp32"]
    result = run_cli(
        "build",
        digits_model,
        "--profiles",
        profiles,
        "--sku",
        "rtx-4090",
        *precision,
        "--out",
        tmp_path / "out",
        "--cache-dir",
        tmp_path / "cache",
    )
    assert_clean_error(result, 2, "profile 'online'", "input 'image' dim 0", "min <= opt <= max")
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1  # nothing but the error line
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "calibrations").exists()


def test_a_run_refused_for_its_profiles_still_remembers_the_new_model_digest(tmp_path):
    """The CLI leaves without the interpreter's teardown; a digest still being computed when the run stops (a
    64 MB model refused for its profiles within milliseconds) is finished and remembered first, whole."""
    width = 1 << 22
    model = save_model(
        tmp_path / "wide.onnx",
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        [numpy_helper.from_array(np.ones((4, width), dtype=np.float32), "w")],
    )
    profiles = tmp_path / "p.yaml"
    profiles.write_text("profiles:\n  - name: p\n    shapes:\n      x: {min: [4, 4], opt: [2, 4], max: [8, 4]}\n")
    result = run_build(
        tmp_path / "out", ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", model=model, profiles=profiles
    )
    assert_clean_error(result, 2, "profile 'p'", "min <= opt <= max")
    [memo] = (tmp_path / "cache" / "facts" / "model").iterdir()
    assert json.loads(memo.read_text())["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()


def test_calibration_of_another_model_is_refused(int8_calibration, tmp_path):
    other = tmp_path / "other.onnx"
    shutil.copy(int8_calibration / "model.onnx", other)  # a different model file than the one calibrated
    result = run_build(tmp_path / "out", ("rtx-4090",), ("int8",), "--calibration", int8_calibration, model=other)
    assert_clean_error(result, 2, "calibration.json", "calibrated from another model")


def test_cancel_through_the_progress_monitor_keeps_previous_output(digits_model, digits_profiles, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    [job] = plan_builds(
        digits_model,
        digits_profiles,
        ["rtx-4090"],
        ["fp32"],
        out,
        options=BuildOptions(cache_dir=cache, use_cache=False),
    )
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
        results.append(
            build_engines(
                digits_model, digits_profiles, list(SKUS), ["fp32"], out, options=BuildOptions(jobs=2, cache_dir=cache)
            )
        )

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
    args = ("--data", digits_data, "--cache-dir", cache, "--json")
    first = run_build(tmp_path / "a", ("rtx-4090",), ("int8",), *args)
    assert first.exit_code == 0, first.stderr
    [calibrated] = cache.glob("calibrations/*/int8-minmax/calibration.json")
    assert json.loads(calibrated.read_text())["precision"] == "int8"
    layers = layers_of(tmp_path / "a", "rtx-4090", "int8")
    assert any("Int8" in layer["input_types"] for layer in layers)
    second = run_build(tmp_path / "b", ("rtx-4090",), ("int8",), *args)
    assert second.exit_code == 0, second.stderr
    assert [t["cache_hit"] for t in json.loads(second.stdout)["targets"]] == [True]
    # Calibrating while planning reports its progress (the CLI shows it as rows of samples), and the
    # calibration appears in the cache only when complete: concurrent runs may read it.
    reports, fresh = [], tmp_path / "fresh-cache"

    def report(*progress) -> None:
        reports.append(progress)
        assert not list(fresh.glob("calibrations/*/int8-minmax"))

    plan_builds(
        digits_model,
        digits_profiles,
        ["rtx-4090"],
        ["int8"],
        tmp_path / "d",
        options=BuildOptions(data=digits_data, cache_dir=fresh),
        calibration_progress=report,
    )
    assert reports[-1] == ("held-out", 359, 359)
    assert ("calibrate", 1438, 1438) in reports and reports[0][1] == 0
    assert [p.name for p in fresh.glob("calibrations/*/*")] == ["int8-minmax"]
