"""`calibrate --quantizer modelopt`: real NVIDIA ModelOpt in its own venv ($COMPILE_MODELOPT_PYTHON, made by .ci/run),
then the same counting, build proof, gates and report as onnxruntime's path; real TensorRT-RTX builds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from calibration import calibrate
from compiler.core.modelopt import ENV
from compiler.core.options import CalibrationOptions
from compiler.core.records import CalibrationResult
from tests.fixtures import make_outlier_mlp
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build, run_calibrate

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="module")
def modelopt_python() -> str:
    """The ModelOpt interpreter: ``$COMPILE_MODELOPT_PYTHON``, else the venv .ci/run makes in the repository. In CI
    its absence is a failure, not a skip."""
    found = os.environ.get(ENV) or str(REPO / ".modelopt-venv" / "bin" / "python")
    if not Path(found).is_file():
        message = f"no ModelOpt venv: set ${ENV} or make .modelopt-venv as .ci/run does"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def runs(modelopt_python, tmp_path_factory, digits_model, digits_data) -> dict[str, CalibrationResult]:
    """The encoder in int8 and fp8 and the digits CNN in int8, each through ModelOpt once, with the default gates."""
    root = tmp_path_factory.mktemp("modelopt")
    encoder, encoder_data = FIXTURES / "encoder.onnx", FIXTURES / "encoder_data.npz"
    cases = {
        "encoder-int8": (encoder, encoder_data, "int8"),
        "encoder-fp8": (encoder, encoder_data, "fp8"),
        "digits-int8": (digits_model, digits_data, "int8"),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, modelopt_python)
        return {
            name: calibrate(model, data, root / name, CalibrationOptions(precision=precision, quantizer="modelopt"))
            for name, (model, data, precision) in cases.items()
        }


@pytest.mark.parametrize("name", ["encoder-int8", "encoder-fp8", "digits-int8"])
def test_modelopt_calibrations_pass_the_default_gates_and_build(runs, name):
    result = runs[name]
    assert result.passed, [g for g in result.gates if not g.passed]
    assert result.quantized_nodes and result.quantized_nodes == sum(result.quantized_ops.values())
    assert result.build_proof.startswith("built with tensorrt-rtx"), result.build_proof
    assert result.options["quantizer"] == "modelopt" and result.versions["modelopt"].count(".") >= 2
    # the activations' ranges read back from ModelOpt's scales make the TensorRT cache, as onnxruntime's do
    assert result.ranges and all(r.min == -r.max and r.max > 0 for r in result.ranges.values())
    assert result.report.sensitivity, result.report.sensitivity_error
    written = json.loads((Path(result.out) / "calibration.json").read_text())
    assert written["quantized_ops"] == result.quantized_ops and written["cache_key"] == result.cache_key


def test_modelopt_places_qdq_as_tensorrt_wants_on_the_encoder(runs):
    """Only MatMuls run quantized: no Q/DQ on Gather, LayerNorm, Softmax or the mask (what broke int8 builds)."""
    assert set(runs["encoder-int8"].quantized_ops) == {"MatMul"}
    assert set(runs["encoder-fp8"].quantized_ops) == {"MatMul"}
    assert set(runs["digits-int8"].quantized_ops) <= {"Conv", "Gemm", "MatMul"}


def test_the_quantizer_is_part_of_the_content_key(runs, digits_model, digits_data, tmp_path):
    ours = calibrate(digits_model, digits_data, tmp_path / "ort", CalibrationOptions(precision="int8"))
    assert "quantizer" not in ours.options and ours.cache_key != runs["digits-int8"].cache_key


def test_a_modelopt_int8_build_of_the_digits_cnn(runs, tmp_path):
    """`compile build` takes ModelOpt's calibration folder like any other and builds a real INT8 engine."""
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "profiles:\n  - name: online\n    shapes:\n      image: {min: [1, 1, 8, 8], opt: [4, 1, 8, 8], "
        "max: [8, 1, 8, 8]}\n"
    )
    done = run_build(
        tmp_path / "build",
        ("rtx-4090",),
        ("int8",),
        "--calibration",
        runs["digits-int8"].out,
        "--json",
        profiles=profiles,
    )
    assert done.exit_code == 0, done.stderr
    assert (tmp_path / "build" / "rtx-4090" / "int8" / "engine.plan").stat().st_size > 0


