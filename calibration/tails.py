"""Percentile calibration from the exact tail: nodes appended to the FP32 model take, for every tensor, the largest
|x| of each batch in the graph (Abs, Reshape, TopK), only as many as the percentile can need, and onnxruntime hands
back those few values and the tensor's size. Merged over the batches they give the percentile of all the values
exactly (when every sample has one shape), with no histogram and no min/max pass first.

onnxruntime's percentile calibrator fetches every activation and counts it into a histogram of |x|: its threshold is
the left edge of the bin the percentile falls in, so ours, the value itself, lies within one bin above it (a test
holds ours to numpy's percentile exactly and to onnxruntime's within one bin). A model with a fixed batch size has
its last batch padded with repeats of its last sample, whose values then count twice."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from compiler.data.datasets import Dataset
from compiler.data.footprint import early_order
from compiler.data.sampling import batches

SCALE = "__tail_scale"
"""The input fed with each batch: the share of a tensor's values the tail keeps, times all samples over this
batch's (so each batch keeps as many values as the whole run's tail can hold)."""
PREFIX = "__tail"


def augment(prepared: Path, tensors: list[str], out: Path) -> dict[str, tuple[str, str]]:
    """Write ``out`` (beside ``prepared``, whose external data it shares): the prepared model with each tensor's
    tail and element count as outputs; returns {tensor: (tail output, size output)}."""
    proto = onnx.load_model(prepared, load_external_data=False)
    graph = proto.graph
    graph.input.append(helper.make_tensor_value_info(SCALE, TensorProto.DOUBLE, []))
    graph.initializer.extend(
        [
            helper.make_tensor(f"{PREFIX}_flat", TensorProto.INT64, [1], [-1]),
            helper.make_tensor(f"{PREFIX}_one", TensorProto.DOUBLE, [], [1.0]),
        ]
    )
    outputs: dict[str, tuple[str, str]] = {}
    first_added = len(graph.node)
    for index, tensor in enumerate(tensors):
        p = f"{PREFIX}_{index}"
        graph.node.extend(
            [
                helper.make_node("Abs", [tensor], [f"{p}_abs"]),
                helper.make_node("Reshape", [f"{p}_abs", f"{PREFIX}_flat"], [f"{p}_flat"]),
                helper.make_node("Size", [tensor], [f"{p}_size"]),
                helper.make_node("Cast", [f"{p}_size"], [f"{p}_size_d"], to=TensorProto.DOUBLE),
                helper.make_node("Mul", [f"{p}_size_d", SCALE], [f"{p}_want"]),
                helper.make_node("Ceil", [f"{p}_want"], [f"{p}_ceil"]),
                helper.make_node("Add", [f"{p}_ceil", f"{PREFIX}_one"], [f"{p}_more"]),
                helper.make_node("Min", [f"{p}_more", f"{p}_size_d"], [f"{p}_k_d"]),  # Min of int64 needs opset 12
                helper.make_node("Cast", [f"{p}_k_d"], [f"{p}_k"], to=TensorProto.INT64),
                helper.make_node("Reshape", [f"{p}_k", f"{PREFIX}_flat"], [f"{p}_k1"]),
                helper.make_node("TopK", [f"{p}_flat", f"{p}_k1"], [f"{p}_tail", f"{p}_where"], axis=-1),
            ]
        )
        graph.output.extend(
            [
                helper.make_tensor_value_info(f"{p}_tail", TensorProto.FLOAT, [None]),
                helper.make_tensor_value_info(f"{p}_size", TensorProto.INT64, []),
            ]
        )
        outputs[tensor] = (f"{p}_tail", f"{p}_size")
    early_order(graph, first_added)  # each tensor's tail taken right after it is made, so it is freed as before
    onnx.save_model(proto, out)
    return outputs


def tail_bytes(
    outputs: dict[str, tuple[str, str]], sizes: Mapping[str, int | None], percentile: float, samples: int
) -> dict[str, int]:
    """Bytes of each tail and its indices (TopK's outputs, whose length shape inference cannot know) for one
    sample's share of the footprint: a batch keeps at most the whole run's tail, ``ceil(n x share x samples) + 1``
    of a tensor's ``n`` values a sample, whatever the batch's size. A tensor of unknown size is left unknown."""
    share = 1 - percentile / 100
    known = {}
    for tensor, (tail, _) in outputs.items():
        size = sizes.get(tensor)
        if size is None:
            continue
        keep = math.ceil(size // 4 * share * samples) + 1  # float32 values
        known[tail] = 4 * keep
        known[tail.removesuffix("_tail") + "_where"] = 8 * keep
    return known


class Tails:
    """Each tensor's largest |x| so far (at most as many as one batch's tail keeps) and its count of values."""

    def __init__(self, tensors: list[str], percentile: float) -> None:
        self.share = 1 - percentile / 100
        self.percentile = percentile
        self.values = {t: np.empty(0, np.float32) for t in tensors}
        self.sizes = dict.fromkeys(tensors, 0)
        self.keep = dict.fromkeys(tensors, 0)

    def add(self, tensor: str, tail: np.ndarray, size: int) -> None:
        self.sizes[tensor] += int(size)
        self.keep[tensor] = max(self.keep[tensor], tail.size)
        merged = np.concatenate([self.values[tensor], tail.astype(np.float32, copy=False)])
        if merged.size > self.keep[tensor]:
            merged = np.partition(merged, merged.size - self.keep[tensor])[merged.size - self.keep[tensor] :]
        self.values[tensor] = merged

    def threshold(self, tensor: str) -> float:
        """numpy's ``percentile(|x|, p, method="inverted_cdf")``: the smallest |x| with p % of the values at most
        it, the r-th largest value for r = N - ceil(p N / 100) + 1."""
        count, kept = self.sizes[tensor], np.sort(self.values[tensor])[::-1]
        if count == 0 or kept.size == 0:
            return 0.0
        rank = count - math.ceil(self.percentile / 100 * count) + 1
        return float(kept[min(rank, kept.size) - 1])


def collect_tails(session, dataset: Dataset, indices: np.ndarray, run: int, fixed_batch: int | None,
                  outputs: dict[str, tuple[str, str]], percentile: float, progress=None) -> Tails:  # fmt: skip
    """Run the augmented model over ``indices`` in batches of ``run`` samples, keeping each tensor's tail."""
    tails = Tails(list(outputs), percentile)
    fetch = [name for pair in outputs.values() for name in pair]
    for batch in batches(indices, run):
        feed = dataset.read(batch)
        count = len(batch)
        if fixed_batch and count < fixed_batch:
            feed = {k: np.concatenate([v, np.repeat(v[-1:], fixed_batch - count, axis=0)]) for k, v in feed.items()}
        feed[SCALE] = np.array(tails.share * len(indices) / count, np.float64)
        got = dict(zip(fetch, session.run(fetch, feed), strict=True))
        for tensor, (tail, size) in outputs.items():
            tails.add(tensor, got[tail], got[size])
        if progress:
            progress(count)
    return tails
