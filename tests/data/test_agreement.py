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
