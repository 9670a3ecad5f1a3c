"""Calibration for strongly typed TensorRT: Q/DQ models (int8/fp8) from activation ranges, FP16 conversion.

    from calibration import calibrate, convert_fp16
    from compiler.core.options import CalibrationOptions
    result = calibrate("model.onnx", "data.npz", "out/", CalibrationOptions(precision="int8", method="entropy"))

Modules, one per step: ``calibrators`` (onnxruntime calibration, Q/DQ writing, TensorRT cache), ``convert``
(fp16), ``quantizers`` (onnxruntime, ModelOpt or FP16 conversion behind one interface), ``accuracy`` (held-out
accuracy and its gates), ``reuse`` (a calibration made before), ``folder`` (reading a finished calibration folder),
``steps`` (one calibration, step by step), ``api`` (``calibrate``), ``memo`` (``calibrate`` asked again with
nothing changed). The names below are
imported on first use: a reader of a calibration folder (``compile build --calibration``) never pays for onnx,
numpy and onnxruntime.
"""

from importlib import import_module
from typing import Any

_RECORDS = "compiler.core.records"
_LAZY = {
    "calibrate": "calibration.memo",
    "convert_fp16": "calibration.convert",
    "FP16_CONVERSION": _RECORDS,
    "ImagePreprocess": "compiler.data.datasets",
    "AccuracyReport": _RECORDS,
    "CalibrationResult": _RECORDS,
    "Gate": _RECORDS,
    "OutputReport": _RECORDS,
    "TensorRange": _RECORDS,
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'calibration' has no attribute {name!r}")
    return getattr(import_module(_LAZY[name]), name)
