"""release-report.json and release-report.md: what a release run built, reused, checked and published, for
machines and for people (and CI job summaries)."""

from __future__ import annotations

from pydantic import BaseModel, PrivateAttr

from compiler.core.errors import CompileError
from compiler.core.records import Status
from compiler.core.text import markdown_cell
from compiler.pipeline.plan import ReleasePlan

REPORT_FORMAT = 1


class StageReport(BaseModel):
    stage: str
    status: Status
    detail: str
    seconds: float


class EngineLine(BaseModel):
    sku: str
    precision: str
    status: Status
    cache_hit: bool
    folder: str


class ReleaseReport(BaseModel):
    """release-report.json: what a release run built, reused, checked and published."""

    format_version: int = REPORT_FORMAT
    pipeline: str
    name: str
    version: str
    store: str
    mode: str
    """release, only-sku SKU, finalize or dry-run."""
    passed: bool
    stages: list[StageReport]
    engines: list[EngineLine] = []
    published: dict[str, object] | None = None
    plan: ReleasePlan
    work: str
    seconds: float
    _failure: CompileError | None = PrivateAttr(default=None)

    @property
    def failure(self) -> CompileError | None:
        """The error of the stage that failed (raise it after reporting), if one did."""
        return self._failure


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
