"""An output's declared kind, ``--output NAME:KIND[,KEY=VALUE...]``: parsed and checked here, where the option
groups see it; judged by :mod:`compiler.data.output_kinds`."""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.core.errors import InvalidInput

KINDS = ("tensor", "logits", "sequence", "embedding", "dense", "detection")
"""``logits``: class scores on the last axis, judged shift-invariantly and by top-1/top-5 agreement (``sequence``:
per step of ``[B, T, C]``); ``embedding``: cosine only; ``dense``: a map, also judged by the IoU of values at or
above ``threshold``; ``detection``: boxes and class scores along one axis, judged by recall and precision."""
PARAMETERS = {
    "dense": {"threshold", "min"},
    "detection": {"boxes", "scores", "axis", "threshold", "iou", "nms", "format", "min"},
}
DETECTION_DEFAULTS = {"threshold": 0.25, "iou": 0.5, "nms": 0.7}
DENSE_THRESHOLD = 0.5


@dataclass(frozen=True)
class OutputKind:
    """One output's declared kind and its parameters (``boxes``/``scores`` are row ranges along ``axis``)."""

    output: str
    kind: str
    boxes: tuple[int | None, int | None] = (0, 4)
    scores: tuple[int | None, int | None] = (4, None)
    axis: int = 1
    threshold: float = DETECTION_DEFAULTS["threshold"]
    iou: float = DETECTION_DEFAULTS["iou"]
    nms: float | None = DETECTION_DEFAULTS["nms"]
    box_format: str = "xywh"
    minimum: float | None = None
    """The kind's gate (recall and precision; IoU), when the declaration sets ``min=``; else the precision's."""
    text: str = field(default="", compare=False)


def parse_output(text: str) -> OutputKind:
    """``output0:detection,boxes=0:4,scores=4:,threshold=0.25`` -> :class:`OutputKind`; bad text is exit 2."""
    head, _, params = text.partition(",")
    name, sep, kind = head.rpartition(":")
    flag = f"--output {text}"
    if not sep or not name or kind not in KINDS:
        raise InvalidInput(f"{flag}: give NAME:KIND with KIND one of {', '.join(KINDS)} (e.g. output0:detection)")
    values: dict[str, str] = {}
    for item in filter(None, params.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in PARAMETERS.get(kind, set()):
            allowed = ", ".join(sorted(PARAMETERS.get(kind, ()))) or "none"
            raise InvalidInput(f"{flag}: {item!r} is not a KEY=VALUE this kind takes (takes: {allowed})")
        values[key] = value
    try:
        return _with_values(OutputKind(output=name, kind=kind, text=text), values)
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


def _with_values(spec: OutputKind, values: dict[str, str]) -> OutputKind:
    changes: dict = {}
    if spec.kind == "dense":
        changes["threshold"] = DENSE_THRESHOLD
    for key, value in values.items():
        if key in ("boxes", "scores"):
            changes[key] = _rows(key, value)
        elif key == "axis":
            changes["axis"] = _number(key, value, int, 1, 16)
        elif key == "format":
            if value not in ("xywh", "xyxy"):
                raise ValueError("format: give xywh (centre, size) or xyxy (corners)")
            changes["box_format"] = value
        elif key == "nms":
            changes["nms"] = None if value == "none" else _number(key, value, float, 0.0, 1.0)
        elif key == "threshold":
            changes["threshold"] = _number(key, value, float, -1e30, 1e30)
        else:
            changes["minimum" if key == "min" else key] = _number(key, value, float, 0.0, 1.0)
    return spec.__class__(**{**spec.__dict__, **changes})


def _number(key: str, value: str, kind: type, low: float, high: float):
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"{key}={value}: give a {'whole ' if kind is int else ''}number") from None
    if not low <= number <= high:  # NaN fails this too
        raise ValueError(f"{key}={value}: give {low:g} to {high:g}")
    return number


def _rows(key: str, value: str) -> tuple[int | None, int | None]:
    start, sep, stop = value.partition(":")
    if not sep:
        raise ValueError(f"{key}={value}: give a row range START:STOP (4: is every row from 4)")
    bounds = [None if not part else _number(key, part, int, 0, 1 << 20) for part in (start, stop)]
    if bounds[0] is not None and bounds[1] is not None and bounds[1] <= bounds[0]:
        raise ValueError(f"{key}={value}: STOP must be past START")
    return bounds[0], bounds[1]


def check_declarations(texts: tuple[str, ...]) -> None:
    """Each declaration parses, and no output is declared twice (the model's outputs are checked when it is read)."""
    names = [parse_output(text).output for text in texts]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InvalidInput(f"--output: output {twice[0]!r} is declared twice; declare each output once")


def declared(texts: tuple[str, ...] | list[str], outputs: list[str]) -> dict[str, OutputKind]:
    """Each declaration by output name, checked against the model's ``outputs``."""
    kinds: dict[str, OutputKind] = {}
    for text in texts:
        spec = parse_output(text)
        if spec.output not in outputs:
            raise InvalidInput(f"--output {text}: the model has no output {spec.output!r} ({', '.join(outputs)})")
        if spec.output in kinds:
            raise InvalidInput(f"--output {text}: output {spec.output!r} is declared twice")
        kinds[spec.output] = spec
    return kinds
