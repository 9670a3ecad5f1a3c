"""The report's charts, drawn by matplotlib as SVG text the page inlines (no script, no network, a few KB each:
Plotly's bundle alone is 3.5 MB and Vega needs a script or a converter). Every mark a reader counts (a bar) carries
an id ``mark-<chart>-<i>`` so a test can count what was drawn.

A chart is keyed by what it draws; one the page at the same path already holds under that key is reused, not drawn
again, so a re-release that changed nothing neither imports nor runs matplotlib (importing pyplot alone takes about
as long as every stage's reuse check together). The timeline, which changes every run, is an HTML table with bars."""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from html import escape

from compiler.report.view import Figure, ReleaseView

OK, FAILED, NEUTRAL, HIT = "#2e7d32", "#c62828", "#546e7a", "#90a4ae"
STYLE_VERSION = 1
"""Part of every chart's key: raise it when a change here draws the same figures differently."""


@dataclass(frozen=True)
class Chart:
    key: str
    svg: str


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


def _key(*drawn: object) -> str:
    return hashlib.sha256(json.dumps([STYLE_VERSION, _matplotlib(), *drawn]).encode()).hexdigest()


@cache
def _matplotlib() -> str:
    from importlib.metadata import version

    return version("matplotlib")


def _bars(drawn_before: Mapping[str, str], chart: str, labels: Sequence[str], values: Sequence[float],
          colors: Sequence[str], xlabel: str, thresholds: Sequence[float | None] = ()) -> Chart:  # fmt: skip
    """Horizontal bars, one per label, with each bar's threshold drawn as a tick where it has one; the chart
    ``drawn_before`` holds under the same key when it holds one."""
    key = _key(chart, list(labels), list(values), list(colors), xlabel, list(thresholds))
    if key in drawn_before:
        return Chart(key, drawn_before[key])
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
    return Chart(key, _svg(figure))


def accuracy(drawn_before: Mapping[str, str], figures: list[Figure], gate: str, xlabel: str) -> Chart | None:
    """One gate's figure for every engine and output, its threshold drawn; a failed one in red."""
    chosen = [f for f in figures if f.gate == gate]
    if not chosen:
        return None
    return _bars(
        drawn_before,
        f"accuracy-{gate}",
        [f"{f.where} {f.output}" for f in chosen],
        [f.value for f in chosen],
        [FAILED if f.passed is False else OK if f.passed else NEUTRAL for f in chosen],
        xlabel,
        [f.threshold for f in chosen],
    )


def sensitivity(drawn_before: Mapping[str, str], view: ReleaseView) -> list[tuple[str, Chart]]:
    """Per calibration, its most sensitive quantized nodes (output SQNR when quantized alone: lower hurts more)."""
    charts = []
    for row in view.calibrations:
        if row.sensitive:
            chart = _bars(
                drawn_before,
                f"sensitivity-{row.precision}",
                [f"{s.node} ({s.op})" for s in row.sensitive],
                [s.sqnr_db for s in row.sensitive],
                [NEUTRAL] * len(row.sensitive),
                "output SQNR dB when quantized alone (lower hurts more)",
            )
            charts.append((row.precision, chart))
    return charts


def timeline(view: ReleaseView) -> str | None:
    """The stages one after another, a bar each in a table (offset by the stages before it), a reused one (cache
    hit) in grey."""
    if not view.stages:
        return None
    total = sum(stage.seconds for stage in view.stages) or 1.0
    rows, start = [], 0.0
    for index, stage in enumerate(view.stages):
        color = FAILED if stage.status == "failed" else HIT if stage.cache in ("hit", "remote") else OK
        bar = (
            f'<div id="mark-timeline-{index}" style="margin-left:{100 * start / total:.2f}%;'
            f'width:{max(100 * stage.seconds / total, 0.5):.2f}%;height:1em;background:{color}"></div>'
        )
        rows.append(
            f"<tr><td>{escape(stage.stage)}</td><td>{escape(stage.status)}</td><td>{escape(stage.cache or '')}</td>"
            f'<td>{stage.seconds:.2f} s</td><td style="width:60%">{bar}</td></tr>'
        )
        start += stage.seconds
    head = "".join(f"<th>{h}</th>" for h in ("stage", "status", "cache", "seconds", "time (grey: reused from a cache)"))
    return f'<table class="timeline"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def sizes(drawn_before: Mapping[str, str], view: ReleaseView) -> Chart | None:
    """Each engine's plan size."""
    built = [e for e in view.engines if e.plan_bytes is not None]
    if not built:
        return None
    labels, kib = [e.label for e in built], [e.plan_bytes / 1024 for e in built]
    return _bars(drawn_before, "sizes", labels, kib, [NEUTRAL] * len(built), "plan size (KiB)")


CHART = re.compile(r'<div class="chart" data-key="([0-9a-f]{64})">(<svg[^>]*>.*?</svg>\s*)</div>', re.S)
MAX_PAGE_BYTES = 16 << 20


def drawn_in(page: str) -> dict[str, str]:
    """The charts a page written before holds, by key (the page's Content-Security-Policy runs no script whatever
    a tampered page's SVG holds; a chart that does not parse as one is drawn again)."""
    return {match[1]: match[2] for match in CHART.finditer(page)}
