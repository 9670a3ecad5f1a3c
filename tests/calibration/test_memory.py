"""Calibration memory bounded by --chunk-mb (issue 40 "Memory", issue 45): every onnxruntime run over samples takes
as many samples as the model's activation footprint fits in the budget, and the results do not depend on it (a
budget that cannot hold one sample: tests/hostile/test_hostile_options.py). On the DBNet-like text detector
(tests/fixtures/text_detector.onnx, tests/fixtures/make_text_detector.py) with images made here."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from calibration import calibrate
from compiler.core.errors import InvalidInput
from compiler.core.options import CalibrationOptions
from compiler.data.footprint import ARENA_SLACK, MIB, activation_bytes, early_order, samples_per_run

DETECTOR = Path(__file__).resolve().parents[1] / "fixtures" / "text_detector.onnx"


def _chain(count: int, width: int) -> onnx.ModelProto:
    """x [B, width] -> Relu -> ... (``count`` nodes) -> y: one tensor alive besides the one being made."""
    names = ["x", *(f"t{i}" for i in range(count - 1)), "y"]
    nodes = [helper.make_node("Relu", [a], [b], name=f"relu{i}") for i, (a, b) in enumerate(pairwise(names))]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", width])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_footprint_counts_the_tensors_alive_at_once_not_all_of_them():
    # each Relu reads one tensor and makes one: two of 4 x 100 bytes alive at any time, however long the chain
    assert activation_bytes(_chain(3, 100), {"x": (1, 100)}) == 2 * 400
    assert activation_bytes(_chain(30, 100), {"x": (1, 100)}) == 2 * 400


def test_footprint_grows_with_the_image_area():
    small = activation_bytes(DETECTOR, {"image": (1, 3, 96, 96)})
    large = activation_bytes(DETECTOR, {"image": (1, 3, 480, 480)})
    assert large == pytest.approx(25 * small, rel=0.01)
    assert large > 3 * 480 * 480 * 4  # more than the image itself


def test_appended_statistics_run_right_after_what_they_read():
    model = _chain(6, 1000)
    graph = model.graph
    first_added = len(graph.node)
    graph.node.append(helper.make_node("ReduceMax", ["t0"], ["t0_max"], name="max_t0", keepdims=0))
    graph.output.append(helper.make_tensor_value_info("t0_max", TensorProto.FLOAT, []))
    held = activation_bytes(model, {"x": (1, 1000)})  # t0 kept alive until the end of the graph
    early_order(graph, first_added)
    assert [n.name for n in graph.node][:3] == ["relu0", "max_t0", "relu1"]
    assert activation_bytes(model, {"x": (1, 1000)}) < held
    onnx.checker.check_model(model)


def test_appended_chains_are_placed_once():
    model = _chain(3, 10)
    graph = model.graph
    first_added = len(graph.node)
    graph.node.extend(  # the first reads the graph's input alone and makes what the second reads
        [
            helper.make_node("Neg", ["x"], ["negated"], name="neg"),
            helper.make_node("ReduceMax", ["negated"], ["negated_max"], name="max", keepdims=0),
        ]
    )
    graph.output.append(helper.make_tensor_value_info("negated_max", TensorProto.FLOAT, []))
    early_order(graph, first_added)
    assert [n.name for n in graph.node] == ["neg", "max", "relu0", "relu1", "relu2"]


def test_samples_per_run_fits_the_budget():
    held = 10 * MIB * ARENA_SLACK  # what onnxruntime holds for one sample of a 10 MiB footprint
    assert samples_per_run(10 * MIB, 256, 32, None, "m") == 256 * MIB // held
    assert samples_per_run(MIB, 256, 32, None, "m") == 32  # never more than --batch-size
    assert samples_per_run(10 * MIB, 256, 32, 4, "m") == 4  # a fixed batch is a fixed batch
    with pytest.raises(InvalidInput, match=rf"--chunk-mb 8: m needs {held // MIB} MiB .* one sample.* give --chunk-mb"):
        samples_per_run(10 * MIB, 8, 32, None, "m")
    with pytest.raises(InvalidInput, match=rf"fixed batch of 4.* give --chunk-mb {4 * held // MIB} "):
        samples_per_run(10 * MIB, 32, 32, 4, "m")


def _images(path: Path, count: int, size: int) -> Path:
    rng = np.random.default_rng(1)
    ys, xs = np.mgrid[0:size, 0:size] / size
    images = np.stack([np.sin(6.28 * (ys * rng.uniform(0.5, 3) + xs * rng.uniform(0.5, 3))) for _ in range(count)])
    images = np.repeat(images[:, None], 3, axis=1) + rng.normal(0, 0.3, (count, 3, size, size))
    np.savez(path, image=images.astype(np.float32))
    return path


class _Runs:
    """Samples per onnxruntime run, by session, as the sessions calibration makes are run."""

    def __init__(self, monkeypatch) -> None:
        self.sizes: dict[str, list[int]] = {}
        import calibration.accuracy
        import calibration.calibrators
        import calibration.sensitivity

        for module in (calibration.calibrators, calibration.accuracy, calibration.sensitivity):
            made = module.session
            monkeypatch.setattr(module, "session", lambda path, what, made=made, **kw: self.wrap(made, path, what, kw))

    def wrap(self, made, path, what, options):
        runs, real = self.sizes.setdefault(f"{Path(path).name} ({what})", []), made(path, what, **options)

        class Recorded:
            def __getattr__(self, name):
                return getattr(real, name)

            def run(self, names, feed, *rest):
                runs.append(len(feed["image"]))
                return real.run(names, feed, *rest)

        return Recorded()


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return _images(tmp_path_factory.mktemp("images") / "images.npz", 40, 64)


def test_chunking_is_honoured_and_the_results_do_not_depend_on_it(tmp_path, images, monkeypatch):
    options = CalibrationOptions(precision="int8", method="minmax", holdout=8, reuse=False)
    large = calibrate(DETECTOR, images, tmp_path / "large", options)
    runs = _Runs(monkeypatch)
    small = calibrate(DETECTOR, images, tmp_path / "small", options.model_copy(update={"chunk_mb": 1}))
    per_sample = activation_bytes(DETECTOR, {"image": (1, 3, 64, 64)})
    assert 1 < MIB // (ARENA_SLACK * per_sample) < 32  # the budget holds a few samples, fewer than --batch-size
    assert {name.split(" ")[0] for name in runs.sizes} >= {"augmented.onnx", "model.onnx"}
    for name, sizes in runs.sizes.items():
        assert max(sizes) <= MIB // (ARENA_SLACK * per_sample), name  # the FP32 model's share alone bounds each
    # every calibration sample once, in several runs: the first batch, collected, weighs the chunk (no run of its own)
    assert sum(runs.sizes["augmented.onnx (model)"]) == 32
    assert small.ranges == large.ranges
    for ours, theirs in zip(small.report.outputs, large.report.outputs, strict=True):
        for field in ("cosine_mean", "cosine_low", "sqnr_db", "max_abs_error", "mean_abs_error"):
            assert getattr(ours, field) == pytest.approx(getattr(theirs, field), rel=1e-9, abs=1e-12), field
    assert [(n["node"], round(n["sqnr_db"], 6)) for n in small.report.sensitivity] == [
        (n["node"], round(n["sqnr_db"], 6)) for n in large.report.sensitivity
    ]


def test_the_percentile_tails_hold_little_more_than_the_model(tmp_path):
    """Percentile's tails model (calibration.tails) takes each tensor's tail right after the tensor is made, and its
    footprint counts each tail at the size the percentile can keep: on a BERT-base encoder, appended at the end and
    counted at the largest tensor's size, it needed 592 MiB a sample and the default --chunk-mb refused it."""
    from calibration.tails import augment, tail_bytes
    from compiler.data.footprint import tensor_bytes

    shapes = {"image": (1, 3, 480, 480)}
    graph = onnx.load_model(DETECTOR).graph
    wanted = sorted({name for node in graph.node if node.op_type == "Conv" for name in (node.input[0], node.output[0])})
    outputs = augment(DETECTOR, wanted, tmp_path / "tails.onnx")
    tails = onnx.load_model(tmp_path / "tails.onnx")
    known = tail_bytes(outputs, tensor_bytes(tails, shapes), 99.999, 256)
    assert set(known) == {
        name for tail, _ in outputs.values() for name in (tail, tail.removesuffix("_tail") + "_where")
    }
    bounded = activation_bytes(tails, shapes, lambda sizes: tail_bytes(outputs, sizes, 99.999, 256))
    assert bounded <= 2 * activation_bytes(DETECTOR, shapes)
