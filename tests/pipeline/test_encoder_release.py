"""The BERT-like encoder (tests/fixtures/make_encoder.py) through `compile release` end to end (issue 33): int8 and
fp16 for rtx-4090 and rtx-3090, fp8 for rtx-4090 (the rtx-3090's 8.6 takes no FP8), real calibration, real
TensorRT-RTX engines, every check with its default gates (fp8's logits thresholds set and said in its file)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.make_encoder import HERE
from tests.support.cli import run_cli

PIPELINES = {"int8+fp16": HERE / "encoder_release.yaml", "fp8": HERE / "encoder_release_fp8.yaml"}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Both pipelines released into one store; their work folders."""
    root = tmp_path_factory.mktemp("encoder-release")
    store, works = root / "store", {}
    for name, pipeline in PIPELINES.items():
        works[name] = root / name
        result = run_cli("release", pipeline, "--store", store, "--work", works[name])
        assert result.exit_code == 0, result.stderr
    return store, works


def _manifest_engines(store, name: str) -> set[tuple[str, str]]:
    listed = run_cli("ls", name, "--store", store, "--json")
    assert listed.exit_code == 0, listed.stderr
    pulled = {}
    for sku, precision in (
        ("rtx-4090", "int8"),
        ("rtx-4090", "fp16"),
        ("rtx-3090", "int8"),
        ("rtx-3090", "fp16"),
        ("rtx-4090", "fp8"),
        ("rtx-3090", "fp8"),
    ):
        result = run_cli(
            "pull",
            f"{name}@1.0.0",
            "--store",
            store,
            "--sku",
            sku,
            "--precision",
            precision,
            "--out",
            store.parent / f"{name}-{sku}-{precision}.plan",
        )
        pulled[(sku, precision)] = result.exit_code == 0
    return {key for key, ok in pulled.items() if ok}


def test_every_precision_of_the_encoder_is_released(released):
    store, works = released
    assert _manifest_engines(store, "encoder") == {
        ("rtx-4090", "int8"),
        ("rtx-4090", "fp16"),
        ("rtx-3090", "int8"),
        ("rtx-3090", "fp16"),
    }
    assert _manifest_engines(store, "encoder-fp8") == {("rtx-4090", "fp8")}
    for work in works.values():
        report = json.loads((work / "release-report.json").read_text())
        assert [s["status"] for s in report["stages"]] == ["ok"] * 5, report["stages"]


def test_the_checks_hold_with_the_transformer_fusion_rules(released):
    _, works = released
    seen = {}
    for check in (*works["int8+fp16"].glob("builds/*/check.json"), *works["fp8"].glob("builds/*/check.json")):
        for engine in json.loads(check.read_text())["engines"]:
            results = {c["name"]: c for c in engine["checks"]}
            assert engine["status"] == "ok", engine
            assert results["accuracy"]["status"] == "ok" and results["fusions"]["status"] == "ok"
            seen[(engine["sku"], engine["precision"])] = set(results["fusions"]["figures"]["rules"])
    assert len(seen) == 5
    for (_, precision), rules in seen.items():
        assert "layernorm-fused" in rules
        assert ("attention-fused" in rules) == (precision in ("int8", "fp16"))
        assert ("quantized-matmul" in rules) == (precision in ("int8", "fp8"))
        assert ("no-float-softmax-in-fp16" in rules) == (precision == "fp16")


def test_int8_and_fp8_engines_run_every_matmul_quantized(released):
    _, works = released
    for work, precision, kind in ((works["int8+fp16"], "int8", "Int8"), (works["fp8"], "fp8", "FP8")):
        layers = json.loads((work / "builds" / "rtx-4090" / "rtx-4090" / precision / "layers.json").read_text())
        quantized = {
            node
            for layer in layers["layers"]
            if layer["precision"] == kind
            for node in layer["onnx_nodes"]
            if "MatMul" in node or "Gemm" in node
        }
        assert {
            f"layer.{i}/{name}/MatMul"
            for i in (0, 1)
            for name in (
                "attention/query",
                "attention/key",
                "attention/value",
                "attention/output",
                "intermediate",
                "output",
            )
        } <= quantized, quantized
        assert "classifier/Gemm" in quantized


def test_fp8_passes_the_default_gates_with_accuracy_judged(released):
    """The fp8 pipeline sets no threshold of its own: the scale-aware defaults pass the random encoder's fp8
    engine, and its accuracy was measured (a cache hit's log names another run's model: check still finds it)."""
    assert "min_cosine" not in PIPELINES["fp8"].read_text()
    report = json.loads((released[1]["fp8"] / "builds" / "rtx-4090" / "check.json").read_text())
    accuracy = [c for e in report["engines"] for c in e["checks"] if c["name"] == "accuracy"]
    assert accuracy and all(c["status"] == "ok" for c in accuracy), accuracy
