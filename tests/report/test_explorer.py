"""Model Explorer node data (issue 44): `compile report --explorer DIR` writes overlays that Model Explorer's own
types take (its node_data_builder dataclasses, unknown fields refused) and whose keys are node ids of the graph its
ONNX adapter (model-explorer-onnx) makes of the model: for the bundled example's release and for a transformer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.support.cli import REPO, run_cli

ENCODER = REPO / "tests" / "fixtures" / "encoder.onnx"


def load_with_model_explorer(path: Path):
    """The file as Model Explorer's GraphNodeData, every nested item through its own dataclass."""
    from model_explorer.node_data_builder import GradientItem, GraphNodeData, NodeDataResult

    data = json.loads(path.read_text())
    names = {f.name for f in dataclasses.fields(GraphNodeData)}
    assert set(data) <= names, set(data) - names
    data["results"] = {key: NodeDataResult(**value) for key, value in data["results"].items()}
    data["gradient"] = [GradientItem(**item) for item in data.get("gradient", [])]
    return GraphNodeData(**data)


def adapter_node_ids(model: Path) -> set[str]:
    from model_explorer_onnx.main import ONNXAdapter

    graphs = ONNXAdapter().convert(str(model), {})["graphs"]
    return {node.id for graph in graphs for node in graph.nodes}


def _overlays(target: Path, folder: Path) -> tuple[list[Path], str]:
    result = run_cli("report", target, "--explorer", folder)
    assert result.exit_code == 0, result.stderr
    [command] = [line for line in result.stdout.splitlines() if line.startswith("model-explorer ")]
    return sorted(folder.glob("*.json")), command


def test_the_example_release_overlays_load_in_model_explorer(released: Path, tmp_path: Path) -> None:
    files, command = _overlays(released, tmp_path / "overlays")
    names = {p.name for p in files}
    assert {"rtx-4090-int8-precision.json", "rtx-4090-int8-kernel.json", "calibration-int8-sensitivity.json"} <= names
    assert "--extensions=model_explorer_onnx" in command and all(str(p) in command for p in files)
    model = REPO / "compiler" / "examples" / "digits_cnn.onnx"
    assert str(model) in command
    nodes = adapter_node_ids(model)
    precision = load_with_model_explorer(tmp_path / "overlays" / "rtx-4090-int8-precision.json")
    convs = {n for n in nodes if n.endswith("/Conv")}
    assert convs and {precision.results[n].value for n in convs} == {"Int8"}  # every Conv runs in INT8
    fp32 = load_with_model_explorer(tmp_path / "overlays" / "rtx-4090-fp32-precision.json")
    assert {fp32.results[n].value for n in convs} == {"Float"}
    sensitivity = load_with_model_explorer(tmp_path / "overlays" / "calibration-int8-sensitivity.json")
    assert set(sensitivity.results) <= nodes and all(isinstance(r.value, float) for r in sensitivity.results.values())
    for path in files:
        load_with_model_explorer(path)


@pytest.fixture(scope="module")
def encoder_build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("encoder") / "build"
    built = run_cli("build", ENCODER, "--profiles", REPO / "tests" / "fixtures" / "encoder_profiles.yaml",
                    "--sku", "rtx-4090", "--precision", "fp16", "--out", out)  # fmt: skip
    assert built.exit_code == 0, built.stderr
    return out


def test_a_transformer_build_overlays_load_in_model_explorer(encoder_build: Path, tmp_path: Path) -> None:
    files, _ = _overlays(encoder_build, tmp_path / "overlays")
    assert [p.name for p in files] == ["rtx-4090-fp16-kernel.json", "rtx-4090-fp16-precision.json"]
    nodes = adapter_node_ids(ENCODER)
    precision = load_with_model_explorer(tmp_path / "overlays" / "rtx-4090-fp16-precision.json")
    matmuls = {n for n in nodes if "MatMul" in n}
    assert matmuls and matmuls <= set(precision.results)
    assert {precision.results[n].value for n in matmuls} == {"Half"}
    kernel = load_with_model_explorer(tmp_path / "overlays" / "rtx-4090-fp16-kernel.json")
    assert len({kernel.results[n].value for n in set(kernel.results) & nodes}) > 1
