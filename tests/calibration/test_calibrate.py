"""compile calibrate on the bundled digits CNN with real data, real onnxruntime and real TensorRT-RTX builds."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from calibration import CalibrationResult, ImagePreprocess, calibrate, convert_fp16
from calibration.calibrators import chunks, read_trt_cache
from compiler.backends.base import BuildSpec
from compiler.backends.tensorrt_rtx import TensorRTRTXBackend
from compiler.core.errors import InvalidInput
from compiler.core.options import CalibrationOptions
from compiler.core.profiles import ShapeProfile
from compiler.data.datasets import NpzDataset, open_dataset
from compiler.data.model import load_model
from compiler.data.sampling import MIN_JUDGED, split
from tests.support.cli import CliResult, assert_clean_error, files_of_at_most, run_cli
from tests.support.digits import build_args, calibrate_args, run_calibrate

RUNS = {
    "int8-minmax": ("int8", "minmax"),
    "int8-entropy": ("int8", "entropy"),
    "int8-percentile": ("int8", "percentile"),
    "fp8-minmax": ("fp8", "minmax"),
    "fp16": ("fp16", "minmax"),
}
DIGITS_SAMPLES = 1797
HOLDOUT = round(DIGITS_SAMPLES * 0.2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits_model, digits_data) -> dict[str, CalibrationResult]:
    """Every precision/method once on the full digits set (1438 calibration + 359 held-out samples)."""
    root = tmp_path_factory.mktemp("calibrate")
    return {
        name: calibrate(digits_model, digits_data, root / name, CalibrationOptions(precision=p, method=m))
        for name, (p, m) in RUNS.items()
    }


def _initializer_types(path: Path) -> set[int]:
    return {init.data_type for init in onnx.load(path).graph.initializer}


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(path).graph.node]


@pytest.mark.parametrize("name", list(RUNS))
def test_accuracy_against_fp32_on_held_out_digits(runs, name):
    result = runs[name]
    assert result.holdout_samples == HOLDOUT and result.report.holdout_samples == HOLDOUT
    assert result.samples == DIGITS_SAMPLES - HOLDOUT
    (logits,) = result.report.outputs
    assert logits.name == "logits" and logits.kind == "class-scores" and logits.samples == HOLDOUT
    assert logits.top1_agreement >= 0.99, logits
    assert logits.cosine_mean >= 0.99, logits
    assert logits.cosine_min >= 0.95, logits
    assert 0 < logits.max_abs_error < 3.0, logits
    report = json.loads((Path(result.out) / "report.json").read_text())
    assert report["outputs"][0]["cosine_mean"] == pytest.approx(logits.cosine_mean)
    assert report["outputs"][0]["top1_agreement"] == pytest.approx(logits.top1_agreement)


@pytest.mark.parametrize("name", list(RUNS))
def test_calibration_json_contract(runs, name, digits_model, digits_data):
    result = runs[name]
    out = Path(result.out)
    record = json.loads((out / "calibration.json").read_text())
    for key in ("precision", "method", "model_sha256", "data_sha256", "samples", "ranges"):
        assert key in record
    assert record["precision"] == RUNS[name][0]
    assert record["model_sha256"] == load_model(digits_model).sha256
    import hashlib

    assert record["data_sha256"] == hashlib.sha256(digits_data.read_bytes()).hexdigest()
    assert record["samples"] == DIGITS_SAMPLES - HOLDOUT
    json.dumps(result.model_dump(mode="json"))  # the API result is JSON-dumpable
    quantized = onnx.load(out / "model.onnx")
    original = onnx.load(digits_model)
    assert {(p.key, p.value) for p in original.metadata_props} <= {(p.key, p.value) for p in quantized.metadata_props}
    if record["precision"] == "fp16":
        assert record["method"] is None and record["ranges"] == {}
    else:
        assert record["method"] == RUNS[name][1]
        assert "image" in record["ranges"]
        # ranges of the activations around the quantized ops only: the inputs and outputs of the two Convs and of
        # the classifier's Gemm
        assert len(record["ranges"]) == 6 and record["quantized_nodes"] == 3
        for tensor in record["ranges"].values():
            assert tensor["min"] <= tensor["max"] and tensor["amax"] >= 0


@pytest.mark.parametrize("name", list(RUNS))
def test_each_phase_is_timed_apart(runs, name):
    """calibration.json says what each phase took (the benchmarks and the release report read it), within the
    whole run's seconds."""
    record = json.loads((Path(runs[name].out) / "calibration.json").read_text())
    checks = ["fp16 range"] if RUNS[name][0] == "fp16" else ["build proof", "sensitivity"]
    assert sorted(record["phases"]) == sorted(["quantize", "held-out comparison", *checks])
    assert all(spent > 0 for spent in record["phases"].values()), record["phases"]
    assert sum(record["phases"].values()) <= record["seconds"]


