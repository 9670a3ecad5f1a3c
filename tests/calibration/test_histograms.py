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


def _collect(folder, method: str, collector: str = "ours", percentile: float = 99.999):
    work = folder / f"work-{method}-{collector}-{percentile}"
    work.mkdir()
    source = load_model(folder / "model.onnx")
    dataset = open_dataset(folder / "data.npz", source, None)
    try:
        indices = np.arange(SAMPLES)
        # 1 MiB holds ~60 samples of 16 KiB: several collect_data calls, each reaching further than the last
        options = HistogramOptions(percentile=percentile)
        return calibrators.collect_ranges(folder / "model.onnx", dataset, indices, method, 16, options, 1, work,
                                          wanted={"x"})  # fmt: skip
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


@pytest.mark.parametrize("percentile", [99.999, 99.9, 99.0, 100.0])
def test_the_percentile_is_numpy_s_exactly_and_onnxruntime_s_within_one_bin(growing, percentile):
    """Percentile from each tensor's exact tail (calibration.tails): numpy's percentile of every |x| (the smallest
    with p % of the values at most it), whatever the batches; onnxruntime's own calibrator, whose threshold is the
    left edge of the histogram bin the percentile falls in, is at most one bin below it."""
    from onnxruntime.quantization import create_calibrator
    from onnxruntime.quantization.calibrate import CalibrationMethod

    folder, values = growing
    ours = float(np.max(_collect(folder, "percentile", percentile=percentile).data["x"].highest))
    magnitudes = np.abs(values)
    assert ours == float(np.percentile(magnitudes, percentile, method="inverted_cdf"))

    class Reader:
        def __init__(self) -> None:
            self.batches = iter(values[i : i + 32] for i in range(0, len(values), 32))

        def get_next(self):
            batch = next(self.batches, None)
            return None if batch is None else {"x": batch}

    extra = {"symmetric": True, "num_bins": HistogramOptions().num_bins, "percentile": percentile}
    theirs = create_calibrator(str(folder / "model.onnx"), ["MatMul"], str(folder / "theirs.onnx"),
                               CalibrationMethod.Percentile, extra_options=extra)  # fmt: skip
    theirs.collect_data(Reader())
    found = theirs.compute_data().data["x"]
    edges = theirs.collector.histogram_dict["x"][1]  # of |x|, grown batch by batch from the first one's range
    assert 0 <= ours - float(np.max(found.highest)) <= float(edges[1] - edges[0])


def test_onnxruntime_s_own_collector_grows_with_the_range(growing, monkeypatch):
    """Why: the same chunks through onnxruntime's collector (ours switched off) end with many times the bins."""
    import calibration.histograms

    folder, _ = growing

    class Unfixed(calibration.histograms.FixedRangeCollector):
        def __new__(cls, method, num_bins, num_quantized_bins, amax):
            from onnxruntime.quantization.calibrate import HistogramCollector

            return HistogramCollector(method, True, num_bins, num_quantized_bins, 99.99, "same")

    monkeypatch.setattr(calibration.histograms, "FixedRangeCollector", Unfixed)
    data = _collect(folder, "entropy", collector="onnxruntime").data["x"]
    assert len(data.hist) > 4 * HistogramOptions().num_bins  # 10,676 bins here, against our 2,048


def _histograms():
    """Histograms of the shapes activations give: a bell, a ReLU's (half empty, a spike at zero), a sparse one,
    heavy tails, a single spike; over 2048 and 512 bins."""
    rng = np.random.default_rng(7)
    relu = np.maximum(rng.standard_normal(200_000), 0)
    shapes = {
        "bell": rng.standard_normal(200_000),
        "relu": relu,
        "sparse": rng.choice([-3.0, 0.0, 0.5, 2.0], 50_000),
        "heavy tails": rng.standard_t(2, 200_000),
        "spike": np.zeros(1000),
    }
    for name, values in shapes.items():
        for bins in (2048, 512):
            amax = float(np.abs(values).max()) or 1.0
            counts, edges = np.histogram(values, bins, range=(-amax, amax))
            yield f"{name}-{bins}", (counts, edges.astype(np.float32), np.float32(values.min()),
                                     np.float32(values.max()), np.float32(amax))  # fmt: skip


@pytest.mark.parametrize("name, histogram", list(_histograms()), ids=[n for n, _ in _histograms()])
def test_the_entropy_search_picks_onnxruntime_s_threshold(name, histogram):
    """Our numpy search and onnxruntime's loops pick the same window of the same histogram."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from calibration.histograms import entropy_threshold

    theirs = HistogramCollector("entropy", True, histogram[0].size, 128, 99.99, "same")
    expected = theirs.get_entropy_threshold(histogram, 128)
    found = entropy_threshold(histogram, 128)
    assert [float(t) for t in found] == [float(t) for t in expected], name
    assert all(t.dtype == np.float32 for t in found)
