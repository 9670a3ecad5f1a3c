"""Small ONNX files written for a test: hand-made graphs and copies with their weights moved elsewhere."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import external_data_helper, helper

ONNX_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
"""Real networks (AlexNet, DenseNet, Inception, ResNet-50, ...) the onnx wheel ships with light weights."""


def save_model(
    path: Path, nodes, inputs, outputs, initializers=(), opsets=(("", 17),), check: bool = True, **model_fields
) -> Path:
    """An IR-8 model of one graph; ``check=False`` for files the checker must not see (bad external data)."""
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], **model_fields)
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def external_model(folder: Path, source: Path, location: str = "weights.bin") -> Path:
    """A copy of ``source`` whose initializers live in ``folder/location``."""
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    model = onnx.load(source)
    target = folder / "model.onnx"
    onnx.save(
        model, target, save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    return target


def point_external_data(path: Path, location: str) -> None:
    """Rewrite every external-data location of the model (the checker is not run: that is the point)."""
    model = onnx.load(path, load_external_data=False)
    for tensor in external_data_helper._get_all_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, path)