def test_int8_model_is_qdq_with_int8_weights_and_float_bias(runs):
    path = Path(runs["int8-minmax"].out) / "model.onnx"
    ops = _ops(path)
    assert ops.count("QuantizeLinear") >= 3 and ops.count("DequantizeLinear") >= 6
    assert "BatchNormalization" not in ops  # pre-processing folded Conv+BatchNormalization
    proto = onnx.load(path)
    inits = {i.name: i for i in proto.graph.initializer}
    zero_points = [inits[n.input[2]] for n in proto.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.data_type == TensorProto.INT8 for z in zero_points)
    assert all(not np.any(onnx.numpy_helper.to_array(z)) for z in zero_points)  # symmetric
    per_channel = [
        n
        for n in proto.graph.node
        if n.op_type == "DequantizeLinear"
        and inits.get(n.input[0]) is not None
        and onnx.numpy_helper.to_array(inits[n.input[1]]).size > 1
    ]
    assert len(per_channel) == 3  # two convolutions and the classifier, per output channel
    assert all(inits[n.input[0]].data_type == TensorProto.INT8 for n in per_channel)
    # QuantizeBias: False keeps biases float (TensorRT rejects int32 bias DQ)
    assert not any(i.data_type == TensorProto.INT32 for i in proto.graph.initializer)


def test_fp8_model_uses_float8_and_opset_19(runs):
    path = Path(runs["fp8-minmax"].out) / "model.onnx"
    assert TensorProto.FLOAT8E4M3FN in _initializer_types(path)
    proto = onnx.load(path)
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 19
    record = json.loads((Path(runs["fp8-minmax"].out) / "calibration.json").read_text())
    image = record["ranges"]["image"]
    assert image["scale"] == pytest.approx(image["amax"] / 448, rel=1e-6)  # TensorRT's amax/448 FP8 scale
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    scale = next(inits[n.input[1]] for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "image")
    assert float(scale) == pytest.approx(image["amax"] / 448, rel=1e-5)


def test_fp16_model_keeps_float32_io(runs):
    path = Path(runs["fp16"].out) / "model.onnx"
    proto = onnx.load(path)
    assert TensorProto.FLOAT16 in _initializer_types(path)
    assert [i.type.tensor_type.elem_type for i in proto.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in proto.graph.output] == [TensorProto.FLOAT]
    assert not (Path(runs["fp16"].out) / "calibration.cache").exists()
    assert runs["fp16"].report.outputs[0].cosine_mean > 0.9999


def test_entropy_and_percentile_really_use_histograms(runs):
    """onnxruntime's default entropy (128 bins) equals MinMax; ours clips outliers."""
    minmax = runs["int8-minmax"].ranges
    for name in ("int8-entropy", "int8-percentile"):
        result = runs[name]
        assert result.options["num_bins"] == 2048
        assert set(result.ranges) == set(minmax)
        clipped = [t for t, r in result.ranges.items() if r.amax < 0.95 * minmax[t].amax]
        assert clipped, f"{name} ranges equal MinMax: {result.ranges}"
        assert all(r.amax <= minmax[t].amax * 1.0001 for t, r in result.ranges.items())


