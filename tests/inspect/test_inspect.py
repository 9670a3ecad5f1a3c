"""`compile inspect` on real models with the real TensorRT-RTX parser: summaries, partitions, bad files."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.core.errors import InvalidInput
from compiler.data.model import load_model
from compiler.inspect.summary import inspect_model
from tests.support import synthetic
from tests.support.cli import REPO, assert_clean_error, run_cli
from tests.support.onnx_files import ONNX_LIGHT, external_model, point_external_data, save_model

ORT_DATASETS = Path(onnxruntime.__file__).parent / "datasets"


def inspect_json(*args) -> dict:
    result = run_cli("inspect", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def value(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


# --- the bundled trained CNN -------------------------------------------------------------------------------


def test_digits_model_summary_and_partition(digits_model):
    report = inspect_json(digits_model)
    model = report["model"]
    assert model["inputs"] == [{"name": "image", "dtype": "float32", "shape": ["B", 1, 8, 8]}]
    assert model["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["B", 10]}]
    assert model["op_counts"]["BatchNormalization"] == 2
    assert model["op_counts"]["Conv"] == 2
    assert model["node_count"] == 9 == sum(model["op_counts"].values())
    assert model["opsets"] == {"ai.onnx": 17}
    assert model["custom_domains"] == [] and model["control_flow"] == []
    assert model["metadata"]["task"] == "digits-classification"
    # Parameters: exactly the elements of the initializers, counted independently here.
    proto = onnx.load(digits_model)
    expected = sum(int(np.prod(t.dims)) for t in proto.graph.initializer)
    assert model["parameter_count"] == expected == 10122
    assert model["parameter_bytes"] == 4 * expected
    assert model["size_bytes"] == digits_model.stat().st_size
    assert len(model["sha256"]) == 64

    trt = report["tensorrt"]
    assert trt["backend"] == "tensorrt-rtx" and trt["version"] == "1.7.1.116"
    assert trt["status"]["status"] == "ok"
    assert trt["supported"] is True
    assert trt["unsupported"] == []
    assert trt["partitions"] == [{"nodes": [[0, 8]], "node_count": 9, "inputs": ["image"], "outputs": ["logits"]}]
    assert 0 <= trt["parse_seconds"] < 10
    assert report["profiles"] is None
    assert trt["build_check"] is None


def test_digits_model_human_output(digits_model):
    result = run_cli("inspect", digits_model, env={**os.environ, "COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert str(digits_model) in out
    assert "fully supported" in out and "not fully supported" not in out
    assert "tensorrt-rtx 1.7.1.116" in out
    assert "BatchNormalization" in out and "image" in out and "logits" in out
    assert "[B, 1, 8, 8]" in out
    assert "10,122 parameters" in out
    assert "error:" not in result.stderr


def test_build_check_builds_every_profile(digits_model, digits_profiles):
    report = inspect_json(digits_model, "--profiles", digits_profiles, "--build-check", "--sku", "rtx-3090")
    check = report["tensorrt"]["build_check"]
    assert check["status"] == "ok", check
    assert "rtx-3090" in check["detail"] and "8.6" in check["detail"]
    assert "online" in check["detail"] and "batch" in check["detail"]
    assert report["profiles"] == {
        "file": str(digits_profiles),
        "names": ["online", "batch"],
        "valid": True,
        "errors": [],
    }


def test_build_check_usage_and_environment_errors(digits_model, digits_profiles):
    # Dynamic batch and no profiles: nothing to build with (usage error), but the report is still printed.
    result = run_cli("inspect", digits_model, "--build-check", "--json")
    assert_clean_error(result, 2, str(digits_model), "--build-check needs --profiles", "image")
    assert json.loads(result.stdout)["tensorrt"]["build_check"]["status"] == "skipped"
    # An H100 is built by datacenter TensorRT, which is not installed here: environment problem.
    result = run_cli("inspect", digits_model, "--profiles", digits_profiles, "--build-check", "--sku", "h100")
    assert_clean_error(result, 3, "h100", "tensorrt is not installed", "pip install")
    assert_clean_error(
        run_cli("inspect", digits_model, "--build-check", "--sku", "rtx-9999"), 2, "unknown SKU 'rtx-9999'", "rtx-4090"
    )
    assert_clean_error(run_cli("inspect", digits_model, "--sku", "rtx-4090"), 2, "--build-check")
    assert_clean_error(run_cli("inspect", digits_model, "--backend", "tensorrt"), 3, "tensorrt", "pip install")
    assert_clean_error(run_cli("inspect", digits_model, "--backend", "onnxruntime"), 2, "unknown backend")


def test_json_is_one_document_and_nothing_else(digits_model, digits_profiles, tmp_path):
    bad_profiles = tmp_path / "bad.yaml"
    bad_profiles.write_text(
        "profiles:\n  - name: tiny\n    shapes:\n"
        "      image: {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [8, 1, 9, 8]}\n"
    )
    runs = [
        (0, [digits_model, "--profiles", digits_profiles, "--build-check"]),
        (0, [ORT_DATASETS / "logreg_iris.onnx"]),
        (2, [digits_model, "--profiles", bad_profiles]),
    ]
    for code, args in runs:
        result = run_cli("inspect", *args, "--json")
        assert result.exit_code == code, result.stderr
        document = json.loads(result.stdout)  # the whole of stdout is one JSON document
        assert set(document) == {"format_version", "model", "tensorrt", "profiles", "cache"}
        assert document["format_version"] == 1
        assert result.stdout.strip().startswith("{") and result.stdout.strip().endswith("}")
        assert "Traceback" not in result.stderr
    # On a bad file nothing at all goes to stdout.
    result = run_cli("inspect", tmp_path / "missing.onnx", "--json")
    assert result.stdout == ""
    assert_clean_error(result, 2, "missing.onnx")


# --- third-party models that PyPI packages ship --------------------------------------------------------------


def test_onnx_light_inception_v2_is_fully_supported():
    path = ONNX_LIGHT / "light_inception_v2.onnx"
    report = inspect_json(path)
    model, trt = report["model"], report["tensorrt"]
    assert model["opsets"] == {"ai.onnx": 9}
    assert model["producer"].startswith("onnx-caffe2")
    # Old IR: initializers are also listed as graph inputs; only the fed input counts.
    assert model["inputs"] == [{"name": "data_0", "dtype": "float32", "shape": [1, 3, 224, 224]}]
    assert model["outputs"] == [{"name": "prob_1", "dtype": "float32", "shape": [1, 1000]}]
    nodes = len(onnx.load(path, load_external_data=False).graph.node)
    assert model["node_count"] == nodes == 916
    assert model["op_counts"]["Conv"] == 69
    assert trt["supported"] is True and trt["unsupported"] == []
    assert trt["partitions"] == [
        {"nodes": [[0, nodes - 1]], "node_count": nodes, "inputs": ["data_0"], "outputs": ["prob_1"]}
    ]


def test_onnxruntime_logreg_iris_ml_ops_are_unsupported():
    report = inspect_json(ORT_DATASETS / "logreg_iris.onnx")
    model, trt = report["model"], report["tensorrt"]
    assert model["opsets"] == {"ai.onnx.ml": 1}
    assert model["inputs"] == [{"name": "float_input", "dtype": "float32", "shape": [3, 2]}]
    assert {"name": "probabilities", "dtype": "non-tensor", "shape": None} in model["outputs"]
    assert model["custom_domains"] == []  # ai.onnx.ml is a standard domain, just not TensorRT's
    assert trt["supported"] is False
    assert trt["partitions"] == []
    unsupported = {u["op"]: u for u in trt["unsupported"]}
    assert set(unsupported) == {"LinearClassifier", "Normalizer", "ZipMap"}
    for node in unsupported.values():
        assert node["domain"] == "ai.onnx.ml"
        assert "no layer or registered plugin" in node["reason"]
        assert "ai.onnx.ml::" + node["op"] in node["reason"]
    result = run_cli("inspect", ORT_DATASETS / "logreg_iris.onnx")
    assert result.exit_code == 0
    assert "not fully supported" in result.stdout and "LinearClassifier" in result.stdout


# --- partitions around what TensorRT cannot take ------------------------------------------------------------


def test_custom_domain_op_splits_the_model(tmp_path):
    path = save_model(
        tmp_path / "custom.onnx",
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu_in"),
            helper.make_node("FancyOp", ["a"], ["b"], name="fancy", domain="com.example"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid_out"),
        ],
        [value("x", TensorProto.FLOAT, ["N", 4])],
        [value("y", TensorProto.FLOAT, ["N", 4])],
        opsets=(("", 17), ("com.example", 1)),
    )
    report = inspect_json(path)
    assert report["model"]["custom_domains"] == ["com.example"]
    assert report["model"]["opsets"] == {"ai.onnx": 17, "com.example": 1}
    assert report["model"]["op_counts"] == {"Relu": 1, "com.example::FancyOp": 1, "Sigmoid": 1}
    trt = report["tensorrt"]
    assert trt["supported"] is False
    [node] = trt["unsupported"]
    assert (node["index"], node["name"], node["op"], node["domain"]) == (1, "fancy", "FancyOp", "com.example")
    assert "com.example::FancyOp" in node["reason"] and "plugin" in node["reason"].lower()
    assert trt["partitions"] == [
        {"nodes": [[0, 0]], "node_count": 1, "inputs": ["x"], "outputs": ["a"]},
        {"nodes": [[2, 2]], "node_count": 1, "inputs": ["b"], "outputs": ["y"]},
    ]
    result = run_cli("inspect", path)
    assert "custom domains: com.example" in result.stdout and "fancy" in result.stdout


def test_unsupported_op_in_the_middle_gives_two_partitions(tmp_path):
    weight = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")
    path = save_model(
        tmp_path / "unique.onnx",
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
            helper.make_node("Relu", ["h"], ["a"], name="relu"),
            helper.make_node("Unique", ["a"], ["u"], name="unique", sorted=1),
            helper.make_node("Neg", ["u"], ["n"], name="neg"),
            helper.make_node("Abs", ["n"], ["y"], name="abs"),
        ],
        [value("x", TensorProto.FLOAT, [2, 4])],
        [value("y", TensorProto.FLOAT, ["U"])],
        [weight],
    )
    trt = inspect_json(path)["tensorrt"]
    assert trt["supported"] is False
    assert [(u["name"], u["op"], u["domain"]) for u in trt["unsupported"]] == [("unique", "Unique", "ai.onnx")]
    assert "Unique" in trt["unsupported"][0]["reason"]
    # The weight is inside the first partition, not a tensor crossing its boundary.
    assert trt["partitions"] == [
        {"nodes": [[0, 1]], "node_count": 2, "inputs": ["x"], "outputs": ["a"]},
        {"nodes": [[3, 4]], "node_count": 2, "inputs": ["u"], "outputs": ["y"]},
    ]


def test_control_flow_is_listed(tmp_path):
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [], [value("t", TensorProto.FLOAT, [4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [value("e", TensorProto.FLOAT, [4])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [
            value("i", TensorProto.INT64, []),
            value("cond_in", TensorProto.BOOL, []),
            value("acc_in", TensorProto.FLOAT, [4]),
        ],
        [value("cond_out", TensorProto.BOOL, []), value("acc_out", TensorProto.FLOAT, [4])],
    )
    path = save_model(
        tmp_path / "control.onnx",
        [
            helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
            helper.make_node("If", ["c"], ["branch"], name="choose", then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Loop", ["trips", "", "branch"], ["y"], name="repeat", body=body),
        ],
        [value("x", TensorProto.FLOAT, [4])],
        [value("y", TensorProto.FLOAT, [4])],
        [
            numpy_helper.from_array(np.array(0, np.float32), "zero"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
        ],
    )
    report = inspect_json(path)
    model = report["model"]
    # the If's condition is computed from input x; the Loop's trip count is a constant of the model
    assert model["control_flow"] == ["If choose (decided by input 'x')", "Loop repeat"]
    assert model["node_count"] == 4
    # op_counts includes the nodes of the branches and the loop body.
    assert model["op_counts"]["Relu"] == 1 and model["op_counts"]["Neg"] == 1 and model["op_counts"]["Add"] == 1
    assert report["tensorrt"]["status"]["status"] == "ok"
    shown = " ".join(run_cli("inspect", path).stdout.split())  # as a terminal wraps it
    assert "control flow: If choose (decided by input 'x'), Loop repeat" in shown


# --- synthetic models the size of real ones -----------------------------------------------------------------


def test_synthetic_resnets_are_fully_supported(tmp_path):
    for depth, params, convs in ((18, 11_699_112, 20), (50, 25_610_152, 53)):
        path = synthetic.resnet(tmp_path / f"resnet{depth}.onnx", depth=depth)
        onnx.checker.check_model(str(path), full_check=True)
        report = inspect_json(path)
        model, trt = report["model"], report["tensorrt"]
        assert model["inputs"] == [{"name": "image", "dtype": "float32", "shape": ["B", 3, 224, 224]}]
        assert model["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["B", 1000]}]
        assert model["op_counts"]["Conv"] == convs == model["op_counts"]["BatchNormalization"]
        assert model["op_counts"]["Add"] == (8 if depth == 18 else 16)
        assert model["parameter_count"] == params  # torchvision's count plus BN running statistics
        assert trt["supported"] is True and len(trt["partitions"]) == 1 and trt["unsupported"] == []
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"image": np.random.default_rng(0).random((2, 3, 224, 224), np.float32)})[0]
    assert logits.shape == (2, 1000) and np.isfinite(logits).all()


def test_small_bert_is_fully_supported_and_runs(tmp_path):
    path = synthetic.bert_base(tmp_path / "bert_small.onnx", layers=2, hidden=64, heads=4, vocab=100, max_positions=32)
    onnx.checker.check_model(str(path), full_check=True)
    report = inspect_json(path)
    model, trt = report["model"], report["tensorrt"]
    assert model["inputs"] == [
        {"name": "input_ids", "dtype": "int64", "shape": ["B", "S"]},
        {"name": "attention_mask", "dtype": "int64", "shape": ["B", "S"]},
    ]
    assert model["outputs"] == [{"name": "last_hidden_state", "dtype": "float32", "shape": ["B", "S", 64]}]
    for op, count in {"LayerNormalization": 5, "Softmax": 2, "Erf": 2, "Gather": 2}.items():
        assert model["op_counts"][op] == count, op
    assert trt["supported"] is True and trt["unsupported"] == []
    assert trt["partitions"][0]["inputs"] == ["attention_mask", "input_ids"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = np.arange(14, dtype=np.int64).reshape(2, 7)
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    assert hidden.shape == (2, 7, 64) and np.isfinite(hidden).all()


def test_bert_base_sized_model(tmp_path):
    """~110M parameters, ~440 MB: inspect reads it once for the checker and once for TensorRT, in seconds."""
    path = synthetic.bert_base(tmp_path / "bert_base.onnx")
    assert 400e6 < path.stat().st_size < 480e6
    started = time.perf_counter()
    report = inspect_json(path)
    seconds = time.perf_counter() - started
    model, trt = report["model"], report["tensorrt"]
    assert 105e6 < model["parameter_count"] < 115e6
    assert model["op_counts"]["LayerNormalization"] == 25
    assert model["op_counts"]["Softmax"] == 12
    assert trt["supported"] is True and len(trt["partitions"]) == 1 and trt["unsupported"] == []
    assert trt["parse_seconds"] < 10
    assert seconds < 45, f"inspect took {seconds:.1f} s"


# --- weights kept as external data ----------------------------------------------------------------------------


def test_external_data_inside_the_folder_works(tmp_path, digits_model):
    path = external_model(tmp_path / "model", digits_model, location="weights/digits.bin")
    weights = tmp_path / "model" / "weights" / "digits.bin"
    assert weights.is_file() and path.stat().st_size < 5000
    report = inspect_json(path)
    assert report["model"]["parameter_count"] == 10122
    assert report["model"]["size_bytes"] == path.stat().st_size + weights.stat().st_size
    assert report["tensorrt"]["supported"] is True
    loaded = load_model(path)
    assert loaded.external_files == (weights.resolve(),)
    # From another working directory too: locations are relative to the model, not the caller.
    result = run_cli("inspect", path.resolve(), "--json", cwd=REPO / "profiles")
    assert result.exit_code == 0 and json.loads(result.stdout)["tensorrt"]["supported"] is True


@pytest.mark.parametrize("location", ["../secret.bin", "weights/../../secret.bin", "ABSOLUTE"])
def test_external_data_outside_the_folder_is_refused_unread(tmp_path, digits_model, location):
    path = external_model(tmp_path / "model", digits_model)
    secret = tmp_path / "secret.bin"
    # A FIFO: whoever opens it for reading blocks forever, so a hang here would mean someone read it.
    os.mkfifo(secret)
    location = str(secret) if location == "ABSOLUTE" else location
    point_external_data(path, location)
    result = run_cli("inspect", path, cwd=REPO, timeout=120)
    expected = "must be a path relative" if os.path.isabs(location) else "points outside the model's folder"
    assert_clean_error(result, 2, str(path), location, expected)


def test_external_data_symlink_leaving_the_folder_is_refused(tmp_path, digits_model):
    path = external_model(tmp_path / "model", digits_model)
    outside = tmp_path / "elsewhere.bin"
    shutil.move(tmp_path / "model" / "weights.bin", outside)
    (tmp_path / "model" / "weights.bin").symlink_to(outside)
    assert_clean_error(run_cli("inspect", path), 2, str(path), "weights.bin", "points outside")


def test_missing_and_truncated_external_data(tmp_path, digits_model):
    path = external_model(tmp_path / "missing", digits_model)
    (tmp_path / "missing" / "weights.bin").unlink()
    assert_clean_error(run_cli("inspect", path), 2, str(path), "weights.bin", "is missing")

    path = external_model(tmp_path / "truncated", digits_model)
    weights = tmp_path / "truncated" / "weights.bin"
    size = weights.stat().st_size
    os.truncate(weights, size // 2)
    line = assert_clean_error(run_cli("inspect", path), 2, str(path), "weights.bin", "truncated")
    assert f"the file has {size // 2}" in line

    path = external_model(tmp_path / "dir", digits_model)
    weights = tmp_path / "dir" / "weights.bin"
    weights.unlink()
    weights.mkdir()
    assert_clean_error(run_cli("inspect", path), 2, str(path), "is not a regular file")


# --- files that are not models --------------------------------------------------------------------------------


def test_bad_model_files(tmp_path, digits_model):
    data = digits_model.read_bytes()
    cases = {
        "truncated.onnx": (data[: len(data) // 3], "not a valid ONNX model"),
        "empty.onnx": (b"", "model file is empty"),
        "notes.onnx": (b"name: resnet\nlayers: 50\nthis is a text file, not a protobuf\n", "not a valid ONNX model"),
        "zeros.onnx": (b"\0" * 100, "not a valid ONNX model"),
    }
    for name, (content, problem) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert_clean_error(run_cli("inspect", path), 2, str(path), problem)
        with pytest.raises(InvalidInput, match=problem):
            load_model(path)
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    assert_clean_error(run_cli("inspect", folder), 2, str(folder), "is not a file")
    missing = tmp_path / "missing.onnx"
    assert_clean_error(run_cli("inspect", missing), 2, str(missing), "not found")


def test_a_model_the_checker_rejects(tmp_path):
    # Parses as protobuf, but the node reads a tensor nobody produces.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["ghost"], ["y"], name="relu")],
        "g",
        [value("x", TensorProto.FLOAT, [2])],
        [value("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "dangling.onnx"
    onnx.save(model, path)
    assert_clean_error(run_cli("inspect", path), 2, str(path), "ONNX checker rejected the model", "ghost")


def test_truncation_anywhere_never_crashes(tmp_path, digits_model):
    """Every prefix of a real model either inspects or is refused as invalid input; nothing else."""
    data = digits_model.read_bytes()
    path = tmp_path / "prefix.onnx"
    outcomes = set()
    for size in range(1, len(data), 397):
        path.write_bytes(data[:size])
        try:
            inspect_model(path)
            outcomes.add("ok")
        except InvalidInput as exc:
            assert str(exc).startswith(str(path))
            outcomes.add("invalid")
    assert "invalid" in outcomes


def test_names_with_brackets_are_printed_literally(tmp_path, digits_model):
    """Rich markup in a path or tensor name must be shown as text, not interpreted (a closing tag would even crash)."""
    path = tmp_path / "[red]model[bold].onnx"
    shutil.copy(digits_model, path)
    result = run_cli("inspect", path, env={**os.environ, "COLUMNS": "300"})
    assert result.exit_code == 0, result.stderr
    assert str(path) in result.stdout


# --- the inspect cache ------------------------------------------------------------------------------------


def test_a_second_inspect_of_the_same_model_takes_tensorrts_view_from_the_cache(digits_model, tmp_path):
    """The view is keyed by model digest and TensorRT version: what the cache holds is what the second run says
    (proved by editing the entry), a damaged entry is parsed again and replaced, and another model misses. (The
    whole report's stat-keyed memo, which would answer first, is cleared before each run: it is tested below.)"""
    env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "cache")}
    memo = tmp_path / "cache" / "inspect-reports"
    first = run_cli("inspect", digits_model, "--json", env=env)
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["cache"] == {"source": "miss", "reason": "not in the local cache"}
    [entry] = (tmp_path / "cache" / "inspections").iterdir()
    cached = json.loads(entry.read_text())
    assert cached["model_sha256"] == json.loads(first.stdout)["model"]["sha256"]
    assert cached["tensorrt"]["version"] == "1.7.1.116" and cached["profile_errors"] is None
    cached["tensorrt"]["partitions"][0]["outputs"] = ["from-the-cache"]
    entry.write_text(json.dumps(cached))
    shutil.rmtree(memo)
    second = json.loads(run_cli("inspect", digits_model, "--json", env=env).stdout)
    assert second["tensorrt"]["partitions"][0]["outputs"] == ["from-the-cache"]
    assert second["cache"] == {"source": "hit", "reason": None}

    entry.write_text("{not json")
    shutil.rmtree(memo)
    third = run_cli("inspect", digits_model, "--json", env=env)
    assert third.exit_code == 0, third.stderr
    assert json.loads(third.stdout)["tensorrt"] == json.loads(first.stdout)["tensorrt"] | {
        "parse_seconds": json.loads(third.stdout)["tensorrt"]["parse_seconds"]
    }
    assert json.loads(entry.read_text())["tensorrt"]["partitions"][0]["outputs"] != ["from-the-cache"]

    other = tmp_path / "other.onnx"
    model = onnx.load(digits_model)
    model.doc_string = "another model"
    onnx.save(model, other)
    assert run_cli("inspect", other, "--json", env=env).exit_code == 0
    assert len(list((tmp_path / "cache" / "inspections").iterdir())) == 2


