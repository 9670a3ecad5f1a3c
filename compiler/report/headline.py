"""The headline a CI job summary shows above the stages: each engine's size and its worst accuracy figure against
its gate, the regressions against the previous version, and where the full page is (release-report.html, kept as
the job's artifact). Markdown, because a job summary is."""

from __future__ import annotations

from compiler.core.text import markdown_cell
from compiler.report.diff import ReleaseDiff
from compiler.report.view import Figure, ReleaseView


def _worst(figures: list[Figure]) -> Figure | None:
    """The figure closest to (or furthest past) its gate, relative to the threshold."""
    gated = [f for f in figures if f.threshold is not None and (f.threshold != 0 or f.passed is False)]
    if not gated:
        return None

    def margin(f: Figure) -> float:
        scale = max(abs(f.threshold), 1e-9)
        return ((f.value - f.threshold) if f.higher_is_better else (f.threshold - f.value)) / scale

    return min(gated, key=margin)


def markdown(view: ReleaseView, comparison: ReleaseDiff | None, page: str) -> str:
    lines = ["| engine | plan | worst figure vs its gate | |", "|---|---|---|---|"]
    for engine in view.engines:
        worst = _worst([f for f in view.figures if f.where == engine.label])
        size = f"{engine.plan_bytes / 1024:.0f} KiB" if engine.plan_bytes is not None else engine.status
        shown = f"{worst.output} {worst.gate} {worst.value:.5g} (gate {worst.threshold:.5g})" if worst else "not gated"
        verdict = "" if worst is None else "ok" if worst.passed else "**failed**"
        lines.append(f"| {engine.label} | {size} | {markdown_cell(shown)} | {verdict} |")
    if comparison is not None:
        lines += ["", f"Against {comparison.before}: {len(comparison.regressions)} regression(s)"]
        lines += [f"- **{markdown_cell(c.where)} {c.what}**: {c.before} -> {c.after}" for c in comparison.regressions]
    lines += ["", f"Full report: `{page}` (charts, every check; kept as this job's artifact)", ""]
    return "\n".join(lines)