def test_no_quantized_node_is_exit_1(modelopt_python, tmp_path):
    """ModelOpt selects no node of this small MLP and exits 0 with a float model: an int8 request refuses it."""
    model, data = make_outlier_mlp.save(tmp_path / "mlp.onnx", layers=5, outliers=())
    done = run_calibrate(
        tmp_path / "out", "--quantizer", "modelopt", model=model, data=data, env={**os.environ, ENV: modelopt_python}
    )
    assert_clean_error(done, 1, "quantized no node", "ModelOpt selected none", "--precision fp16")
    assert not (tmp_path / "out" / "calibration.json").exists()


def _pipeline(folder: Path, quantizer: str) -> Path:
    """The digits CNN's int8 release for rtx-4090, calibrated by ``quantizer``."""
    examples = REPO / "compiler" / "examples"
    pipeline = folder / "pipeline.yaml"
    pipeline.write_text(
        f"release: {{name: digits, version: 1.0.0}}\nmodel: {examples / 'digits_cnn.onnx'}\n"
        f"profiles: {REPO / 'profiles/digits.yaml'}\ntargets: {{rtx-4090: [int8]}}\ncalibration:\n"
        f"  data: {examples / 'digits.npz'}\n  quantizer: {quantizer}\ncheck:\n"
        f"  data: {examples / 'digits.npz'}\n  samples: 64\n"
    )
    return pipeline


def test_a_release_pipeline_quantizes_with_modelopt(modelopt_python, tmp_path):
    """`calibration.quantizer: modelopt` in the pipeline YAML: calibrate, build, check (default gates) and publish."""
    done = run_cli(
        "release",
        _pipeline(tmp_path, "modelopt"),
        "--work",
        tmp_path / "work",
        "--store",
        tmp_path / "store",
        "--json",
        env={**os.environ, ENV: modelopt_python},
    )
    assert done.exit_code == 0, done.stderr
    record = json.loads((tmp_path / "work" / "calibration" / "int8" / "calibration.json").read_text())
    assert record["options"]["quantizer"] == "modelopt" and record["quantized_nodes"] > 0


def test_the_pipeline_refuses_an_unknown_quantizer(tmp_path):
    assert_clean_error(run_cli("plan", _pipeline(tmp_path, "tensorrt")), 2, "quantizer")


def test_exclude_maps_to_modelopts_nodes_and_op_types(runs, modelopt_python, monkeypatch, tmp_path):
    """``--exclude NODE`` becomes ``--nodes_to_exclude`` (the exact name), ``--exclude OP`` becomes
    ``--op_types_to_exclude``: the named MatMul runs in float, the others stay quantized."""
    import onnx

    monkeypatch.setenv(ENV, modelopt_python)
    node = "layer.0/attention/query/MatMul"
    result = calibrate(
        FIXTURES / "encoder.onnx",
        FIXTURES / "encoder_data.npz",
        tmp_path / "out",
        CalibrationOptions(quantizer="modelopt", exclude=(node, "Gemm")),
    )
    assert result.quantized_ops == {"MatMul": runs["encoder-int8"].quantized_ops["MatMul"] - 1}
    assert result.excluded == ["classifier/Gemm", node] and result.options["exclude"] == ["Gemm", node]
    graph = onnx.load_model(Path(result.out) / "model.onnx").graph
    dequantized = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    kept = next(n for n in graph.node if n.name == node)
    assert not dequantized & set(kept.input)


def test_modelopt_leaves_the_source_model_alone(runs):
    """ModelOpt writes inferred shapes back into the model it reads: it is handed a copy."""
    from compiler.core.files import file_sha256

    for result in runs.values():
        assert file_sha256(result.model) == result.model_sha256
