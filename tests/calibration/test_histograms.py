"""Entropy and percentile calibration in bounded memory (issue 43): each histogram spans the range a first min/max
pass found over the same samples, so it holds --num-bins bins however the samples' range grows from one chunk to the
next (onnxruntime's collector adds bins of its first batch's width: memory and the entropy search grew with the
samples). The histogram is the one numpy makes of all the values at once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from calibration import calibrators
from calibration.calibrators import HistogramOptions
from compiler.data.datasets import open_dataset
from compiler.data.model import load_model

WIDTH, SAMPLES = 4096, 256


@pytest.fixture(scope="module")
def growing(tmp_path_factory):
    """x [B, 4096] -> MatMul -> y, and samples whose magnitude grows 100-fold from the first to the last."""
    folder = tmp_path_factory.mktemp("growing")
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((WIDTH, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
        "growing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, folder / "model.onnx")
    values = np.random.default_rng(1).standard_normal((SAMPLES, WIDTH)).astype(np.float32)
    values *= np.linspace(1, 100, SAMPLES, dtype=np.float32)[:, None]
    np.savez(folder / "data.npz", x=values)
    return folder, values


def _collect(folder, method: str, collector: str = "ours"):
    work = folder / f"work-{method}-{collector}"
    work.mkdir()
    source = load_model(folder / "model.onnx")
    dataset = open_dataset(folder / "data.npz", source, None)
    try:
        indices = np.arange(SAMPLES)
        # 1 MiB holds ~60 samples of 16 KiB: several collect_data calls, each reaching further than the last
        return calibrators.collect_ranges(folder / "model.onnx", dataset, indices, method, 16, HistogramOptions(), 1,
                                          work, wanted={"x"})  # fmt: skip
    finally:
        dataset.close()


def test_the_entropy_histogram_holds_num_bins_bins_and_counts_every_value(growing):
    folder, values = growing
    data = _collect(folder, "entropy").data["x"]
    bins = HistogramOptions().num_bins
    assert len(data.hist) == bins and len(data.bins) == bins + 1
    amax = np.abs(values).max()
    expected, _ = np.histogram(values, bins, range=(-amax, amax))
    assert np.array_equal(data.hist, expected)  # every value, each in its bin, as numpy counts them at once
    assert 0 < float(np.max(data.highest)) <= amax


def test_the_percentile_range_is_numpy_s_percentile_within_one_bin(growing):
    folder, values = growing
    data = _collect(folder, "percentile").data["x"]
    amax = np.abs(values).max()
    expected = np.percentile(np.abs(values), HistogramOptions().percentile)
    assert abs(float(np.max(data.highest)) - expected) <= amax / HistogramOptions().num_bins


def test_onnxruntime_s_own_collector_grows_with_the_range(growing, monkeypatch):
    """Why: the same chunks through onnxruntime's collector (ours switched off) end with many times the bins."""
    import calibration.histograms

    folder, _ = growing

    class Unfixed(calibration.histograms.FixedRangeCollector):
        def __new__(cls, method, num_bins, num_quantized_bins, percentile, amax):
            from onnxruntime.quantization.calibrate import HistogramCollector

            return HistogramCollector(method, True, num_bins, num_quantized_bins, percentile, "same")

    monkeypatch.setattr(calibration.histograms, "FixedRangeCollector", Unfixed)
    data = _collect(folder, "entropy", collector="onnxruntime").data["x"]
    assert len(data.hist) > 4 * HistogramOptions().num_bins  # 10,676 bins here, against our 2,048
