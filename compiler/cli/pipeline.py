"""`compile plan` and `compile release`: the whole pipeline from one YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import ExplainOption, JsonOption, PipelineArgument, RemoteCacheOption, examples, option, switch
from compiler.core.errors import InvalidInput
from compiler.core.flags import OUTPUT, STORE, TARGETS
from compiler.core.text import printable

FORMATS = ("table", "json", "github-matrix", "gitlab")


@examples(
    "compile plan pipelines/example.yaml",
    "compile plan pipelines/example.yaml --json",
    "compile plan pipelines/example.yaml --format github-matrix",
    "compile plan pipelines/example.yaml --format gitlab > child-pipeline.yml",
)
def plan(
    pipeline: PipelineArgument,
    format: Annotated[
        str,
        option(
            "[table|json|github-matrix|gitlab]",
            OUTPUT,
            "How to print the jobs (github-matrix: for strategy.matrix via fromJSON; gitlab: a child pipeline's "
            "YAML, docs/gitlab-ci.md).",
        ),
    ] = "table",
    json: JsonOption = False,
) -> None:
    """The build jobs of a release, one per SKU, with the runner labels each needs."""
    from compiler.pipeline import github_matrix, load_pipeline, plan_release

    if format not in FORMATS:
        raise InvalidInput(f"--format {format}: choose {', '.join(FORMATS[:-1])} or {FORMATS[-1]}")
    if json and format not in ("table", "json"):
        raise InvalidInput(f"--json and --format {format}: give one (--json is --format json)")
    jobs = plan_release(load_pipeline(pipeline))
    if json or format == "json":
        render.emit_json(jobs)
    elif format == "github-matrix":
        render.emit_json(github_matrix(jobs), versioned=False)  # GitHub's format: a key more is a matrix axis
    elif format == "gitlab":
        import yaml

        from compiler import version
        from compiler.pipeline.plan import gitlab_pipeline

        render.write_stdout(yaml.safe_dump(gitlab_pipeline(jobs, version=version()), sort_keys=False))
    else:
        render.release_plan(jobs)


@examples(
    "compile release pipelines/example.yaml",
    "compile release pipelines/example.yaml --dry-run",
    "compile release pipeline.yaml --only-sku h100 --store s3://models/team",
    "compile release pipeline.yaml --finalize --store s3://models/team",
)
def release(
    pipeline: PipelineArgument,
    store: Annotated[
        str | None, option("URI", STORE, "Override the pipeline's store (default: its store:).", envvar="COMPILE_STORE")
    ] = None,
    only_sku: Annotated[
        str | None, option("SKU", TARGETS, "One job of a sharded release: build, check and stage this SKU's engines.")
    ] = None,
    finalize: Annotated[bool, switch("--finalize", TARGETS, "Publish once every job's engines are staged.")] = False,
    dry_run: Annotated[
        bool, switch("--dry-run", TARGETS, "Validate everything and print the plan; build nothing.")
    ] = False,
    work: Annotated[
        Path | None,
        option(
            "DIR", OUTPUT, "Work folder (default release/NAME-VERSION): builds, calibration, release-report.md/.json."
        ),
    ] = None,
    remote_cache: RemoteCacheOption = None,
    explain: ExplainOption = False,
    json: JsonOption = False,
) -> None:
    """Inspect, calibrate, build, check and publish a release from one pipeline file."""
    from compiler.pipeline import release as run_release

    report = run_release(
        pipeline,
        store=store,
        only_sku=only_sku,
        finalize=finalize,
        dry_run=dry_run,
        work=work,
        on_stage=None if json else render.stage_line,
        remote_cache=remote_cache,
        explain=explain,
    )
    render.warnings(report.warnings)
    if explain and not json:
        for stage in report.stages:
            if stage.cache is not None:
                render.console.print(
                    f"{stage.stage}: {stage.cache.source}"
                    + (f": {printable(stage.cache.reason)}" if stage.cache.reason else "")
                )
        for engine in report.engines:
            if engine.cache is not None and engine.cache.source == "miss":
                render.console.print(f"miss {engine.sku}/{engine.precision}: {printable(engine.cache.reason or '')}")
    if json:
        render.emit_json(report)
    elif not dry_run:
        render.console.print(f"report: {printable(Path(report.work) / 'release-report.md')}")
    if report.failure is not None:
        raise report.failure