@pytest.mark.parametrize("name", ["int8-minmax", "int8-entropy", "int8-percentile", "fp8-minmax"])
def test_tensorrt_calibration_cache_format(runs, name, digits_model):
    result = runs[name]
    text = (Path(result.out) / "calibration.cache").read_text()
    lines = text.splitlines()
    expected = "MinMaxCalibration" if result.method == "minmax" else "EntropyCalibration2"
    assert re.fullmatch(rf"TRT-\d+-{expected}", lines[0]), lines[0]
    assert result.trt_cache_header == lines[0]
    original_tensors = {i.name for i in onnx.load(digits_model).graph.input}
    for node in onnx.load(digits_model).graph.node:
        original_tensors.update(node.output)
    assert len(lines) > 5
    for line in lines[1:]:
        assert re.fullmatch(r"[^:]+: [0-9a-f]{8}", line), line
        tensor, hexed = line.rsplit(": ", 1)
        assert tensor in original_tensors
        scale = struct.unpack(">f", bytes.fromhex(hexed))[0]
        assert scale == pytest.approx(result.ranges[tensor].amax / 127, rel=1e-6)
    header, scales = read_trt_cache(text)
    assert header == lines[0] and scales["image"] == pytest.approx(1 / 127, rel=1e-3)


@pytest.mark.parametrize(
    ("name", "kernel_type"),
    [("int8-entropy", "Int8"), ("int8-percentile", "Int8"), ("fp8-minmax", "FP8"), ("fp16", "Half")],
)
def test_models_build_with_tensorrt_rtx(runs, name, kernel_type):
    profile = ShapeProfile.model_validate(
        {"name": "p", "shapes": {"image": {"min": [1, 1, 8, 8], "opt": [8, 1, 8, 8], "max": [32, 1, 8, 8]}}}
    )
    outcome = TensorRTRTXBackend().build(BuildSpec(Path(runs[name].out) / "model.onnx", (profile,), ("8.9",)))
    assert outcome.plan is not None, outcome.errors
    convolutions = [layer for layer in outcome.layers if any(node.endswith("/Conv") for node in layer["onnx_nodes"])]
    assert convolutions
    kernel_types = {t for layer in outcome.layers for t in layer["input_types"] + layer["output_types"]}
    assert kernel_type in kernel_types, outcome.layers
    assert any(kernel_type in layer["input_types"] + layer["output_types"] for layer in convolutions)


