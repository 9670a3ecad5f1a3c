"""What an output is, so that it is judged as that: declared with ``--output NAME:KIND[,KEY=VALUE...]`` (or in a
pipeline's ``calibration:``/``check:``), else inferred from its shape (class scores ``[B, C]``, sequences
``[B, T, C]``, anything else a tensor).

Why: cosine and SQNR of a YOLO head ``[B, 4+C, N]`` are dominated by its box pixels (0..640), so an FP8 engine whose
sigmoid scores collapsed still passes them; the cosine quantile of a probability map that is mostly empty means
nothing. A ``detection`` output is judged by what it detects (recall and precision of the candidate's boxes against
FP32's), a ``dense`` map by the IoU of its thresholded masks. A kind is never guessed into a verdict: where the graph
suggests a mixed output (a Concat of Sigmoid scores and other values) and none is declared, the report says so and
names the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from compiler.core.errors import InvalidInput
from compiler.core.output_kind import OutputKind

MAX_CANDIDATES = 3000
"""Boxes kept before NMS, highest scores first (as YOLO's own NMS caps them): a collapsed engine can put every
anchor above the threshold."""


def _sample_rows(sample: np.ndarray, spec: OutputKind) -> np.ndarray:
    """One sample's values as rows along the declared axis: ``[rows, anchors]``."""
    if not 1 <= spec.axis <= sample.ndim:
        raise InvalidInput(
            f"--output {spec.text}: axis {spec.axis} is not an axis of {spec.output} (rank {sample.ndim + 1})"
        )
    return np.moveaxis(sample, spec.axis - 1, 0).reshape(sample.shape[spec.axis - 1], -1)


def detections(sample: np.ndarray, spec: OutputKind) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Corners ``[k, 4]``, classes and scores of the boxes at or above the threshold, after NMS per class."""
    rows = _sample_rows(np.asarray(sample, dtype=np.float64), spec)
    boxes, scores = rows[slice(*spec.boxes)], rows[slice(*spec.scores)]
    if len(boxes) != 4 or len(scores) == 0:
        raise InvalidInput(
            f"--output {spec.text}: {spec.output} has {len(rows)} rows along axis {spec.axis}; boxes must be 4 of "
            f"them and scores at least 1 (boxes=0:4,scores=4: is a YOLOv8 head [B, 4+C, N])"
        )
    classes, confidence = scores.argmax(axis=0), scores.max(axis=0)
    kept = np.flatnonzero(np.nan_to_num(confidence, nan=-np.inf) >= spec.threshold)
    kept = kept[np.argsort(-confidence[kept], kind="stable")][:MAX_CANDIDATES]
    corners = _corners(boxes[:, kept].T, spec.box_format)
    if spec.nms is not None:
        kept_idx = _nms(corners, classes[kept], spec.nms)
        corners, kept = corners[kept_idx], kept[kept_idx]
    return corners, classes[kept], confidence[kept]


def _corners(boxes: np.ndarray, box_format: str) -> np.ndarray:
    if box_format == "xyxy":
        return boxes
    centre, size = boxes[:, :2], boxes[:, 2:] / 2
    return np.concatenate([centre - size, centre + size], axis=1)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` with every box of ``b`` (corners)."""
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(axis=2)
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.clip(boxes[:, 2:] - boxes[:, :2], 0, None).prod(axis=1)


def _nms(corners: np.ndarray, classes: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy NMS per class over boxes sorted by score (highest first): indices kept."""
    overlap = iou_matrix(corners, corners) > threshold
    same = classes[:, None] == classes[None, :]
    suppressed = np.zeros(len(corners), dtype=bool)
    kept = []
    for i in range(len(corners)):
        if not suppressed[i]:
            kept.append(i)
            suppressed |= overlap[i] & same[i]
    return np.asarray(kept, dtype=np.int64)


def matched(reference: tuple, candidate: tuple, iou: float) -> int:
    """Candidate boxes, best score first, each taking the unmatched reference box of its class it overlaps most
    (IoU at least ``iou``): how many reference boxes were found."""
    ref_boxes, ref_classes, _ = reference
    cand_boxes, cand_classes, _ = candidate
    if not len(ref_boxes) or not len(cand_boxes):
        return 0
    overlap = iou_matrix(cand_boxes, ref_boxes)
    overlap[cand_classes[:, None] != ref_classes[None, :]] = 0.0
    taken = np.zeros(len(ref_boxes), dtype=bool)
    for row in overlap:
        row = np.where(taken, 0.0, row)
        best = int(row.argmax())
        if row[best] >= iou:
            taken[best] = True
    return int(taken.sum())


@dataclass
class KindTally:
    """The kind's own figures, accumulated batch by batch: detections found and made; pixels of the masks."""

    spec: OutputKind
    reference: int = 0
    candidate: int = 0
    found: int = 0
    intersection: int = 0
    union: int = 0

    def add(self, expected: np.ndarray, actual: np.ndarray) -> None:
        if self.spec.kind == "detection":
            for ref, cand in zip(expected, actual, strict=True):
                ref_found, cand_found = detections(ref, self.spec), detections(cand, self.spec)
                self.reference += len(ref_found[0])
                self.candidate += len(cand_found[0])
                self.found += matched(ref_found, cand_found, self.spec.iou)
        elif self.spec.kind == "dense":
            ref_mask = np.asarray(expected) >= self.spec.threshold
            cand_mask = np.nan_to_num(np.asarray(actual, dtype=np.float64), nan=-np.inf) >= self.spec.threshold
            self.intersection += int(np.count_nonzero(ref_mask & cand_mask))
            self.union += int(np.count_nonzero(ref_mask | cand_mask))

    def figures(self) -> dict:
        """``recall``/``precision`` (detection) or ``iou`` (dense); None where FP32 gives nothing to compare."""
        if self.spec.kind == "detection":
            return {
                "reference_detections": self.reference,
                "recall": self.found / self.reference if self.reference else None,
                "precision": self.found / self.candidate if self.candidate else (1.0 if self.reference == 0 else 0.0),
            }
        if self.spec.kind == "dense":
            return {"iou": self.intersection / self.union if self.union else None}
        return {}


PASS_THROUGH = {"Reshape", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Flatten", "Cast"}
SCORES = {"Sigmoid", "Softmax", "LogSoftmax"}


def mixed_outputs(model: Path | str | onnx.GraphProto) -> dict[str, str]:
    """Outputs made by a Concat that joins Sigmoid/Softmax scores with other values (through reshapes), and what
    to declare for each: their cosine and SQNR are dominated by the larger values (a YOLO head's box pixels)."""
    graph = model if isinstance(model, onnx.GraphProto) else onnx.load_model(str(model), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}

    def source(name: str):
        node = producer.get(name)
        while node is not None and node.op_type in PASS_THROUGH and node.input:
            node = producer.get(node.input[0])
        return node

    notes = {}
    for out in graph.output:
        concat = source(out.name)
        if concat is None or concat.op_type != "Concat":
            continue
        parts = [source(name) for name in concat.input]
        scored = [p is not None and p.op_type in SCORES for p in parts]
        if any(scored) and not all(scored):
            ops = "/".join(sorted({p.op_type for p, s in zip(parts, scored, strict=True) if s}))
            notes[out.name] = (
                f"output {out.name} joins {ops} "
                f"scores with other values (a detection head?): its cosine and SQNR are dominated by the larger "
                f"values; declare it to be judged by what it detects, e.g. --output {out.name}:detection,"
                f"boxes=0:4,scores=4: (docs/check.md#output-kinds)"
            )
    return notes
