"""``compile diff A B``: what changed between two releases (or a release and a build): engines added or gone, plan
size, kernels and precision mix, and every accuracy figure, regressions first. A figure regresses when it moves the
wrong way by more than its tolerance (absolute, per gate: what sampling noise moves on one model)."""

from __future__ import annotations

from html import escape

from pydantic import BaseModel

from compiler.report.view import ReleaseView

DIFF_FORMAT = 1
TOLERANCE = {
    "min-cosine": 0.001,
    "min-cosine-low": 0.005,
    "min-sqnr": 1.0,
    "min-top1": 0.01,
    "min-top5": 0.01,
    "min-recall": 0.01,
    "min-precision": 0.01,
    "min-iou": 0.01,
    "finite": 0.0,
    "max-abs-error": 0.0,
}
"""How far a figure may move the wrong way before it is a regression (cosine 0.001, SQNR 1 dB, agreement, recall
and IoU 1 %)."""
SIZE_TOLERANCE = 0.05
"""A plan growing by more than 5 % is reported as a regression of size."""


class Change(BaseModel):
    where: str
    what: str
    before: float | str | None
    after: float | str | None
    regression: bool
    note: str = ""


class ReleaseDiff(BaseModel):
    format_version: int = DIFF_FORMAT
    before: str
    after: str
    changes: list[Change]
    """Regressions first, then every other change."""

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]


def diff(before: ReleaseView, after: ReleaseView) -> ReleaseDiff:
    changes = _engine_changes(before, after) + _figure_changes(before, after)
    changes.sort(key=lambda c: not c.regression)
    return ReleaseDiff(before=before.title, after=after.title, changes=changes)


def _engine_changes(before: ReleaseView, after: ReleaseView) -> list[Change]:
    old = {e.label: e for e in before.engines}
    new = {e.label: e for e in after.engines}
    changes = [Change(where=label, what="engine", before="built", after=None, regression=True, note="gone")
               for label in sorted(old.keys() - new.keys())]  # fmt: skip
    changes += [Change(where=label, what="engine", before=None, after="built", regression=False, note="new")
                for label in sorted(new.keys() - old.keys())]  # fmt: skip
    for label in sorted(old.keys() & new.keys()):
        a, b = old[label], new[label]
        if a.plan_sha256 != b.plan_sha256 and a.plan_bytes and b.plan_bytes:
            grew = b.plan_bytes > a.plan_bytes * (1 + SIZE_TOLERANCE)
            changes.append(Change(where=label, what="plan bytes", before=a.plan_bytes, after=b.plan_bytes,
                                  regression=grew, note="another plan"))  # fmt: skip
        if a.kernel_precisions != b.kernel_precisions:
            fell = (b.low_precision_share or 0) < (a.low_precision_share or 0) - 0.05
            changes.append(Change(where=label, what="kernels by precision", before=_mix(a.kernel_precisions),
                                  after=_mix(b.kernel_precisions), regression=fell))  # fmt: skip
    return changes


def _mix(mix: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(mix.items()))


def _figure_changes(before: ReleaseView, after: ReleaseView) -> list[Change]:
    old = {(f.where, f.output, f.gate): f for f in before.figures}
    changes = []
    for f in after.figures:
        was = old.get((f.where, f.output, f.gate))
        if was is None or was.value == f.value:
            continue
        moved = f.value - was.value if f.higher_is_better else was.value - f.value
        regression = moved < -TOLERANCE.get(f.gate, 0.0) or (was.passed is not False and f.passed is False)
        changes.append(Change(where=f"{f.where} {f.output}", what=f.gate, before=was.value, after=f.value,
                              regression=regression))  # fmt: skip
    return changes


def html(result: ReleaseDiff) -> str:
    """The diff as a section of the report page, regressions in red."""
    if not result.changes:
        return f"<h3>Against {escape(result.before)}: no change</h3>"
    rows = "".join(
        f"<tr class='{'failed' if c.regression else ''}'><td>{escape(c.where)}</td><td>{escape(c.what)}</td>"
        f"<td>{escape(str(c.before))}</td><td>{escape(str(c.after))}</td>"
        f"<td>{'regression' if c.regression else escape(c.note or 'changed')}</td></tr>"
        for c in result.changes
    )
    return (
        f"<h3>Against {escape(result.before)}: {len(result.regressions)} regression(s)</h3>"
        f"<table><thead><tr><th>where</th><th>what</th><th>before</th><th>after</th><th></th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
