"""release-report.html: one self-contained page per release (styles and charts inline, no script, no request at
view time), so it opens from a CI artifact, an S3 object or a mail attachment alike. Sections, in the order a
reviewer reads them: summary, engines, accuracy, calibration, checks, timeline, links (and the diff against the
previous version when one is given)."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from compiler.core.progress import phase_summary
from compiler.report import charts
from compiler.report.view import ReleaseView

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f5f5f5}.ok{color:#2e7d32}.failed{color:#c62828;font-weight:bold}.skipped{color:#757575}
.badge{display:inline-block;padding:.15em .6em;border-radius:.3em;color:#fff}
.badge.ok{background:#2e7d32;color:#fff}.badge.failed{background:#c62828;color:#fff}
code{font-size:.92em}.chart svg{max-width:100%;height:auto}
"""
SECTIONS = ("summary", "engines", "accuracy", "calibration", "checks", "timeline", "links")


def _status(status: str) -> str:
    return f'<span class="{escape(status)}">{escape(status)}</span>'


def _table(headers: list[str], rows: list[list[str]]) -> str:
    """A table; cells are HTML already (escape what comes from records before)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(chart: charts.Chart | None) -> str:
    return f'<div class="chart" data-key="{chart.key}">{chart.svg}</div>' if chart else ""


def _summary(view: ReleaseView) -> str:
    verdict = "ok" if view.passed else "failed"
    counts = ", ".join(f"{v} {k}" for k, v in sorted(view.counts.items())) or "no check ran"
    failures = "".join(f"<li class='failed'>{escape(f)}</li>" for f in view.failures)
    return (
        f'<p><span class="badge {verdict}">{"passed" if view.passed else "failed"}</span> '
        f"{escape(view.source)} &middot; {escape(view.signed)} &middot; checks: {escape(counts)}</p>"
        + (f"<ul>{failures}</ul>" if failures else "")
    )


def _engines(view: ReleaseView, drawn_before: Mapping[str, str]) -> str:
    rows = [
        [
            escape(e.sku),
            escape(e.precision),
            _status(e.status),
            f"{e.plan_bytes / 1024:.1f} KiB" if e.plan_bytes is not None else "",
            f"<code>{escape((e.plan_sha256 or '')[:16])}</code>",
            f"{e.build_seconds:.2f} s" if e.build_seconds is not None else "",
            escape(", ".join(e.profiles)),
            escape(e.runtime),
            f"{e.low_precision_share:.0%}" if e.low_precision_share is not None else "",
            escape(", ".join(f"{k} {v}" for k, v in sorted(e.kernel_precisions.items()))),
        ]
        for e in view.engines
    ]
    headers = ["SKU", "precision", "status", "plan", "sha256", "build", "profiles", "runtime",
               "kernels in its precision", "kernels by precision"]  # fmt: skip
    return _table(headers, rows) + _chart(charts.sizes(drawn_before, view))


def _accuracy(view: ReleaseView, drawn_before: Mapping[str, str]) -> str:
    if not view.figures:
        return "<p>No accuracy figure: no check or calibration compared against FP32.</p>"
    rows = [
        [
            escape(f.where),
            escape(f.output),
            escape(f.gate),
            f"{f.value:.6g}",
            "" if f.threshold is None else f"{f.threshold:.6g}",
            "" if f.passed is None else _status("ok" if f.passed else "failed"),
        ]
        for f in view.figures
    ]
    plots = [
        charts.accuracy(drawn_before, view.figures, "min-cosine", "cosine mean (threshold: black tick)"),
        charts.accuracy(drawn_before, view.figures, "min-sqnr", "SQNR dB (threshold: black tick)"),
        charts.accuracy(drawn_before, view.figures, "min-top1", "top-1 agreement (threshold: black tick)"),
    ]
    return _table(["where", "output", "gate", "value", "threshold", "verdict"], rows) + "".join(map(_chart, plots))


def _calibration(view: ReleaseView, drawn_before: Mapping[str, str]) -> str:
    if not view.calibrations:
        return "<p>No calibration: every engine was built from the FP32 model or its FP16 conversion.</p>"
    rows = [
        [
            escape(c.precision),
            escape(c.method or ""),
            str(c.samples),
            str(c.holdout_samples),
            str(c.quantized_nodes if c.quantized_nodes is not None else ""),
            escape(", ".join(c.excluded) or "none"),
            escape(c.fallback or ""),
            "" if c.seconds is None else escape(phase_summary(c.seconds, c.phases)),
        ]
        for c in view.calibrations
    ]
    heads = ["precision", "method", "samples", "held out", "quantized nodes", "excluded", "fallback", "time to make"]
    table = _table(heads, rows)
    plots = "".join(
        f"<h3>Most sensitive nodes, {escape(p)}</h3>{_chart(chart)}"
        for p, chart in charts.sensitivity(drawn_before, view)
    )
    return table + plots


def _checks(view: ReleaseView) -> str:
    rows = [[escape(c.where), escape(c.check), _status(c.status), escape(c.summary)] for c in view.checks]
    return _table(["where", "check", "verdict", "summary"], rows) if rows else "<p>No check ran.</p>"


def _links(view: ReleaseView) -> str:
    items = "".join(f'<li><a href="{escape(path)}">{escape(label)}</a></li>' for label, path in view.links.items())
    return f"<ul>{items}</ul>" if items else "<p>No file beside this report.</p>"


def render(view: ReleaseView, diff_html: str = "", drawn_before: Mapping[str, str] | None = None) -> str:
    """The whole page (a chart ``drawn_before`` holds under its key is reused, not drawn again)."""
    drawn_before = drawn_before or {}
    parts = {
        "summary": _summary(view) + diff_html,
        "engines": _engines(view, drawn_before),
        "accuracy": _accuracy(view, drawn_before),
        "calibration": _calibration(view, drawn_before),
        "checks": _checks(view),
        "timeline": charts.timeline(view) or "<p>No stage timeline (not a release run).</p>",
        "links": _links(view),
    }
    body = "".join(f'<section id="{name}"><h2>{name.capitalize()}</h2>{parts[name]}</section>' for name in SECTIONS)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        f"<title>{escape(view.title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>Release report: {escape(view.title)}</h1>{body}</body></html>"
    )
