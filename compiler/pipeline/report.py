"""release-report.json and release-report.md: what a release run built, reused, checked and published, for
machines and for people (and CI job summaries)."""

from __future__ import annotations

import os
from pathlib import Path, PurePath
from urllib.parse import quote

from pydantic import BaseModel, PrivateAttr

from compiler.core.errors import CompileError
from compiler.core.records import CacheOutcome, Status
from compiler.core.text import markdown_cell
from compiler.pipeline.plan import ReleasePlan

REPORT_FORMAT = 1


class StageReport(BaseModel):
    stage: str
    status: Status
    detail: str
    seconds: float
    cache: CacheOutcome | None = None
    """calibrate, build, check: ``hit`` (local), ``remote`` or ``miss`` (with the reason of the first miss)."""


class EngineLine(BaseModel):
    sku: str
    precision: str
    status: Status
    cache_hit: bool
    folder: str
    cache: CacheOutcome | None = None


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
    warnings: list[str] = []
    """A damaged remote cache entry (refused and made again), a remote that did not answer or take an entry."""
    _failure: CompileError | None = PrivateAttr(default=None)

    @property
    def failure(self) -> CompileError | None:
        """The error of the stage that failed (raise it after reporting), if one did."""
        return self._failure


def markdown(report: ReleaseReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [
        f"## Release {report.name}@{report.version}: {verdict}",
        "",
        f"Pipeline `{report.pipeline}` ({report.mode}), store `{report.store}`, {report.seconds:.1f} s.",
        "",
        "| stage | status | seconds | cache | detail |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s.stage} | {s.status} | {s.seconds:.2f} | {_cache(s.cache)} | {markdown_cell(s.detail)} |"
        for s in report.stages
    ]
    if report.engines:
        lines += ["", "| sku | precision | status | cache | files |", "|---|---|---|---|---|"]
        lines += [
            f"| {e.sku} | {e.precision} | {e.status} | "
            f"{_cache(e.cache) or ('hit' if e.cache_hit else 'built')} | "
            f"{', '.join(_link(report, e.folder, file) for file in ('engine.json', 'layers.json', 'build.log'))} |"
            for e in report.engines
        ]
    lines += ["", *(f"> warning: {markdown_cell(w)}" for w in report.warnings)] if report.warnings else []
    return "\n".join(lines) + "\n"


def _link(report: ReleaseReport, folder: str, file: str) -> str:
    """A link from the report's own folder (``report.work``, where it is read) to ``folder``'s file, normalised:
    links from the working directory were broken wherever the report was opened."""
    target = os.path.relpath(os.path.join(folder, file), report.work)
    return f"[{file}]({quote(PurePath(target).as_posix())})"


def _cache(outcome: CacheOutcome | None) -> str:
    if outcome is None:
        return ""
    return markdown_cell(f"{outcome.source}: {outcome.reason}" if outcome.reason else outcome.source)


def combined(outcomes: list[tuple[str, CacheOutcome | None]]) -> CacheOutcome | None:
    """One stage's outcome over its parts: a miss if any missed (naming the first), else remote if any came from
    there, else a hit."""
    known = [(where, o) for where, o in outcomes if o is not None]
    if not known:
        return None
    for where, outcome in known:
        if outcome.source == "miss":
            return CacheOutcome(source="miss", reason=f"{where}: {outcome.reason}" if where else outcome.reason)
    return CacheOutcome(source="remote" if any(o.source == "remote" for _, o in known) else "hit")


def stage_rows(report: ReleaseReport) -> list:
    """The stages as the HTML report's timeline draws them."""
    from compiler.report.view import StageRow

    return [
        StageRow(
            stage=s.stage,
            status=str(s.status),
            seconds=s.seconds,
            cache=s.cache.source if s.cache else None,
            detail=s.detail,
        )
        for s in report.stages
    ]


def read_report(work: Path) -> ReleaseReport | None:
    """The release-report.json of a work folder (of a whole release run), None when there is none."""
    from compiler.core.record_files import parse_record, read_record_bytes

    path = work / "release-report.json"
    if not path.is_file():
        return None
    hint = "run compile release again"
    return parse_record(read_record_bytes(path, hint), path, ReleaseReport, hint)
