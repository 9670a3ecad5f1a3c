"""Where NVIDIA ModelOpt runs: an interpreter of its own, named by ``$COMPILE_MODELOPT_PYTHON``.

ModelOpt's ONNX PTQ (``nvidia-modelopt[onnx]``) pulls torch, cupy and onnxruntime-gpu, which cannot share an
environment with our onnxruntime, so it lives in a separate venv and runs in a child process. Shared by
``calibrate --quantizer modelopt`` and ``compile doctor``.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from compiler.core import child, deadlines
from compiler.core.child import last_line
from compiler.core.errors import EnvironmentProblem

ENV = "COMPILE_MODELOPT_PYTHON"
"""The variable naming the Python of a venv where ``nvidia-modelopt[onnx]`` is installed."""
PROBE_SECONDS = 30.0
"""Reading four packages' metadata takes a second; more is an interpreter that hangs."""
IMPORT_PROBE_SECONDS = 300.0
"""Importing torch and ModelOpt the first time on a cold, loaded machine takes tens of seconds, not minutes."""
_PROBE = """
import importlib.metadata as m, json, sys
if sys.argv[1:] == ["import"]:
    import modelopt.onnx.quantization  # what --quantizer modelopt runs; fails here when cupy or torch is broken
print(json.dumps({n: m.version(p) for n, p in (("modelopt", "nvidia-modelopt"), ("modelopt_onnxruntime",
      "onnxruntime-gpu"), ("modelopt_onnx", "onnx"), ("modelopt_torch", "torch"))}))
"""
_NAMES = ("modelopt", "modelopt_onnxruntime", "modelopt_onnx", "modelopt_torch")
"""The versions the probe prints, all of them (a child that prints other JSON is not the probe)."""
_ADVICE = (
    f"set ${ENV} to the Python of a venv made as docs/calibrate.md says (python -m venv V; V/bin/pip install "
    f"-c .ci/modelopt-constraints.txt 'nvidia-modelopt[onnx]'), or use --quantizer onnxruntime"
)


def interpreter() -> Path:
    """The interpreter ``$COMPILE_MODELOPT_PYTHON`` names; exit 3 naming the variable when it is unset or no program."""
    value = os.environ.get(ENV, "")
    if not value.strip():
        raise EnvironmentProblem(f"--quantizer modelopt needs ${ENV}, which is not set: {_ADVICE}")
    path = Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EnvironmentProblem(f"${ENV}={value!r} is not an executable file: {_ADVICE}")
    return path


def versions(imports: bool = False) -> dict[str, str]:
    """ModelOpt's and its environment's versions (part of a calibration's content key); exit 3 when the interpreter
    has no ModelOpt. ``imports`` also imports its quantizer (torch, cupy: tens of seconds on a loaded machine, so
    only ``doctor`` pays it; ``calibrate`` learns of a broken import from the quantizer itself, also exit 3)."""
    path = interpreter()
    stat = path.stat()
    return dict(_probe(str(path), stat.st_mtime_ns, stat.st_size, imports))


def deadline() -> float:
    """Seconds a ModelOpt child may run: ``$COMPILE_MODELOPT_DEADLINE`` (docs/calibrate.md)."""
    return deadlines.seconds(deadlines.MODELOPT, deadlines.MODELOPT_DEFAULT)


def timed_out(path: str, seconds: float, what: str) -> EnvironmentProblem:
    """The one line for a ModelOpt child killed at its deadline."""
    return EnvironmentProblem(
        f"${ENV}={path!r}: {what} did not finish within {seconds:g} s and was stopped; if it is only slow, raise "
        f"${deadlines.MODELOPT} (seconds), else {_ADVICE}"
    )


@lru_cache(maxsize=4)
def _probe(path: str, mtime: int, size: int, imports: bool) -> tuple[tuple[str, str], ...]:
    seconds = min(IMPORT_PROBE_SECONDS if imports else PROBE_SECONDS, deadline())
    try:
        done = child.run([path, "-c", _PROBE, *(["import"] if imports else [])], seconds)
    except OSError as exc:
        raise EnvironmentProblem(f"${ENV}={path!r} could not be run ({type(exc).__name__}: {exc}): {_ADVICE}") from None
    if done.timed_out:
        raise timed_out(path, seconds, "its version check")
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (ValueError, IndexError, RecursionError):
        found = None
    if not isinstance(found, dict) or set(found) != set(_NAMES) or not all(isinstance(v, str) for v in found.values()):
        raise EnvironmentProblem(
            f"${ENV}={path!r} has no working ModelOpt "
            f"({last_line(done.stderr) or f'exit {done.returncode}'}): {_ADVICE}"
        )
    return tuple(sorted(found.items()))


def status() -> str:
    """``compile doctor``'s line: usable with its versions, or why not (never raises)."""
    try:
        found = versions(imports=True)
    except EnvironmentProblem as exc:
        return f"not usable: {exc}"
    return (
        f"usable: nvidia-modelopt {found['modelopt']} (onnxruntime-gpu {found['modelopt_onnxruntime']}, torch "
        f"{found['modelopt_torch']}) at ${ENV}={os.environ[ENV]}"
    )
