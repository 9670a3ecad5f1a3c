"""Outputs judged as what they are (issue 41): class scores shift-invariantly (an INT8 classifier whose logits all
move together lost SQNR although softmax ignores that), and a sequence of class scores ([B, T, C], a CTC
recogniser) by per-step argmax agreement, which a [B, C]-only top-1 missed."""

from __future__ import annotations

import numpy as np

from compiler.data.agreement import Agreement


def _report(reference: np.ndarray, candidate: np.ndarray):
    agreement = Agreement(["out"])
    agreement.add([reference], [candidate])
    [report] = agreement.reports()
    return report


def test_a_common_mode_shift_of_logits_is_no_noise():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((64, 10)).astype(np.float32) * 8
    shifted = logits + 3.0 + rng.standard_normal((64, 1)).astype(np.float32)  # every class of a sample moves together
    report = _report(logits, shifted + rng.standard_normal(logits.shape).astype(np.float32) * 0.05)
    assert report.kind == "class-scores" and report.top1_agreement == 1.0
    assert report.sqnr_db > 40  # the shift alone would read as about 8 dB of noise
    raw = 10 * np.log10(((logits - logits.mean()) ** 2).sum() / ((shifted - logits) ** 2).sum())
    assert raw < 12


def test_a_broken_classifier_still_loses_its_sqnr_and_its_agreement():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((64, 10)).astype(np.float32) * 8
    broken = rng.standard_normal((64, 10)).astype(np.float32) * 8
    report = _report(logits, broken)
    assert report.sqnr_db < 3 and report.top1_agreement < 0.5


def test_a_sequence_of_class_scores_gets_per_step_agreement():
    rng = np.random.default_rng(2)
    steps = rng.standard_normal((4, 25, 40)).astype(np.float32)
    wrong = steps.copy()
    wrong[:, :5] = np.flip(wrong[:, :5], axis=-1)  # 5 of 25 steps decode to another class
    report = _report(steps, wrong)
    assert report.kind == "sequence"
    assert abs(report.top1_agreement - 20 / 25) < 1e-9
    assert _report(steps, steps + 1.5).top1_agreement == 1.0


def _noisy(samples: int, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((samples, 10)).astype(np.float32) * 4
    return logits, logits + rng.standard_normal(logits.shape).astype(np.float32) * noise


def test_each_gated_figure_has_a_95_percent_interval_that_narrows_with_more_samples():
    few, many = _report(*_noisy(24, 1.0)), _report(*_noisy(2400, 1.0))
    for figure in ("cosine_mean", "cosine_low", "sqnr_db", "top1_agreement"):
        low, high = few.intervals[figure]
        assert low <= getattr(few, figure) <= high
        assert many.intervals[figure][1] - many.intervals[figure][0] < (high - low) / 4, figure
    assert _report(*_noisy(24, 1.0)).intervals == few.intervals  # seeded: the same samples, the same interval


def test_a_threshold_inside_the_interval_is_not_enough_data_on_either_side_and_a_clear_failure_is_a_failure():
    from compiler.data.agreement import describe, inconclusive, judge, limits

    report = _report(*_noisy(24, 1.0))
    low, high = report.intervals["sqnr_db"]
    told = "not enough held-out data to tell"
    for threshold, side in (((report.sqnr_db + high) / 2, "is below"), ((low + report.sqnr_db) / 2, "holds")):
        bound = limits("int8", min_sqnr_db=threshold, gate_on="lower-bound")
        [gate] = [g for g in judge(report, bound) if g.name == "min-sqnr"]
        assert not gate.passed and inconclusive(gate), threshold
        assert told in describe(gate) and side in describe(gate) and "--holdout" in describe(gate)
        assert ("--gate-on estimate" in describe(gate)) == (side == "holds")  # the estimate would pass it
    far = {g.name: g for g in judge(report, limits("int8", min_sqnr_db=high + 10))}["min-sqnr"]
    assert (
        not far.passed and not inconclusive(far) and told not in describe(far) and "below --min-sqnr" in describe(far)
    )
    estimate = {g.name: g for g in judge(report, limits("int8", min_sqnr_db=(low + report.sqnr_db) / 2))}["min-sqnr"]
    assert estimate.passed  # the default holds the figure itself
    below = {g.name: g for g in judge(report, limits("int8", min_sqnr_db=(report.sqnr_db + high) / 2))}["min-sqnr"]
    assert not below.passed and inconclusive(below)  # below it, not enough data under either rule
