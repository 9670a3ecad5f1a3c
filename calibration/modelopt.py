"""``--quantizer modelopt``: NVIDIA ModelOpt's ONNX PTQ places Q/DQ by TensorRT's rules and calibrates, in its own
interpreter (``$COMPILE_MODELOPT_PYTHON``, :mod:`compiler.core.modelopt`), in a child process.

It writes only the Q/DQ model; everything after (counting the quantized nodes, metadata, the build proof, gates,
sensitivity, the report) is the same as for onnxruntime's path (``ModelOpt`` in :mod:`calibration.quantizers`,
:mod:`calibration.steps`).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from calibration.calibrators import FP8_MAX, INT8_MAX
from compiler.core import child
from compiler.core.child import last_line
from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.modelopt import ENV, deadline, interpreter, timed_out
from compiler.core.options import CalibrationOptions
from compiler.data.model import OnnxModel

METHODS = {"minmax": "max", "entropy": "entropy"}
"""Our methods as ModelOpt names them; it has no percentile calibration."""


def refuse_unsupported(options: CalibrationOptions) -> None:
    """What ModelOpt cannot do is exit 2 before any work, saying what to use instead."""
    if options.fallback == "auto":
        raise InvalidInput(
            "--fallback auto searches with onnxruntime's quantizer only: use --quantizer onnxruntime, "
            "or keep nodes out yourself with --exclude NODE|OP"
        )
    if options.precision != "fp16" and options.method not in METHODS:
        raise InvalidInput(
            f"--method {options.method}: ModelOpt calibrates with {' or '.join(METHODS)} only; choose "
            f"one of those, or --quantizer onnxruntime"
        )


def quantize(
    source: OnnxModel,
    arrays: dict[str, np.ndarray],
    precision: str,
    method: str,
    out: Path,
    work: Path,
    keep_nodes: frozenset[str],
    keep_ops: frozenset[str],
) -> dict[str, tuple[float, float]]:
    """Write ModelOpt's Q/DQ model of ``source`` to ``out``; return each quantized activation's (min, max).

    The rest of the model stays FP32 (``--high_precision_dtype fp32``), as onnxruntime's path leaves it: the
    precision asked for is the quantized nodes' only. ``--exclude`` maps to ``--nodes_to_exclude`` (names, matched
    exactly) and ``--op_types_to_exclude``. The model is copied into ``work`` first, because ModelOpt writes its
    intermediate files beside the model it reads."""
    if source.external_files:
        raise InvalidInput(
            f"{source.path}: --quantizer modelopt does not take a model with external weights yet; use "
            f"--quantizer onnxruntime"
        )
    python = interpreter()
    model = work / "source.onnx"
    shutil.copyfile(source.path, model)
    data = work / "calibration.npz"
    np.savez(data, **arrays)
    command = [
        str(python),
        "-m",
        "modelopt.onnx.quantization",
        "--onnx_path",
        str(model),
        "--quantize_mode",
        precision,
        "--calibration_method",
        METHODS[method],
        "--calibration_eps",
        "cpu",
        "--calibration_data_path",
        str(data),
        "--output_path",
        str(out),
        "--high_precision_dtype",
        "fp32",
        "--log_level",
        "WARNING",
        "--log_file",
        str(work / "modelopt.log"),
    ]
    if keep_nodes:
        command += ["--nodes_to_exclude", *(f"^{re.escape(name)}$" for name in sorted(keep_nodes))]
    if keep_ops:
        command += ["--op_types_to_exclude", *sorted(keep_ops)]
    seconds = deadline()
    done = child.run(command, seconds, cwd=work, merge=True)  # a stop (Ctrl-C) takes the child with us
    if done.timed_out:
        raise timed_out(str(python), seconds, "ModelOpt's quantizer")
    output = done.stdout
    if done.returncode != 0 and re.search(r"^(ModuleNotFoundError|ImportError)\b", output, re.MULTILINE):
        raise EnvironmentProblem(
            f"${ENV}={str(python)!r} cannot import ModelOpt's quantizer ({last_line(output)}); "
            f"make its venv again (docs/calibrate.md), or use --quantizer onnxruntime"
        )
    if done.returncode != 0 or not out.is_file():
        raise CheckFailed(
            f"{source.path}: ModelOpt could not quantize it to {precision} (exit {done.returncode}: "
            f"{last_line(output) or 'no output'}); try --quantizer onnxruntime"
        )
    try:
        return activation_ranges(out, precision)
    except Exception as exc:  # onnx's DecodeError and its kin: what the child wrote is not a model
        raise CheckFailed(
            f"{source.path}: ModelOpt wrote {out.name}, which is not an ONNX model ({type(exc).__name__}); try "
            f"--quantizer onnxruntime"
        ) from None


def float_twin(source: OnnxModel, quantized: Path, work: Path) -> Path:
    """The FP32 model at the Q/DQ model's opset, for the sensitivity pass to run both in one graph: ModelOpt raises
    fp8 models to opset 19 (FP8 Q/DQ), as onnxruntime's quantizer does to the model it prepares."""
    opset = {o.domain: o.version for o in onnx.load_model(quantized, load_external_data=False).opset_import}.get("", 0)
    twin = onnx.ModelProto()
    twin.CopyFrom(source.proto)
    for entry in twin.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, opset)
    path = work / "float.onnx"
    onnx.save_model(twin, path)
    return path


def activation_ranges(path: Path, precision: str) -> dict[str, tuple[float, float]]:
    """Each activation's symmetric range read back from its QuantizeLinear's scale (weights are left out)."""
    proto = onnx.load_model(path, load_external_data=False)
    constants = {i.name: i for i in proto.graph.initializer}
    constants |= {
        node.output[0]: attr.t
        for node in proto.graph.node
        if node.op_type == "Constant"
        for attr in node.attribute
        if attr.name == "value"
    }
    largest_code = FP8_MAX if precision == "fp8" else INT8_MAX  # a Q node's scale times it is the amax
    found: dict[str, tuple[float, float]] = {}
    for node in proto.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants or node.input[1] not in constants:
            continue
        amax = float(np.max(np.abs(numpy_helper.to_array(constants[node.input[1]])))) * largest_code
        found[node.input[0]] = (-amax, amax)
    return dict(sorted(found.items()))
