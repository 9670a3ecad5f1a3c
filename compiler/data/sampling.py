"""Which samples a run takes: the seeded split into calibration and held-out samples, and batches of them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.core.errors import InvalidInput

# A capped run (--samples) still judges this many held-out samples where the data has them: a verdict on 16 samples
# moves by a whole sample's share (6 %), one on 256 by 0.4 %.
MIN_JUDGED = 256


@dataclass(frozen=True)
class Split:
    calibration: np.ndarray
    holdout: np.ndarray


def split(
    count: int,
    holdout: float | int,
    samples: int | None,
    seed: int,
    batch: int | None = None,
    where: Path | None = None,
) -> Split:
    """Deterministic seeded split of ``count`` samples into calibration and held-out indices (each ascending).

    ``holdout`` is a fraction (< 1) or a count; ``samples`` caps the calibration set, and a fraction is then of
    the samples used, at least MIN_JUDGED (``--samples 64`` of a 216k-sample file judges 256, not 43,200); a
    model with a fixed batch size gets calibration sets that are a multiple of it.
    """
    if count < 2:
        raise InvalidInput(
            f"{where or 'the data'}: {count} sample(s); calibration needs at least 2 (calibration and held-out)"
        )
    if not 0 < holdout < float("inf"):  # written so that NaN fails too
        raise InvalidInput(
            f"--holdout {holdout}: must be a positive fraction (< 1) or count: every run measures "
            f"accuracy on held-out samples"
        )
    if samples is not None and samples < 1:
        raise InvalidInput("--samples must be at least 1")
    held = max(1, round(count * holdout)) if holdout < 1 else int(holdout)
    if held >= count:
        raise InvalidInput(f"--holdout {holdout} leaves no calibration samples out of {count}")
    judged = held  # the held-out samples judged: all of them, or the fraction of the samples used, at least 256
    if samples is not None and holdout < 1:
        judged = min(held, max(MIN_JUDGED, round(samples * holdout / (1 - holdout))))
    order = np.random.default_rng(seed).permutation(count)
    holdout_idx, calibration_idx = order[:judged], order[held:]  # a capped run calibrates on the same samples
    if samples is not None:
        calibration_idx = calibration_idx[:samples]
    if batch is not None and batch > 1:
        usable = len(calibration_idx) // batch * batch
        if usable == 0:
            raise InvalidInput(
                f"the model has a fixed batch size {batch} but only {len(calibration_idx)} "
                f"calibration sample(s) are available"
            )
        calibration_idx = calibration_idx[:usable]
    return Split(np.sort(calibration_idx), np.sort(holdout_idx))


def batches(indices: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(indices), size):
        yield indices[start : start + size]
