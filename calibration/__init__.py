"""Calibration for strongly typed TensorRT: Q/DQ models (int8/fp8) from activation ranges, FP16 conversion.

    from calibration import calibrate, convert_fp16
    result = calibrate("model.onnx", "data.npz", "out/", precision="int8", method="entropy")

Modules, one per stage: ``datasets`` (npz and image folders, validation, seeded split), ``calibrators``
(onnxruntime calibration, Q/DQ writing, TensorRT cache), ``convert`` (fp16), ``report`` (held-out accuracy),
``api`` (the ``calibrate`` pipeline and its result).
"""

from calibration.api import calibrate
from calibration.convert import convert_fp16
from calibration.datasets import ImagePreprocess
from compiler.records import AccuracyReport, CalibrationResult, Gate, OutputReport, TensorRange

__all__ = ["AccuracyReport", "CalibrationResult", "Gate", "ImagePreprocess", "OutputReport", "TensorRange",
           "calibrate", "convert_fp16"]
