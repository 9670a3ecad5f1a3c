"""FP16 range statistics computed in the graph (issue 45) are the numpy figures of the fetched activations, tensor for
tensor: overflow, values FP16 flushes, non-finite values (+inf, -inf, NaN), empty tensors, a real CNN; and the FP32
model runs once for them where fetching activations ran it once per group of tensors within --chunk-mb."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.data import ranges
from compiler.data.datasets import open_dataset
from compiler.data.model import load_model
from tests.support.cli import EXAMPLES


def _hostile_values(folder: Path, width: int = 64) -> tuple[Path, Path]:
    """x -> x*1e6 (beyond FP16), x*1e-8 (flushed), exp(x*100) (+inf where x > 0.9), its difference with itself (NaN
    there), -exp (-inf), a slice that is empty, and a sum the model returns. Every constant is one FP16 holds (none
    is clamped: the FP32 model itself is measured)."""
    c = {n: numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
         {"thousand": 1e3, "hundredth": 1e-2, "hundred": 100.0}.items()}  # fmt: skip
    ints = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
            {"s0": [0], "s1": [0], "ax": [1]}.items()]  # fmt: skip
    nodes = [
        helper.make_node("Mul", ["x", "thousand"], ["k"]),
        helper.make_node("Mul", ["k", "thousand"], ["over"]),
        helper.make_node("Mul", ["x", "hundredth"], ["h"]),
        helper.make_node("Mul", ["h", "hundredth"], ["hh"]),
        helper.make_node("Mul", ["hh", "hundredth"], ["hhh"]),
        helper.make_node("Mul", ["hhh", "hundredth"], ["tiny"]),
        helper.make_node("Mul", ["x", "hundred"], ["scaled"]),
        helper.make_node("Exp", ["scaled"], ["exploded"]),
        helper.make_node("Sub", ["exploded", "exploded"], ["nan"]),
        helper.make_node("Neg", ["exploded"], ["negative"]),
        helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["empty"]),
        helper.make_node("Add", ["over", "tiny"], ["a"]),
        helper.make_node("Add", ["a", "nan"], ["b"]),
        helper.make_node("Add", ["b", "negative"], ["c"]),
        helper.make_node("ReduceSum", ["empty", "ax"], ["e"], keepdims=1),  # per sample: [B, 1]
        helper.make_node("Add", ["c", "e"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", width])],
        [*c.values(), *ints],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save_model(model, folder / "hostile.onnx")
    values = np.random.default_rng(3).uniform(-1, 1, (40, width)).astype(np.float32)
    np.savez(folder / "hostile.npz", x=values)
    return folder / "hostile.onnx", folder / "hostile.npz"


def _passes(model_path: Path, data_path: Path, monkeypatch, chunk_mb: int = 256):
    """The reference pass's statistics in the graph, then fetched and counted by numpy; and how often the model
    ran in each."""
    model = load_model(model_path)
    dataset = open_dataset(data_path, model)
    indices = np.arange(dataset.count)
    runs = {"graph": 0, "numpy": 0}
    real_run = ranges._run

    def counted(way):
        def run(sess, fetch, feed):
            runs[way] += 1
            return real_run(sess, fetch, feed)

        return run

    monkeypatch.setattr(ranges, "_run", counted("graph"))
    in_graph = ranges.reference_pass(model, dataset, indices, 8, True, chunk_mb)
    monkeypatch.setattr(ranges, "MIN_OPSET", 10**6)  # every model takes the numpy path
    monkeypatch.setattr(ranges, "_run", counted("numpy"))
    fetched = ranges.reference_pass(model, dataset, indices, 8, True, chunk_mb)
    dataset.close()
    return in_graph, fetched, runs


@pytest.mark.parametrize("model", ["hostile", "digits"])
def test_the_figures_computed_in_the_graph_are_numpy_s(model, tmp_path, monkeypatch):
    paths = _hostile_values(tmp_path) if model == "hostile" else (EXAMPLES / "digits_cnn.onnx", EXAMPLES / "digits.npz")
    in_graph, fetched, _ = _passes(*paths, monkeypatch)
    assert set(in_graph.ranges) == set(fetched.ranges) and in_graph.ranges
    for name, stats in fetched.ranges.items():
        assert dataclasses.asdict(in_graph.ranges[name]) == dataclasses.asdict(stats), name
    for name, values in fetched.outputs.items():
        np.testing.assert_array_equal(in_graph.outputs[name], values)
    if model == "hostile":  # every case the figures tell apart is there
        seen = fetched.ranges
        assert seen["over"].overflow > 0 and seen["tiny"].flushed > 0 and seen["empty"].elements == 0
        assert seen["exploded"].nonfinite > 0 and seen["exploded"].positive_overflow
        assert seen["nan"].nonfinite > 0 and seen["negative"].nonfinite > 0


def test_the_model_runs_once_per_batch_whatever_the_chunk(tmp_path, monkeypatch):
    """With 256 KiB per sample of each of fourteen tensors and a 1 MiB chunk, fetching activations takes a group (a run
    of the model) per tensor or two and batches of 4; the figures computed in the graph take one run per batch of 8,
    and are the same."""
    in_graph, fetched, runs = _passes(*_hostile_values(tmp_path, width=1 << 16), monkeypatch, chunk_mb=1)
    assert runs["graph"] == 40 // 8 and runs["numpy"] >= 5 * runs["graph"]
    for name, stats in fetched.ranges.items():
        assert dataclasses.asdict(in_graph.ranges[name]) == dataclasses.asdict(stats), name
