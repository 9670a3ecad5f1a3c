"""The report's charts, drawn by matplotlib as SVG text the page inlines (no script, no network, a few KB each:
Plotly's bundle alone is 3.5 MB and Vega needs a script or a converter). Every mark a reader counts (a bar) carries
an id ``mark-<chart>-<i>`` so a test can count what was drawn."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from compiler.report.view import Figure, ReleaseView

OK, FAILED, NEUTRAL, HIT = "#2e7d32", "#c62828", "#546e7a", "#90a4ae"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "trt-compile", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def _svg(figure) -> str:
    """The figure as inline SVG: no XML prolog, no doctype, no metadata (its date would change every report)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    _pyplot().close(figure)
    text = buffer.getvalue()
    return re.sub(r"^.*?(?=<svg)", "", text, flags=re.S)


def _bars(chart: str, labels: Sequence[str], values: Sequence[float], colors: Sequence[str], xlabel: str,
          thresholds: Sequence[float | None] = ()) -> str:  # fmt: skip
    """Horizontal bars, one per label, with each bar's threshold drawn as a tick where it has one."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(labels) + 0.9))
    bars = axes.barh(range(len(labels)), values, color=colors)
    for index, bar in enumerate(bars):
        bar.set_gid(f"mark-{chart}-{index}")
    for index, threshold in enumerate(thresholds):
        if threshold is not None:
            axes.plot([threshold, threshold], [index - 0.4, index + 0.4], color="black", linewidth=2)
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure)


def accuracy(figures: list[Figure], gate: str, xlabel: str) -> str | None:
    """One gate's figure for every engine and output, its threshold drawn; a failed one in red."""
    chosen = [f for f in figures if f.gate == gate]
    if not chosen:
        return None
    return _bars(
        f"accuracy-{gate}",
        [f"{f.where} {f.output}" for f in chosen],
        [f.value for f in chosen],
        [FAILED if f.passed is False else OK if f.passed else NEUTRAL for f in chosen],
        xlabel,
        [f.threshold for f in chosen],
    )


def sensitivity(view: ReleaseView) -> list[tuple[str, str]]:
    """Per calibration, its most sensitive quantized nodes (output SQNR when quantized alone: lower hurts more)."""
    charts = []
    for row in view.calibrations:
        if row.sensitive:
            svg = _bars(
                f"sensitivity-{row.precision}",
                [f"{s.node} ({s.op})" for s in row.sensitive],
                [s.sqnr_db for s in row.sensitive],
                [NEUTRAL] * len(row.sensitive),
                "output SQNR dB when quantized alone (lower hurts more)",
            )
            charts.append((row.precision, svg))
    return charts


def timeline(view: ReleaseView) -> str | None:
    """The stages one after another, a reused one (cache hit) in grey."""
    if not view.stages:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(view.stages) + 0.9))
    start = 0.0
    for index, stage in enumerate(view.stages):
        color = FAILED if stage.status == "failed" else HIT if stage.cache in ("hit", "remote") else OK
        [bar] = axes.barh([index], [max(stage.seconds, 0.001)], left=[start], color=color)
        bar.set_gid(f"mark-timeline-{index}")
        start += stage.seconds
    axes.set_yticks(range(len(view.stages)), [s.stage for s in view.stages])
    axes.invert_yaxis()
    axes.set_xlabel("seconds (grey: reused from a cache)")
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure)


def sizes(view: ReleaseView) -> str | None:
    """Each engine's plan size."""
    built = [e for e in view.engines if e.plan_bytes is not None]
    if not built:
        return None
    return _bars("sizes", [e.label for e in built], [e.plan_bytes / 1024 for e in built], [NEUTRAL] * len(built),
                 "plan size (KiB)")  # fmt: skip
