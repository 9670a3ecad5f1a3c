"""Node-data overlays for Google's Model Explorer (``ai-edge-model-explorer`` with the ``model-explorer-onnx``
adapter): per engine, what happened to each ONNX node: the precision it computes in and the kernel it was fused
into; per calibration, each quantized node's sensitivity. Written in Model Explorer's node-data format (a
``GraphNodeData``: ``results`` keyed by node id, which the ONNX adapter makes the node's name, each with a ``value``
and optionally a ``bgColor``; ``gradient`` or ``thresholds`` to colour numbers), so ``model-explorer MODEL
--node_data_paths=...`` draws the model coloured by them. The format is Model Explorer's
(model_explorer/node_data_builder.py); the package is not needed to write it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from compiler.core.files import write_atomic
from compiler.report.view import ReleaseView

PRECISION_COLOURS = {"Int8": "#1565c0", "FP8": "#6a1b9a", "Half": "#2e7d32", "Float": "#ef6c00", "none": "#bdbdbd"}
"""Int8 blue, FP8 purple, FP16 green, FP32 orange: what a reviewer scans for is orange inside an int8 engine."""
NARROW = ["FP4", "Int4", "FP8", "Int8", "Half", "BFloat16", "Float", "Int32", "Int64", "Bool", "none"]
"""Kernel precisions from the narrowest; one not listed counts as the widest."""


def _rank(precision: str) -> int:
    return NARROW.index(precision) if precision in NARROW else len(NARROW)


def _engine_data(label: str, kernels: list[Any]) -> dict[str, dict[str, Any]]:
    """Two overlays of one engine: each node's precision, and the kernel it landed in (nodes sharing one fused)."""
    precision: dict[str, Any] = {}
    kernel: dict[str, Any] = {}
    for index, k in enumerate(kernels):
        typed = k.precision or "none"
        for node in k.onnx_nodes:
            # A node several kernels name (a convolution, then its epilogue) computes in the narrowest of them.
            if node not in precision or _rank(typed) < _rank(precision[node]["value"]):
                precision[node] = {"value": typed, "bgColor": PRECISION_COLOURS.get(typed, "#bdbdbd")}
            kernel.setdefault(node, {"value": index})
    return {
        "precision": {"name": f"{label} precision", "results": precision},
        "kernel": {
            "name": f"{label} kernel (nodes of one value fused)",
            "results": kernel,
            "gradient": [{"stop": 0, "bgColor": "#e3f2fd"}, {"stop": 1, "bgColor": "#0d47a1"}],
        },
    }


def _sensitivity(view: ReleaseView) -> dict[str, dict[str, Any]]:
    """Per calibration, each listed node's output SQNR when quantized alone (red: hurts most)."""
    return {
        f"calibration-{row.precision}-sensitivity": {
            "name": f"{row.precision} sensitivity (output SQNR dB when quantized alone)",
            "results": {s.node: {"value": s.sqnr_db} for s in row.sensitive},
            "gradient": [{"stop": 0, "bgColor": "#c62828"}, {"stop": 1, "bgColor": "#c8e6c9"}],
        }
        for row in view.calibrations
        if row.sensitive
    }


def write_node_data(view: ReleaseView, folder: Path) -> list[Path]:
    """Every overlay of ``view`` as a JSON file in ``folder`` (made, parents too); the files written, in order."""
    folder.mkdir(parents=True, exist_ok=True)
    overlays: dict[str, dict[str, Any]] = {}
    for label, layers in sorted(view.layers.items()):
        stem = re.sub(r"[^A-Za-z0-9._-]", "-", label)
        for kind, data in _engine_data(label, layers.layers).items():
            overlays[f"{stem}-{kind}"] = data
    overlays.update(_sensitivity(view))
    written = []
    for stem, data in overlays.items():
        path = folder / f"{stem}.json"
        write_atomic(path, json.dumps(data, indent=1).encode())
        written.append(path)
    return written


def command(model: str | None, files: list[Path]) -> str:
    """The command that opens the model with the overlays (their files comma-separated, as Model Explorer takes)."""
    import shlex

    paths = ",".join(str(p) for p in files)
    return (
        f"model-explorer {shlex.quote(model or 'MODEL.onnx')} --extensions=model_explorer_onnx "
        f"--node_data_paths={shlex.quote(paths)}"
    )
