"""release-report.md: a release run for people and CI job summaries."""

from __future__ import annotations

from compiler.output import markdown_cell
from compiler.release.run import ReleaseReport


def markdown(report: ReleaseReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [f"## Release {report.name}@{report.version}: {verdict}", "",
             f"Pipeline `{report.pipeline}` ({report.mode}), store `{report.store}`, {report.seconds:.1f} s.", "",
             "| stage | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s.stage} | {s.status} | {s.seconds:.2f} | {markdown_cell(s.detail)} |" for s in report.stages]
    if report.engines:
        lines += ["", "| sku | precision | status | cache | files |", "|---|---|---|---|---|"]
        lines += [f"| {e.sku} | {e.precision} | {e.status} | {'hit' if e.cache_hit else 'built'} | "
                  f"[engine.json]({e.folder}/engine.json), [layers.json]({e.folder}/layers.json), "
                  f"[build.log]({e.folder}/build.log) |" for e in report.engines]
    return "\n".join(lines) + "\n"
