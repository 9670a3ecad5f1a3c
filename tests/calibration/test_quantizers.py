"""The quantizers behind ``calibrate`` (calibration.quantizers), each run alone on the bundled digits CNN with real
onnxruntime: what each is given (a Job) and what it gives back (the model, the ranges, the nodes it quantized)."""

from __future__ import annotations

import time
from pathlib import Path

import onnx
import pytest

from calibration import calibrators
from calibration.quantizers import QUANTIZERS, Fp16Conversion, ModelOpt, OnnxRuntime, Quantized, quantizer_for
from calibration.steps import Plan, prepare
from compiler.core import options as core_options
from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.options import CalibrationOptions
from compiler.data.datasets import open_dataset
from compiler.data.model import load_model


def test_every_quantizer_choice_is_registered_and_fp16_converts_whatever_it_says():
    assert set(QUANTIZERS) == set(core_options.QUANTIZERS)
    assert type(quantizer_for(CalibrationOptions(precision="int8"))) is OnnxRuntime
    assert type(quantizer_for(CalibrationOptions(precision="fp8", quantizer="modelopt"))) is ModelOpt
    assert type(quantizer_for(CalibrationOptions(precision="fp16", quantizer="modelopt"))) is Fp16Conversion


def test_only_modelopt_refuses_what_it_cannot_do_before_any_work():
    searching = CalibrationOptions(precision="int8", fallback="auto")
    OnnxRuntime().refuse(searching)
    Fp16Conversion().refuse(searching)
    with pytest.raises(InvalidInput, match="--fallback auto searches with onnxruntime's quantizer only"):
        ModelOpt().refuse(searching)
    with pytest.raises(InvalidInput, match="--method percentile: ModelOpt calibrates with minmax or entropy"):
        ModelOpt().refuse(CalibrationOptions(precision="int8", method="percentile"))


def _quantized(model: Path, data: Path, tmp_path: Path, options: CalibrationOptions) -> tuple[Plan, Quantized]:
    source = load_model(model)
    dataset = open_dataset(data, source, None)
    try:
        plan = prepare(options, source, dataset, tmp_path / "out", False, time.perf_counter())
        (tmp_path / "work").mkdir()
        return plan, plan.quantizer.quantize(plan.job(tmp_path / "model.onnx", tmp_path / "work"))
    finally:
        dataset.close()


def test_onnxruntime_gives_back_its_model_the_ranges_and_the_nodes_it_quantized(digits_model, digits_data, tmp_path):
    plan, made = _quantized(digits_model, digits_data, tmp_path, CalibrationOptions(precision="int8", samples=64))
    assert made.model == tmp_path / "model.onnx" and made.model.is_file()
    assert made.quantized_ops == calibrators.quantized_nodes(made.model) == {"Conv": 2, "Gemm": 1}
    assert made.excluded == []
    assert made.float_model is not None and made.float_model.is_file()  # the pre-processed FP32 model
    assert set(made.ranges) == calibrators.tensors_to_calibrate(made.float_model)
    assert all(low <= high for low, high in made.ranges.values())
    assert plan.record["options"].get("quantizer") is None  # onnxruntime's is the key's default


def test_an_excluded_op_type_is_named_left_float_and_not_counted(digits_model, digits_data, tmp_path):
    options = CalibrationOptions(precision="int8", samples=64, exclude=("Gemm",))
    _, made = _quantized(digits_model, digits_data, tmp_path, options)
    assert made.excluded == ["/classifier/Gemm"]
    assert made.quantized_ops == {"Conv": 2}


def test_excluding_every_quantizable_node_is_refused_saying_so(digits_model, digits_data, tmp_path):
    options = CalibrationOptions(precision="int8", samples=64, exclude=("Conv", "Gemm"))
    with pytest.raises(CheckFailed, match=r"quantized no node: .* every one of them is excluded \(--exclude Conv"):
        _quantized(digits_model, digits_data, tmp_path, options)


def test_fp16_conversion_writes_an_fp16_model_and_quantizes_nothing(digits_model, digits_data, tmp_path):
    _, made = _quantized(digits_model, digits_data, tmp_path, CalibrationOptions(precision="fp16"))
    assert (made.ranges, made.quantized_ops, made.float_model, made.excluded) == ({}, None, None, [])
    types = {i.data_type for i in onnx.load(made.model).graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types and onnx.TensorProto.FLOAT not in types