def test_rerun_reuses_result_and_option_change_recomputes(tmp_path, digits_model, digits_data):
    out = tmp_path / "out"
    args = ("calibrate", digits_model, "--data", digits_data, "--out", out, "--method", "entropy", "--json")
    first = run_cli(*args)
    assert first.exit_code == 0, first.stderr
    first_doc = json.loads(first.stdout)
    assert first_doc["reused"] is False
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    started = time.perf_counter()
    second = run_cli(*args)
    assert second.exit_code == 0, second.stderr
    doc = json.loads(second.stdout)
    assert doc["reused"] is True and doc["cache_key"] == first_doc["cache_key"]
    assert doc["report"] == first_doc["report"] and doc["ranges"] == first_doc["ranges"]
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert time.perf_counter() - started < first_doc["seconds"] + 15
    # a tampered output is not trusted; another option is another result
    (out / "model.onnx").write_bytes(b"broken")
    assert calibrate(digits_model, digits_data, out, CalibrationOptions(method="entropy")).reused is False
    other = calibrate(digits_model, digits_data, out, CalibrationOptions(method="entropy", samples=200))
    assert other.reused is False and other.samples == 200 and other.cache_key != doc["cache_key"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_staged_calibration_replaces_the_folder_only_when_complete(tmp_path, digits_model, digits_data):
    """The build cache's mode: concurrent runs share the folder, so nobody may see it half-written."""
    out = tmp_path / "calibrations" / "int8-minmax"
    calibrate(
        digits_model, digits_data, out, CalibrationOptions(samples=200)
    )  # an earlier calibration with another key
    before = _snapshot(out)
    abandoned = out.with_name(f".int8-minmax-{'c' * 12}")  # a killed run's staging folder, unlocked
    abandoned.mkdir()
    os.utime(abandoned, (time.time() - 120,) * 2)
    seen = []

    def look(phase: str, done: int, total: int) -> None:
        seen.append(phase)
        assert _snapshot(out) == before  # still the earlier, whole folder

    result = calibrate(digits_model, digits_data, out, CalibrationOptions(samples=300), staged=True, progress=look)
    assert {"calibrate", "held-out"} <= set(seen)
    assert result.reused is False and result.samples == 300 and result.out == str(out)
    record = json.loads((out / "calibration.json").read_text())
    assert record["cache_key"] == result.cache_key != json.loads(before["calibration.json"])["cache_key"]
    assert record["out"] == str(out)  # the final folder, not the staging one it was written in
    assert [p.name for p in out.parent.iterdir()] == ["int8-minmax"]  # no staging folder left
    assert calibrate(digits_model, digits_data, out, CalibrationOptions(samples=300), staged=True).reused is True


def test_staged_calibration_keeps_what_a_concurrent_run_put_in_place_first(tmp_path, digits_model, digits_data):
    first = calibrate(digits_model, digits_data, tmp_path / "first", CalibrationOptions(samples=300))
    out = tmp_path / "shared" / "int8-minmax"

    def finish_first(phase: str, done: int, total: int) -> None:
        if phase == "held-out" and done == 0:  # the other run renames its folder into place now
            shutil.copytree(tmp_path / "first", out)

    result = calibrate(
        digits_model, digits_data, out, CalibrationOptions(samples=300), staged=True, progress=finish_first
    )
    assert result.reused is True and result.cache_key == first.cache_key
    assert _snapshot(out) == _snapshot(tmp_path / "first")
    assert [p.name for p in out.parent.iterdir()] == ["int8-minmax"]


def test_interrupted_staged_calibration_leaves_the_previous_folder_whole(tmp_path, digits_model, digits_data):
    out = tmp_path / "calibrations" / "int8-minmax"
    calibrate(digits_model, digits_data, out, CalibrationOptions(samples=200))
    before = _snapshot(out)

    def interrupt(phase: str, done: int, total: int) -> None:
        if phase == "held-out":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(digits_model, digits_data, out, CalibrationOptions(samples=300), staged=True, progress=interrupt)
    assert _snapshot(out) == before
    assert [p.name for p in out.parent.iterdir()] == ["int8-minmax"]
    assert calibrate(digits_model, digits_data, out, CalibrationOptions(samples=200), staged=True).reused is True


@pytest.mark.parametrize("command", ["calibrate", "build"])
def test_sigterm_while_calibrating_cleans_up_and_exits_143(tmp_path, command, digits_data):
    """What a cancelled CI job sends: the run stops like Ctrl-C, its temporary and staging folders go, and
    nothing is left that looks like a finished calibration."""
    work, out, cache = tmp_path / "tmp", tmp_path / "out", tmp_path / "cache"
    work.mkdir()
    args = (
        calibrate_args(out, "--method", "entropy")
        if command == "calibrate"
        else build_args(
            out, ("rtx-4090",), ("int8",), "--data", digits_data, "--method", "entropy", "--cache-dir", cache
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", *map(str, args)],
        env={**os.environ, "TMPDIR": str(work)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(work.glob("calibrate-*")):  # calibrating now
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert_clean_error(CliResult(process.returncode, stdout, stderr), 143, "error: terminated")
    assert not list(work.glob("calibrate-*"))  # (a session id file of a library stays)
    assert not list(tmp_path.rglob("calibration.json")) and not list(tmp_path.rglob("model.onnx"))
    assert not list(cache.glob("calibrations/*/*"))


def test_cli_gates_fail_with_exit_1_and_pass_otherwise(tmp_path, digits_model, digits_data):
    base = ("calibrate", digits_model, "--data", digits_data, "--out", tmp_path / "o", "--samples", "300")
    ok = run_cli(*base, "--min-cosine", "0.99", "--min-top1", "0.99", "--json")
    assert ok.exit_code == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["passed"] is True
    gates = {g["name"]: g for g in doc["gates"]}  # the defaults of docs/check.md, but for the thresholds given
    assert set(gates) == {"min-samples", "finite", "min-cosine", "min-cosine-low", "min-sqnr", "min-top1", "min-top5"}
    assert gates["min-cosine"]["threshold"] == 0.99 and gates["min-sqnr"]["threshold"] == 12.0
    assert gates["min-sqnr"]["value"] > 25, gates  # the digits CNN in int8: far from the gate
    failed = run_cli(*base, "--min-cosine", "0.9999999")
    line = assert_clean_error(failed, 1, "min-cosine", "logits")
    assert "report.json" in line
    assert "Held-out accuracy" in failed.stdout
    too_close = run_cli(*base, "--max-abs-error", "0.000001", "--json")
    assert too_close.exit_code == 1 and json.loads(too_close.stdout)["passed"] is False


def test_cli_table_output(tmp_path):
    done = run_calibrate(tmp_path / "o", "--precision", "fp16")
    assert done.exit_code == 0, done.stderr
    assert "Held-out accuracy against FP32" in done.stdout and "logits" in done.stdout
    said = " ".join(done.stdout.split())  # Rich wraps the line at the terminal's width
    assert "(quantize " in said and " s, held-out comparison " in said and " s, fp16 range " in said
    assert "Traceback" not in done.stderr


def _npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.fixture(scope="module")
def digits_images(digits_data) -> np.ndarray:
    return np.load(digits_data, allow_pickle=False)["image"]


def test_dataset_errors_are_clean(tmp_path, digits_images):
    x = digits_images[:100]
    cases = {
        "wrong-name": (_npz(tmp_path / "a.npz", pixels=x), ["a.npz", "image", "pixels"]),
        "extra": (_npz(tmp_path / "b.npz", image=x, label=np.zeros(100, np.int64)), ["label", "not inputs"]),
        "dtype": (_npz(tmp_path / "c.npz", image=x.astype(np.float64)), ["float64", "float32"]),
        "shape": (_npz(tmp_path / "d.npz", image=x[:, :, :4, :]), ["image", "[100, 1, 4, 8]", "axis 2"]),
        "rank": (_npz(tmp_path / "e.npz", image=x[:, 0]), ["rank 3", "rank 4"]),
        "empty": (_npz(tmp_path / "f.npz", image=x[:0]), ["empty"]),
        "nan": (
            _npz(
                tmp_path / "g.npz",
                image=np.where(np.arange(100)[:, None, None, None] == 42, np.nan, x).astype(np.float32),
            ),
            ["NaN", "sample 42"],
        ),
        "one-sample": (_npz(tmp_path / "h.npz", image=x[:1]), ["at least 2"]),
        "not-npz": (tmp_path / "i.csv", ["unsupported data"]),
    }
    (tmp_path / "i.csv").write_text("1,2,3\n")
    for name, (data, fragments) in cases.items():
        done = run_calibrate(tmp_path / name, data=data)
        assert_clean_error(done, 2, *fragments)
        assert not (tmp_path / name / "calibration.json").exists()


def test_model_onnxruntime_cannot_run_is_a_clean_error(tmp_path):
    node = helper.make_node("Mystery", ["image"], ["logits"], domain="example.custom")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["B", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", 10])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    )
    onnx.save(model, tmp_path / "mystery.onnx")
    done = run_calibrate(tmp_path / "o", model=tmp_path / "mystery.onnx")
    assert_clean_error(done, 2, "mystery.onnx", "onnxruntime cannot run", "Mystery")


def test_bad_options_are_clean_errors(tmp_path):
    bad = run_calibrate(tmp_path / "o", "--method", "kl")
    assert_clean_error(bad, 2, "--method", "minmax, entropy, percentile")
    bad = run_calibrate(tmp_path / "o", "--precision", "int4")
    assert_clean_error(bad, 2, "--precision")


def test_unusable_out_folder_is_a_clean_error(tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    done = run_calibrate(tmp_path / "a-file" / "o")
    assert_clean_error(done, 2, "--out", "a-file/o", "cannot write there", "Not a directory")
    assert (tmp_path / "a-file").read_text() == "not a folder\n"


def test_a_failed_write_is_a_clean_environment_error_and_leaves_no_complete_looking_folder(tmp_path):
    out = tmp_path / "o"
    done = run_calibrate(out, "--json", preexec_fn=files_of_at_most(16))
    assert_clean_error(done, 3, "File too large", "free space and permissions")
    assert done.stdout == ""
    assert not (out / "calibration.json").exists()


def test_seeded_split_and_sample_cap():
    a, b = split(100, 0.2, None, seed=0), split(100, 0.2, None, seed=0)
    assert np.array_equal(a.calibration, b.calibration) and np.array_equal(a.holdout, b.holdout)
    assert len(a.holdout) == 20 and len(a.calibration) == 80
    assert not set(a.calibration) & set(a.holdout)
    c = split(100, 0.2, None, seed=1)
    assert not np.array_equal(a.holdout, c.holdout)
    capped = split(100, 0.2, 30, seed=0)
    assert len(capped.calibration) == 30 and set(capped.calibration) <= set(a.calibration)
    assert np.array_equal(capped.holdout, a.holdout)  # fewer than MIN_JUDGED held out: all of them
    # the fraction is of the samples used (issue 43, footgun 8), at least MIN_JUDGED
    huge = split(216_000, 0.2, 64, seed=0)
    assert (len(huge.calibration), len(huge.holdout)) == (64, MIN_JUDGED)
    assert len(split(216_000, 0.2, 4000, seed=0).holdout) == 1000
    assert len(split(216_000, 500, 64, seed=0).holdout) == 500  # a count is a count
    assert len(split(100, 10, None, seed=0).holdout) == 10
    assert len(split(100, 0.2, None, seed=0, batch=16).calibration) == 80
    assert len(split(100, 0.2, 70, seed=0, batch=16).calibration) == 64
    with pytest.raises(InvalidInput):
        split(10, 10, None, seed=0)


def test_chunks_keep_one_batch_size_per_collect_call():
    grouped = chunks(np.arange(103), 10, 35)
    sizes = [[len(b) for b in chunk] for chunk in grouped]
    assert sizes == [[10, 10, 10], [10, 10, 10], [10, 10, 10], [10], [3]]
    assert np.array_equal(np.concatenate([b for chunk in grouped for b in chunk]), np.arange(103))


def test_histograms_merge_across_chunks(tmp_path, digits_model, digits_data, runs):
    """A 1 MiB chunk budget splits 1438 samples into ~30 onnxruntime calls: MinMax is identical, entropy close."""
    small = calibrate(digits_model, digits_data, tmp_path / "minmax", CalibrationOptions(method="minmax", chunk_mb=1))
    assert {k: (v.min, v.max) for k, v in small.ranges.items()} == {
        k: (v.min, v.max) for k, v in runs["int8-minmax"].ranges.items()
    }
    entropy = calibrate(
        digits_model, digits_data, tmp_path / "entropy", CalibrationOptions(method="percentile", chunk_mb=1)
    )
    for tensor, r in entropy.ranges.items():
        assert r.amax == pytest.approx(runs["int8-percentile"].ranges[tensor].amax, rel=0.1)
    assert entropy.report.outputs[0].top1_agreement >= 0.99


def test_compressed_and_stored_npz_read_the_same(tmp_path, digits_model, digits_data, digits_images):
    stored = _npz(tmp_path / "stored.npz", image=digits_images)
    model = load_model(digits_model)
    indices = np.array([0, 5, 6, 700, 1796])
    a, b = open_dataset(digits_data, model), open_dataset(stored, model)
    assert isinstance(a, NpzDataset) and a.members["image"].stored_at is None  # compressed: streamed
    assert b.members["image"].stored_at is not None  # stored: read by offset
    assert np.array_equal(a.read(indices)["image"], digits_images[indices])
    assert np.array_equal(b.read(indices)["image"], digits_images[indices])
    a.close()
    b.close()


def test_image_folder_of_digits_matches_npz(tmp_path, digits_model, digits_images):
    from PIL import Image

    folder = tmp_path / "digits"
    folder.mkdir()
    for i, image in enumerate(digits_images[:400]):
        Image.fromarray(np.round(image[0] * 255).astype(np.uint8), mode="L").save(folder / f"{i:04d}.png")
    (folder / "preprocess.yaml").write_text("color: L\nscale: 255\nlayout: NCHW\n")
    dataset = open_dataset(folder, load_model(digits_model))
    assert dataset.count == 400
    read = dataset.read(np.arange(10))["image"]
    assert read.shape == (10, 1, 8, 8) and read.dtype == np.float32
    assert np.abs(read - digits_images[:10]).max() <= 0.5 / 255 + 1e-6
    result = calibrate(digits_model, folder, tmp_path / "out", CalibrationOptions(method="percentile", batch_size=16))
    assert result.data_kind == "images" and result.samples == 320
    assert result.report.outputs[0].cosine_mean >= 0.99 and result.report.outputs[0].top1_agreement >= 0.99


def test_image_folder_of_photos_with_mean_std(tmp_path, digits_model):
    from PIL import Image
    from sklearn.datasets import load_sample_images

    folder = tmp_path / "photos"
    (folder / "nested").mkdir(parents=True)
    count = 0
    for photo in load_sample_images().images:  # two real JPEG photos shipped with scikit-learn
        for row in range(0, 400, 100):
            for col in range(0, 600, 150):
                target = folder / ("nested" if count % 2 else "") / f"tile{count:02d}.jpg"
                Image.fromarray(photo[row : row + 100, col : col + 150]).save(target, quality=95)
                count += 1
    (folder / "preprocess.yaml").write_text("color: L\nsize: [8, 8]\nscale: 255\nmean: [0.5]\nstd: [0.25]\n")
    spec = ImagePreprocess(color="L", size=(8, 8), mean=[0.5], std=[0.25])
    dataset = open_dataset(folder, load_model(digits_model))
    assert dataset.count == 32
    first = sorted(p for p in folder.rglob("*.jpg"))[0]
    with Image.open(first) as image:
        expected = np.asarray(image.convert("L").resize((8, 8), Image.Resampling.BILINEAR), np.float32)
    expected = (expected / 255 - 0.5) / 0.25
    assert np.allclose(dataset.read(np.array([0]))["image"][0, 0], expected, atol=1e-5)
    result = calibrate(digits_model, folder, tmp_path / "out", CalibrationOptions(holdout=8), preprocess=spec)
    assert result.samples == 24 and result.holdout_samples == 8
    assert result.report.outputs[0].cosine_mean > 0.9


def test_image_folder_errors(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    done = run_calibrate(tmp_path / "o", data=folder)
    assert_clean_error(done, 2, "preprocess.yaml")
    (folder / "preprocess.yaml").write_text("color: L\n")
    done = run_calibrate(tmp_path / "o", data=folder)
    assert_clean_error(done, 2, "no images")
    (folder / "preprocess.yaml").write_text("color: RGB\n")
    (folder / "a.png").write_bytes(b"not a png")
    done = run_calibrate(tmp_path / "o", data=folder)
    assert_clean_error(done, 2, "a.png")
    (folder / "preprocess.yaml").write_text("colour: L\n")
    done = run_calibrate(tmp_path / "o", data=folder)
    assert_clean_error(done, 2, "preprocess.yaml", "colour")


def test_rgb_folder_for_a_one_channel_model_is_a_shape_error(tmp_path):
    from PIL import Image

    folder = tmp_path / "rgb"
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (8, 8), (i * 40, 10, 10)).save(folder / f"{i}.png")
    (folder / "preprocess.yaml").write_text("color: RGB\n")
    done = run_calibrate(tmp_path / "o", data=folder)
    assert_clean_error(done, 2, "image", "axis 1 is 3, expected 1")


def test_convert_fp16_api(tmp_path, digits_model):
    dst = tmp_path / "fp16.onnx"
    convert_fp16(digits_model, dst)
    proto = onnx.load(dst)
    assert TensorProto.FLOAT16 in {i.data_type for i in proto.graph.initializer}
    assert proto.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert {p.key for p in proto.metadata_props} >= {"task", "accuracy"}
    load_model(dst)  # passes the checker


def test_an_fp16_conversion_stopped_while_saving_leaves_no_partial_model(tmp_path, digits_model, monkeypatch):
    """`compile build --precision fp16` converts into the build cache: a stop while the model is being written must
    not leave a half-written staging file there."""
    import calibration.calibrators

    save_model = calibration.calibrators.save_model

    def stopped_midway(proto, path, data_name=None):
        save_model(proto, path, data_name)
        Path(path).write_bytes(Path(path).read_bytes()[:100])  # as far as the write got
        raise KeyboardInterrupt

    monkeypatch.setattr(calibration.calibrators, "save_model", stopped_midway)
    with pytest.raises(KeyboardInterrupt):
        convert_fp16(digits_model, tmp_path / "prepared" / "fp16.onnx")
    assert list((tmp_path / "prepared").iterdir()) == []


def test_old_opset_model_is_upgraded_for_per_channel(tmp_path, digits_model, digits_data):
    proto = onnx.load(digits_model)  # the ops it uses have the same signature at opset 12
    next(o for o in proto.opset_import if o.domain == "").version = 12
    for node in proto.graph.node:
        kept = [a for a in node.attribute if a.name != "training_mode"]  # BatchNormalization-15 only
        del node.attribute[:]
        node.attribute.extend(kept)
    onnx.save(proto, tmp_path / "opset12.onnx")
    load_model(tmp_path / "opset12.onnx")
    result = calibrate(tmp_path / "opset12.onnx", digits_data, tmp_path / "out", CalibrationOptions(samples=256))
    quantized = onnx.load(Path(result.out) / "model.onnx")
    assert next(o.version for o in quantized.opset_import if o.domain in ("", "ai.onnx")) >= 13
    assert any(
        n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute) for n in quantized.graph.node
    )
    assert result.report.outputs[0].top1_agreement >= 0.99


def test_constant_node_weights_are_preprocessed(tmp_path, digits_data, digits_model):
    """Weights held as Constant nodes (not initializers) are quantized after onnxruntime's pre-processing."""
    proto = onnx.load(digits_model)
    constants = [helper.make_node("Constant", [], [init.name], value=init) for init in proto.graph.initializer]
    nodes = constants + list(proto.graph.node)
    del proto.graph.initializer[:]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    onnx.save(proto, tmp_path / "constants.onnx")
    result = calibrate(tmp_path / "constants.onnx", digits_data, tmp_path / "out", CalibrationOptions(samples=256))
    quantized = onnx.load(Path(result.out) / "model.onnx")
    weights = [i for i in quantized.graph.initializer if i.data_type == TensorProto.INT8 and len(i.dims) >= 2]
    assert len(weights) == 3
    assert result.report.outputs[0].top1_agreement >= 0.99
