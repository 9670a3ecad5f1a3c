"""The outputs of ``compile check``: a Rich table per engine, ``BUILD_DIR/check.json`` (the record a release step
reads), ``BUILD_DIR/check.md`` (a Markdown report for a CI job summary, appended to ``$GITHUB_STEP_SUMMARY`` when
that is set)."""

from __future__ import annotations

from pathlib import Path

from compiler.files import write_atomic
from compiler.output import append_step_summary, markdown_cell, printable
from compiler.records import CHECK_RECORD, CheckReport, CheckResult

MARKDOWN = "check.md"
EVIDENCE_SHOWN = 5
"""Evidence lines per check in the table and check.md (check.json has them all)."""


def versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import polygraphy

    from compiler import version

    return {"compile": version(), "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "polygraphy": polygraphy.__version__}


def sections(report: CheckReport) -> list[tuple[str, list[CheckResult]]]:
    """(title, checks): the model's, then one per engine."""
    return [("model", report.model_checks)] + [(f"{e.sku}/{e.precision}", e.checks) for e in report.engines]


def write_report(report: CheckReport, build_dir: Path) -> None:
    """check.json and check.md into the build folder (atomically: a reader sees the old file or the new one), and
    check.md appended to $GITHUB_STEP_SUMMARY when set."""
    write_atomic(build_dir / CHECK_RECORD, report.model_dump_json(indent=2).encode())
    text = markdown(report)
    write_atomic(build_dir / MARKDOWN, text.encode())
    append_step_summary(text)



def markdown(report: CheckReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [f"## compile check: {verdict}", "",
             f"`{markdown_cell(report.build_dir)}`: {markdown_cell(report.summary)}", ""]
    for title, checks in sections(report):
        lines += [f"### {markdown_cell(title)}", "", "| check | status | evidence |", "|---|---|---|"]
        for c in checks:
            evidence = "<br>".join(markdown_cell(e) for e in c.evidence[:EVIDENCE_SHOWN])
            lines.append(f"| {c.name} | {c.status.value} | {markdown_cell(c.summary)}"
                         + (f"<br>{evidence}" if evidence else "") + " |")
        lines.append("")
    return "\n".join(lines)


def render(report: CheckReport) -> None:
    from rich.text import Text

    from compiler.output import console, status_text, table

    for title, checks in sections(report):
        rows = []
        for c in checks:
            evidence = "\n".join([c.summary, *c.evidence[:EVIDENCE_SHOWN]]
                                 + ([f"... {len(c.evidence) - EVIDENCE_SHOWN} more in check.json"]
                                    if len(c.evidence) > EVIDENCE_SHOWN else []))
            rows.append([c.name, status_text(c.status.value), Text("\n".join(map(printable, evidence.split("\n"))))])
        console.print(table(title, ["check", "status", "evidence"], rows))
    verdict = "[green]passed[/green]" if report.passed else "[red]FAILED[/red]"
    from rich.markup import escape

    when = "reused: check.json was made from these same inputs (--no-reuse checks again)" if report.reused \
        else f"{report.seconds:.1f} s"
    console.print(f"{verdict}: {escape(printable(report.summary))} ({when})")
