"""Entropy's histograms in bounded memory: each tensor's histogram spans a range fixed by a first
min/max pass over the same samples, so it holds ``num_bins`` bins whatever the data.

onnxruntime's ``HistogramCollector`` starts each histogram at the first batch's range and adds bins of the first
batch's width whenever a later batch reaches further: a tensor whose first batch spans ±1 and a later one ±100 ends
with 100 x ``num_bins`` bins, so memory and the entropy search's time grow with the samples (673 MB at 216k
samples against minmax's 298 MB, issue 43). Over a fixed range (TensorRT's own calibrators do the same) the
histogram is ``num_bins`` bins; onnxruntime's entropy and percentile computations then read it as they read their
own. Each batch is counted as it comes, not stacked with the others of its call first.

Entropy's threshold search is onnxruntime's, candidate for candidate, with its per-bin Python loops done by numpy
(:func:`entropy_threshold`).
"""

from __future__ import annotations

import numpy as np
from onnxruntime.quantization.calibrate import HistogramCollector


class FixedRangeCollector(HistogramCollector):
    """onnxruntime's collector with every tensor's range given: ``amax`` (its largest magnitude over the samples)."""

    def __init__(self, method: str, num_bins: int, num_quantized_bins: int, amax: dict) -> None:
        super().__init__(method, True, num_bins, num_quantized_bins, 99.99, "same")  # percentile: calibration.tails
        self.amax = amax

    def get_entropy_threshold(self, histogram, num_quantized_bins):
        return entropy_threshold(histogram, num_quantized_bins)

    def collect_value(self, name_to_arr) -> None:
        """Entropy's histogram of values over [-amax, amax], as (hist, edges, min, max, threshold)."""
        for tensor, arrays in name_to_arr.items():
            for array in arrays if isinstance(arrays, list) else [arrays]:
                self._add(tensor, np.asarray(array).ravel())

    def _add(self, tensor: str, values: np.ndarray) -> None:
        dtype = values.dtype
        threshold = np.array(self.amax[tensor], dtype=dtype)
        low = np.nanmin(values) if values.size else np.array(0, dtype=dtype)
        high = np.nanmax(values) if values.size else np.array(0, dtype=dtype)
        counts, edges = np.histogram(values, self.num_bins, range=(-threshold, threshold))
        old = self.histogram_dict.get(tensor)
        if old is not None:
            counts, low, high = counts + old[0], min(old[2], low), max(old[3], high)
        self.histogram_dict[tensor] = (counts, edges, low, high, threshold)


def entropy_threshold(histogram, num_quantized_bins: int):
    """onnxruntime's ``HistogramCollector.get_entropy_threshold``: of the symmetric windows around the zero bin, the
    one whose histogram ``p`` (outliers folded into its end bins) is closest (KL divergence) to ``q``, ``p`` merged
    into ``num_quantized_bins`` bins and spread back over the bins ``p`` has values in. Its quirks are kept (``q``
    in integers, the bins past the last whole merge left at zero in ``q``), so it picks the same window."""
    from onnxruntime.quantization.quant_utils import smooth_distribution

    hist, edges, low, high = histogram[0], histogram[1], histogram[2], histogram[3]
    zero, half = hist.size // 2, num_quantized_bins // 2
    below = np.concatenate([[0], np.cumsum(hist)])  # below[k]: the count of bins before k
    best, best_window = np.inf, None
    for i in range(half, zero + 1):
        start, end = zero - i, min(zero + i + 1, hist.size)
        window = hist[start:end]
        p = window.astype(np.int64)
        p[0] += below[start]
        p[-1] += below[-1] - below[end]
        merged = window.size // num_quantized_bins
        whole = num_quantized_bins * merged
        counts = window[:whole].reshape(num_quantized_bins, merged).sum(axis=1)
        counts[-1] += window[whole:].sum()
        spread = (p[:whole] != 0).reshape(num_quantized_bins, merged).sum(axis=1)
        q = np.zeros(p.size, dtype=np.int64)
        q[:whole] = np.repeat(
            np.trunc(np.divide(counts, spread, out=np.zeros(counts.shape), where=spread != 0)), merged
        )
        smooth_p, smooth_q = smooth_distribution(p), smooth_distribution(q)
        # compared in the edges' type, as onnxruntime does
        divergence = np.inf if smooth_p is None or smooth_q is None else _divergence(smooth_p, smooth_q, edges.dtype)
        if divergence < best or best_window is None:
            best, best_window = divergence, (edges[start], edges[end])
    threshold = (max(best_window[0], low), min(best_window[1], high))
    return tuple(np.array(t, dtype=edges.dtype) for t in threshold)


def _divergence(p: np.ndarray, q: np.ndarray, dtype) -> float:
    """scipy.stats.entropy(p, q) as onnxruntime calls it, without the wrapper that costs 6 times the sum itself."""
    from scipy.special import rel_entr

    return float(np.sum(rel_entr(1.0 * p / np.sum(p), 1.0 * q / np.sum(q))).astype(dtype))