def test_an_unchanged_model_is_inspected_from_its_memo_until_a_file_it_reads_changes(digits_model, tmp_path):
    """The whole report is remembered by the model file's stat and the profiles' bytes: what the memo holds is what
    the second run says (proved by editing it); a rewrite of the model (same bytes: a new stat) or other profiles
    inspect again, and a memo that is not ours is no memo."""
    env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "cache")}
    model = tmp_path / "model.onnx"
    shutil.copyfile(digits_model, model)
    first = json.loads(run_cli("inspect", model, "--json", env=env).stdout)
    [entry] = (tmp_path / "cache" / "inspect-reports").iterdir()
    remembered = json.loads(entry.read_text())
    remembered["report"]["model"]["producer"] = "from-the-memo"
    entry.write_text(json.dumps(remembered))
    second = json.loads(run_cli("inspect", model, "--json", env=env).stdout)
    assert second["model"]["producer"] == "from-the-memo" and second["cache"]["source"] == "hit"

    model.write_bytes(model.read_bytes())  # the same bytes, written again: the stat moved
    third = json.loads(run_cli("inspect", model, "--json", env=env).stdout)
    assert third["model"]["producer"] == first["model"]["producer"] != "from-the-memo"

    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles:\n  - name: one\n    shapes:\n      image: {min: [1, 1, 8, 8], opt: [2, 1, 8, 8], "
                        "max: [4, 1, 8, 8]}\n")  # fmt: skip
    with_profiles = run_cli("inspect", model, "--profiles", profiles, "--json", env=env)
    assert json.loads(with_profiles.stdout)["profiles"]["names"] == ["one"], with_profiles.stderr
    assert len(list((tmp_path / "cache" / "inspect-reports").iterdir())) == 3

    for entry in (tmp_path / "cache" / "inspect-reports").iterdir():
        entry.write_bytes(b"{not json")
    again = run_cli("inspect", model, "--json", env=env)
    assert again.exit_code == 0 and json.loads(again.stdout)["model"] == first["model"]
