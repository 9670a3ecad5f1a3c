"""The config writer of ``compile export triton`` through its API, with datacenter TensorRT manifests (datacenter
plans cannot be built here, so these manifests are written by hand; the export of a whole release runs in
test_export_triton.py on stand-in plans). Every config is parsed back with tritonclient's ModelConfig schema."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from compiler.core.profiles import ShapeProfile
from compiler.core.records import (
    BlobRef,
    Precision,
    Provenance,
    ReleaseContent,
    ReleaseEngine,
    ReleaseManifest,
    TensorSignature,
)
from compiler.core.runtimes import Runtime
from compiler.export.triton_config import render_config

PLAN = BlobRef(sha256="0" * 64, size_bytes=1)


def _profile(name: str, **shapes) -> ShapeProfile:
    return ShapeProfile.model_validate(
        {
            "name": name,
            "shapes": {tensor: {"min": low, "opt": opt, "max": high} for tensor, (low, opt, high) in shapes.items()},
        }
    )


def _manifest(inputs, outputs, profiles) -> tuple[ReleaseManifest, list[ReleaseEngine]]:
    engine = ReleaseEngine(
        sku="a100",
        compute_capabilities=["8.0"],
        precision=Precision.FP16,
        profiles=profiles,
        backend={"name": "tensorrt", "version": "10.11.0.33"},
        builder_options={},
        plan=PLAN,
        layers=None,
        built_model_sha256="1" * 64,
        calibration_sha256=None,
        plan_header=None,
        runtime=Runtime(family="tensorrt", version="10.11.0.33"),
    )
    content = ReleaseContent(
        name="m",
        version="1.0.0",
        model_sha256="2" * 64,
        model_name="m.onnx",
        engines=[engine],
        check=None,
        inputs=[TensorSignature(name=n, dtype=d, shape=s) for n, d, s in inputs],
        outputs=[TensorSignature(name=n, dtype=d, shape=s) for n, d, s in outputs],
    )
    return ReleaseManifest(
        content=content,
        content_sha256="3" * 64,
        published=Provenance(by="t", at="2026-12-03T00:00:00Z", host="h", tool_version="0"),
    ), [engine]


def _parse(text: str):
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_a_classifier_batches_up_to_its_profiles_and_warms_up_with_its_golden_sample():
    manifest, engines = _manifest(
        [("image", "float32", ["B", 1, 8, 8])],
        [("logits", "float32", ["B", 10])],
        [
            _profile("online", image=([1, 1, 8, 8], [1, 1, 8, 8], [8, 1, 8, 8])),
            _profile("batch", image=([8, 1, 8, 8], [32, 1, 8, 8], [64, 1, 8, 8])),
        ],
    )
    golden = {"image": np.arange(4 * 64, dtype=np.float32).reshape(4, 1, 8, 8)}
    written = render_config("m", manifest, engines, {"8.0": "a100-fp16.plan"}, golden=golden)
    config = _parse(written.text)
    assert config.max_batch_size == 64 and list(config.dynamic_batching.preferred_batch_size) == [32]
    assert list(config.input[0].dims) == [1, 8, 8] and list(config.output[0].dims) == [10]
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    assert list(config.instance_group[0].profile) == ["0", "1"]
    assert [(w.name, w.batch_size) for w in config.model_warmup] == [("golden batch 1", 1), ("golden batch 32", 32)]
    file = config.model_warmup[0].inputs["image"].input_data_file
    assert written.warmup == {file: golden["image"][0].tobytes()}
    assert "max_batch_size: 64  # the largest batch the shape profiles cover" in written.text
    assert "# profile 1 (batch): image min [8, 1, 8, 8] opt [32, 1, 8, 8] max [64, 1, 8, 8]" in written.text


def test_an_encoder_warms_up_only_at_batches_a_profile_takes_with_the_golden_shape():
    """Two inputs of [batch, sequence]: the golden sample has 128 tokens; the batch-16 profile stops at 64 tokens,
    so only the batch-1 warmup is written (Triton would refuse a sample no profile takes)."""
    inputs = [("ids", "int64", ["B", "S"]), ("mask", "int64", ["B", "S"])]
    manifest, engines = _manifest(
        inputs,
        [("hidden", "float32", ["B", "S", 768])],
        [
            _profile("short", ids=([1, 1], [1, 128], [4, 256]), mask=([1, 1], [1, 128], [4, 256])),
            _profile("wide", ids=([4, 1], [16, 64], [32, 64]), mask=([4, 1], [16, 64], [32, 64])),
        ],
    )
    golden = {"ids": np.ones((2, 128), np.int64), "mask": np.ones((2, 128), np.int64)}
    written = render_config("m", manifest, engines, {"8.0": "a100-fp16.plan"}, golden=golden)
    config = _parse(written.text)
    assert (config.max_batch_size, list(config.dynamic_batching.preferred_batch_size)) == (32, [16])
    assert list(config.input[0].dims) == [-1] and list(config.output[0].dims) == [-1, 768]
    assert [w.batch_size for w in config.model_warmup] == [1]
    assert len(written.warmup) == 1  # both inputs' samples are the same bytes: one file


@pytest.mark.parametrize(
    ("inputs", "outputs", "profiles", "reason"),
    [
        (
            [("x", "float32", [1, 3, 8, 8])],
            [("y", "float32", [1, 10])],
            [_profile("p", x=([1, 3, 8, 8], [1, 3, 8, 8], [1, 3, 8, 8]))],
            "input 'x' has a fixed first dim (1)",
        ),
        (
            [("x", "float32", ["B", 3])],
            [("y", "float32", [7, 10])],
            [_profile("p", x=([1, 3], [4, 3], [8, 3]))],
            "output 'y' has a fixed first dim (7)",
        ),
        (
            [("a", "float32", ["B", 3]), ("b", "float32", ["B", 3])],
            [("y", "float32", ["B"])],
            [_profile("p", a=([1, 3], [4, 3], [8, 3]), b=([1, 3], [2, 3], [8, 3]))],
            "different first dims",
        ),
        (
            [("x", "float32", ["B", 3])],
            [("y", "float32", ["B"])],
            [_profile("p", x=([2, 3], [4, 3], [8, 3]))],
            "do not cover batch 1 and 2",
        ),
        (
            [("x", "float32", ["B", 3])],
            [("y", "float32", ["B"])],
            [_profile("p", x=([1, 3], [1, 3], [1, 3]))],
            "the profiles fix the first dim",
        ),
    ],
)
def test_no_batching_says_why_in_a_comment(inputs, outputs, profiles, reason):
    manifest, engines = _manifest(inputs, outputs, profiles)
    written = render_config(
        "m", manifest, engines, {"8.0": "a.plan"}, golden={name: np.zeros((1, 3), np.float32) for name, _, _ in inputs}
    )
    config = _parse(written.text)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching") and not config.model_warmup
    line = next(line for line in written.text.splitlines() if line.startswith("max_batch_size:"))
    assert reason in line and "the batch dim, if any, is in dims" in line
    assert config.input[0].dims[0] == (inputs[0][2][0] if isinstance(inputs[0][2][0], int) else -1)
    assert "# no model_warmup: the model is not batched" in written.text
    assert written.warmup == {}


def test_a_tensor_of_unknown_rank_is_refused_not_guessed():
    from compiler.core.errors import InvalidInput

    manifest, engines = _manifest(
        [("x", "float32", None)], [("y", "float32", ["B"])], [_profile("p", x=([1, 3], [1, 3], [2, 3]))]
    )
    with pytest.raises(InvalidInput, match="input 'x' has no known rank; Triton needs its dims"):
        render_config("m", manifest, engines, {"8.0": "a.plan"})


def test_a_gap_between_profiles_caps_the_batch_where_the_gap_starts():
    manifest, engines = _manifest(
        [("x", "float32", ["B", 3])],
        [("y", "float32", ["B"])],
        [_profile("small", x=([1, 3], [2, 3], [4, 3])), _profile("large", x=([16, 3], [32, 3], [64, 3]))],
    )
    written = render_config("m", manifest, engines, {"8.0": "a.plan"})
    config = _parse(written.text)
    assert (config.max_batch_size, list(config.dynamic_batching.preferred_batch_size)) == (4, [2])
    assert "# no model_warmup: the release has no golden inputs" in written.text


def test_hostile_names_stay_in_their_fields():
    name = 'x" } max_batch_size: 99 input { name: "y'
    manifest, engines = _manifest(
        [(name, "float32", ["B", 3])],
        [("y\n#", "float32", ["B"])],
        [_profile("p\nmax_batch_size: 7", **{name: ([1, 3], [2, 3], [4, 3])})],
    )
    written = render_config("m", manifest, engines, {"8.0": "a.plan"}, golden={name: np.zeros((1, 3), np.float32)})
    config = _parse(written.text)
    assert [i.name for i in config.input] == [name] and config.output[0].name == "y\n#"
    assert config.max_batch_size == 4
