"""The outputs of ``compile check``: ``BUILD_DIR/check.json`` (the record a release step
reads), ``BUILD_DIR/check.md`` (a Markdown report for a CI job summary, appended to ``$GITHUB_STEP_SUMMARY`` when
that is set)."""

from __future__ import annotations

from pathlib import Path

from compiler.core.ci import append_step_summary
from compiler.core.files import write_atomic
from compiler.core.records import CHECK_RECORD, CheckReport, CheckResult
from compiler.core.text import markdown_cell

MARKDOWN = "check.md"
EVIDENCE_SHOWN = 5
"""Evidence lines per check in the table and check.md (check.json has them all)."""


def versions() -> dict[str, str]:
    from compiler.data.session import tool_versions

    return tool_versions("onnx", "onnxruntime", "polygraphy")


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
    lines = [
        f"## compile check: {verdict}",
        "",
        f"`{markdown_cell(report.build_dir)}`: {markdown_cell(report.summary)}",
        "",
    ]
    for title, checks in sections(report):
        lines += [f"### {markdown_cell(title)}", "", "| check | status | evidence |", "|---|---|---|"]
        for c in checks:
            evidence = "<br>".join(markdown_cell(e) for e in c.evidence[:EVIDENCE_SHOWN])
            lines.append(
                f"| {c.name} | {c.status.value} | {markdown_cell(c.summary)}"
                + (f"<br>{evidence}" if evidence else "")
                + " |"
            )
        lines.append("")
    return "\n".join(lines)


def earlier_report(path: Path, key: str) -> CheckReport | None:
    """The folder's check.json if it was made from the same inputs; None when absent, other or unreadable (then
    the check runs again and replaces it)."""
    from compiler.core.errors import CompileError
    from compiler.core.record_files import read_record

    if not path.is_file():
        return None
    try:
        report = read_record(path, CheckReport, "")
    except CompileError:
        return None
    if report.inputs_sha256 != key:
        return None
    if report.golden is not None:  # its golden inputs must still be the ones it wrote
        from compiler.check.golden_capture import still_there

        if not still_there(path.parent, report.golden):
            return None
    return report.model_copy(update={"reused": True})
