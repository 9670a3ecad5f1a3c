"""Outputs judged as what they are, on the samples calibrate held out (issue 41): a YOLO-style head
``[B, 4+C, N]`` mixes box pixels with sigmoid scores, so its cosine and SQNR pass an engine whose class scores
collapsed; declared ``detection`` it is judged by recall and precision of its detections against FP32's, and
undeclared it gets a note naming the declaration. A mostly empty probability map declared ``dense`` is judged by
the IoU of its thresholded masks. check judges the samples calibrate held out when it is given the same data."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime
import pytest

from compiler.core.errors import InvalidInput
from compiler.core.output_kind import parse_output
from compiler.data.agreement import Agreement, judge, limits
from compiler.data.output_kinds import detections, mixed_outputs
from tests.support.cli import REPO, run_cli

FIXTURES = REPO / "tests" / "fixtures"
YOLO = FIXTURES / "tiny_yolo.onnx"
PROFILES = FIXTURES / "tiny_yolo_profiles.yaml"
DECLARED = "output0:detection,boxes=0:4,scores=4:"


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_tiny_yolo
    finally:
        sys.path.remove(str(FIXTURES))
    return make_tiny_yolo.images()


@pytest.fixture(scope="module")
def fp32(images) -> np.ndarray:
    return onnxruntime.InferenceSession(str(YOLO)).run(None, {"image": images})[0]


def judged(expected: np.ndarray, actual: np.ndarray, *declarations: str, precision: str = "int8"):
    kinds = {spec.output: spec for spec in map(parse_output, declarations)}
    agreement = Agreement(["output0"], kinds)
    agreement.add([expected], [actual])
    [report] = agreement.reports()
    return report, {gate.name: gate for gate in judge(report, limits(precision))}


def test_collapsed_scores_pass_cosine_and_sqnr_but_fail_as_a_detection(fp32):
    logits = np.log(fp32[:, 4:] / (1 - fp32[:, 4:]))
    broken = fp32.copy()
    broken[:, 4:] = 1 / (1 + np.exp(-(logits - 2.0)))  # the class branch 2 logits low: most detections gone
    _, raw_gates = judged(fp32, broken, "output0:tensor")
    assert raw_gates["min-cosine"].passed and raw_gates["min-sqnr"].passed  # what the mixed output hides
    report, gates = judged(fp32, broken, DECLARED)
    assert report.kind == "detection" and report.reference_detections > 50
    assert report.recall < 0.5 and not gates["min-recall"].passed
    assert "min-cosine" not in gates and "min-sqnr" not in gates  # a declared kind is judged by what it is


def test_a_sound_head_passes_as_a_detection_with_its_recall_and_precision(fp32):
    rng = np.random.default_rng(0)
    sound = fp32 + np.concatenate(
        [rng.normal(0, 0.3, fp32[:, :4].shape), rng.normal(0, 0.003, fp32[:, 4:].shape)], axis=1
    ).astype(np.float32)
    report, gates = judged(fp32, sound, DECLARED)
    assert report.recall >= 0.95 and report.precision >= 0.95
    assert all(gate.passed for gate in gates.values()), gates
    _, strict_gates = judged(fp32, sound, DECLARED + ",min=1.0")
    assert strict_gates["min-recall"].threshold == 1.0


def test_detections_decode_yolo_rows_with_nms_per_class():
    sample = np.zeros((4 + 2, 3), np.float32)
    sample[:4] = np.array([[10, 11, 50], [10, 10, 50], [8, 8, 8], [8, 8, 8]]).astype(np.float32)  # x, y, w, h
    sample[4:] = np.array([[0.9, 0.8, 0.1], [0.1, 0.1, 0.7]])
    boxes, classes, scores = detections(sample[None][0], parse_output("y:detection"))
    assert classes.tolist() == [0, 1] and np.allclose(scores, [0.9, 0.7])  # the second box overlaps the first
    assert np.allclose(boxes[0], [6, 6, 14, 14])


def test_a_mostly_empty_map_is_judged_by_the_iou_of_its_masks():
    rng = np.random.default_rng(1)
    maps = np.zeros((8, 1, 32, 32), np.float32)
    maps[:, :, 10:14, 10:14] = 0.9
    shifted = np.roll(maps, 2, axis=3) + rng.normal(0, 0.01, maps.shape).astype(np.float32)
    agreement = Agreement(["output0"], {"output0": parse_output("output0:dense,threshold=0.5")})
    agreement.add([maps], [shifted])
    [report] = agreement.reports()
    assert report.kind == "dense" and report.iou == pytest.approx(8 / 24)  # 2 of 4 columns overlap per row
    assert not {g.name: g for g in judge(report, limits("int8"))}["min-iou"].passed


def test_the_graph_names_a_mixed_output_and_nothing_else():
    [(name, note)] = mixed_outputs(YOLO).items()
    assert name == "output0" and "joins Sigmoid scores with other values" in note
    assert "--output output0:detection,boxes=0:4,scores=4:" in note
    assert mixed_outputs(REPO / "compiler" / "examples" / "digits_cnn.onnx") == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("output0", "give NAME:KIND"),
        ("output0:boxes", "give NAME:KIND"),
        ("output0:detection,boxes=2", "give a row range"),
        ("output0:detection,iou=1.5", "iou=1.5: give 0 to 1"),
        ("output0:tensor,min=0.9", "takes: none"),
        ("output0:dense,threshold=x", "threshold=x: give a number"),
    ],
)
def test_a_declaration_that_does_not_parse_says_what_to_give(text, fragment):
    with pytest.raises(InvalidInput) as refused:
        parse_output(text)
    assert str(refused.value).startswith(f"--output {text}: ") and fragment in str(refused.value)


def test_calibrate_and_check_judge_a_declared_head_by_its_detections(tmp_path, images):
    np.savez(tmp_path / "data.npz", image=images)
    args = ("calibrate", YOLO, "--data", tmp_path / "data.npz", "--precision", "int8")
    undeclared = run_cli(*args, "--out", tmp_path / "plain")
    assert undeclared.exit_code in (0, 1), undeclared.stderr
    assert "note: output output0 joins Sigmoid scores" in undeclared.stdout
    done = run_cli(*args, "--out", tmp_path / "cal", "--output", DECLARED, "--json")
    assert done.exit_code == 0, done.stderr
    calibrated = json.loads(done.stdout)["report"]
    [output] = calibrated["outputs"]
    assert output["kind"] == "detection" and output["declared"] == DECLARED and output["recall"] >= 0.9
    built = run_cli("build", YOLO, "--profiles", PROFILES, "--sku", "rtx-4090", "--precision", "int8",
                    "--calibration", tmp_path / "cal", "--out", tmp_path / "build")  # fmt: skip
    assert built.exit_code == 0, built.stderr
    checked = run_cli("check", tmp_path / "build", "--data", tmp_path / "data.npz", "--output", DECLARED,
                      "--calibration", tmp_path / "cal", "--json")  # fmt: skip
    assert checked.exit_code in (0, 1), checked.stderr
    [engine] = json.loads(checked.stdout)["engines"]
    [accuracy] = [c for c in engine["checks"] if c["name"] == "accuracy"]
    figures = accuracy["figures"]["output0"]
    assert figures["declared"] == DECLARED and figures["recall"] >= 0.9
    # check judged the very samples calibrate held out (same data): the same figures, not the first 48 samples
    assert figures["samples"] == calibrated["holdout_samples"] < len(images)
    assert figures["sqnr_db"] == output["sqnr_db"] and figures["recall"] == output["recall"]
    assert {"min-recall", "min-precision"} <= set(figures["thresholds"]) and "min-sqnr" not in figures["thresholds"]
