"""`compile calibrate` proves its Q/DQ model builds (one real TensorRT-RTX build of one profile) before it says ok,
and names the node when it does not (issue 33)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.make_encoder import MODEL, make_data
from tests.support.digits import run_calibrate


@pytest.fixture(scope="module")
def encoder_data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("proof-data") / "encoder.npz", samples=24, sequence=16)


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_the_calibration_record_says_which_build_proved_it(tmp_path, encoder_data, precision):
    # 5 held-out samples of a random-weight encoder: one flipped top-1 is 20 %; this test is about the build proof
    gates = ("--min-top1", "0")
    result = run_calibrate(tmp_path / "out", "--precision", precision, "--json", *gates, model=MODEL, data=encoder_data)
    assert result.exit_code == 0, result.stderr
    proof = json.loads(result.stdout)["build_proof"]
    assert proof.startswith("built with tensorrt-rtx") and "compute capability 8.9" in proof
    assert "input_ids [1, 16], attention_mask [1, 16]" in proof
    assert json.loads((tmp_path / "out" / "calibration.json").read_text())["build_proof"] == proof
    shown = run_calibrate(tmp_path / "out", "--precision", precision, *gates, model=MODEL, data=encoder_data)
    assert "Q/DQ model built with tensorrt-rtx" in shown.stdout


FAULT = """
import sys
from pathlib import Path
import calibration.calibrators as calibrators
from calibration import calibrate
from compiler.core.errors import CheckFailed
from compiler.core.options import CalibrationOptions
calibrators.TENSORRT_QUANTIZED_OPS = ("MatMul", "Gemm", "Mul", "Add")
try:
    calibrate(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), CalibrationOptions(precision="int8"))
except CheckFailed as exc:
    print(exc)
"""
"""The fault-injected calibration in a process of its own: the build proof forks its builder, and a fork of the
test session (threads of servers and pools) once deadlocked in the child."""


def test_a_q_dq_model_tensorrt_refuses_is_never_ok_and_its_node_is_named(tmp_path, encoder_data):
    """Fault injection: onnxruntime told to quantize every Mul and Add too (what it does by default) quantizes the
    GELU's 0.5 constant, which TensorRT refuses."""
    import subprocess
    import sys

    from tests.support.cli import REPO

    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", FAULT, str(MODEL), str(encoder_data), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    message = done.stdout
    for fragment in (
        "int8 Q/DQ model does not build",
        "Quantized constant (half_quantized)",
        "'layer.0/gelu/half' (Mul)",
        "--exclude NODE",
    ):
        assert fragment in message, message + done.stderr[-2000:]
    assert "In matchQuantizedConstant" not in message  # TensorRT's source locations are left out
    assert not (out / "calibration.json").exists() and not (out / "model.onnx").exists()


def test_a_cnn_excluding_a_conv_gets_more_reformat_kernels_than_plain_int8(tmp_path):
    """Measured on TensorRT-RTX (Myelin): plain INT8 quantizes each Conv's input in the previous kernel's epilogue;
    with the second Conv in float, its output's quantize for the Gemm is a kernel of its own."""
    counts = {}
    for name, extra in (("plain", []), ("excluded", ["--exclude", "/features/features.3/Conv"])):
        result = run_calibrate(tmp_path / name, *extra, "--json")
        assert result.exit_code == 0, result.stderr
        reformats = json.loads((tmp_path / name / "calibration.json").read_text())["reformats"]
        assert reformats == json.loads(result.stdout)["reformats"] and reformats["count"] == len(reformats["layers"])
        counts[name] = reformats["count"]
        assert (
            f"; {reformats['count']} precision-boundary reformat kernel(s)" in json.loads(result.stdout)["build_proof"]
        )
    assert counts["excluded"] > counts["plain"], counts


def test_a_model_of_static_shapes_is_proved_without_a_profile(tmp_path):
    """Every dim fixed (ddddocr's YOLOX detector, PicoDet from Paddle2ONNX): the proof once made an empty profile,
    an internal error (exit 70) for every int8/fp8 calibration of such a model."""
    import sys

    import numpy as np
    import onnx

    from tests.support.cli import REPO

    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    try:
        import make_tiny_yolo
    finally:
        sys.path.pop(0)
    model = make_tiny_yolo.model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 2  # a fixed batch of 2: no dynamic dim left
    onnx.save_model(model, tmp_path / "static.onnx")
    np.savez(tmp_path / "images.npz", image=make_tiny_yolo.images(40))
    result = run_calibrate(tmp_path / "out", "--json", model=tmp_path / "static.onnx", data=tmp_path / "images.npz")
    assert result.exit_code in (0, 1), result.stderr
    proof = json.loads(result.stdout)["build_proof"]
    assert proof.startswith("built with tensorrt-rtx") and "static shapes" in proof


def _shared_bias_model():
    """Two 1x1 Convs reading one bias ``b``; the first writes ``b0``, the name onnxruntime's quantizer gives its own
    copy of a shared bias (the bias name and a number, as tf2onnx's ``conv1d_25`` and ``2`` is Basic Pitch's
    ``conv1d_252``, another Conv's output)."""
    import numpy as np
    import onnx

    h, array = onnx.helper, onnx.numpy_helper.from_array
    rng = np.random.default_rng(0)
    weights = [array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), f"w{i}") for i in (1, 2)]
    bias = array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        h.make_node("Conv", ["x", "w1", "b"], ["b0"], name="first"),
        h.make_node("Relu", ["b0"], ["r"], name="relu"),
        h.make_node("Conv", ["r", "w2", "b"], ["y"], name="second"),
    ]
    graph = h.make_graph(
        nodes,
        "shared_bias",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4, 8, 8])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4, 8, 8])],
        [*weights, bias],
    )
    made = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    made.ir_version = 8
    return made


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_convs_sharing_a_bias_get_copies_no_other_tensor_is_named(tmp_path, precision):
    """Basic Pitch (tf2onnx) shares one bias among 26 Convs: onnxruntime's copy for the third was named like a
    Conv's output, the bias read that activation, and TensorRT refused the Q/DQ model ("dynamic shape is not
    supported for weights") for every Conv --exclude was told about, in int8 and fp8."""
    import numpy as np
    import onnx

    from calibration.calibrators import unshare_biases

    onnx.save_model(_shared_bias_model(), tmp_path / "shared.onnx")
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(1).standard_normal((32, 4, 8, 8)).astype(np.float32))
    result = run_calibrate(
        tmp_path / "out", "--json", "--precision", precision, model=tmp_path / "shared.onnx", data=tmp_path / "x.npz"
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["build_proof"].startswith("built with tensorrt-rtx")
    graph = _shared_bias_model().graph
    unshare_biases(graph)
    first, _, second = graph.node
    assert first.input[2] == "b__bias_0" and second.input[2] == "b"  # the last reader keeps the original
    names = [t.name for t in graph.initializer]
    assert len(names) == len(set(names)) and not set(names) & {o for n in graph.node for o in n.output}
