"""compile: turn ONNX models into TensorRT engines and release them.

The stages are plain functions (``compiler.inspect.summary.inspect_model``, ``calibration.calibrate``,
``compiler.engines.build_engines``, ``compiler.check.check``, ``compiler.releases.publish``/``pull``,
``compiler.pipeline.release``); the CLI (``compiler.cli``) only calls them. docs/architecture.md draws the layers.
"""

import os

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
"""onnxruntime 1.2x on Linux writes a device id under ~/.cache/Microsoft, a session file in $TMPDIR and uploads
usage events unless told not to: compile writes nothing outside the folders it is given, and sends nothing."""

DISTRIBUTION = "trt-compile"
"""The name on PyPI (``compile`` there is another project's); the command and the import packages stay."""


def version() -> str:
    """This tool's installed version, or ``unknown`` when run from a source tree that was never installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
