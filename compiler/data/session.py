"""Running ONNX models in onnxruntime on the CPU, as calibration and check both do, and comparing outputs.

Basic graph optimizations only: Q/DQ nodes then execute as written (quantize, round, dequantize), which is the
arithmetic TensorRT's INT8/FP8 kernels follow, and onnxruntime's CPU fusions of float8 Q/DQ (which give wrong
results) stay off.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.data.model import first_line


def session(path: Path, what: str, optimized: bool = True):
    """An onnxruntime CPU session of ``path`` (basic graph optimizations; none when not ``optimized``, as
    onnxruntime's calibrators run), made to hold the least memory: no memory pattern (one block per input shape,
    kept; the calibrator's session held 550 MiB for 8 samples of the 480x480 detector where 50 MiB was needed) and
    the nodes run in the graph's order (Kahn's order by node index), which :mod:`compiler.data.footprint` assumes
    and which runs appended statistics as soon as their inputs exist."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if optimized else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.log_severity_level = 4  # its errors reach the user as our one error line, not as a log line beside it
    options.enable_mem_pattern = False  # its second run would fault in every activation's pages again
    options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        error = InvalidInput if what == "model" else CheckFailed
        raise error(f"{path}: onnxruntime cannot run the {what}: {first_line(exc)}") from None


def run_batch(sess, feed: dict[str, np.ndarray], fixed_batch: int | None) -> list[np.ndarray]:
    """Run one batch; a model with a fixed batch size gets its last batch padded with repeats."""
    count = len(next(iter(feed.values())))
    if not fixed_batch or count >= fixed_batch:  # samples need not be on axis 0 here (--sample-axis)
        return sess.run(None, feed)
    feed = {k: np.concatenate([v, np.repeat(v[-1:], fixed_batch - count, axis=0)]) for k, v in feed.items()}
    return [o[:count] for o in sess.run(None, feed)]


def cosine_per_sample(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-sample cosine similarity; two all-zero vectors are identical (1), one all-zero is 0."""
    dot = (a * b).sum(axis=1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norms > 0, dot / np.where(norms > 0, norms, 1), 0.0)
    return np.where(both_zero, 1.0, np.clip(cos, -1.0, 1.0))


DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu")}
"""The distributions a module may come from (the [gpu] extra installs onnxruntime-gpu)."""


def tool_versions(*modules: str) -> dict[str, str]:
    """This tool's version and ``modules``' (onnx, onnxruntime, polygraphy), read from what is installed rather than
    by importing them: records and cache keys name them, and a stage served from a cache never imports onnxruntime.
    """
    import importlib.metadata

    from compiler import version

    found = {"compile": version()}
    for module in modules:
        for distribution in DISTRIBUTIONS.get(module, (module,)):
            try:
                found[module] = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        else:
            found[module] = "not installed"
    return found
