"""`compile release`: inspect -> calibrate -> build matrix -> check -> publish, from one pipeline file.

Each stage is a plain call into the stage's own API, reusing every cached result (a calibration folder that still
matches, the build cache, blobs the store has). A stage that fails stops the release: nothing is published after a
failed gate. One job of a sharded release (``only_sku``) stages its engines in the store instead of publishing;
``finalize`` publishes once every job's part is there. The report (release-report.json and .md) says what each
stage did, and is appended to ``$GITHUB_STEP_SUMMARY`` when that is set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from compiler.core.ci import append_step_summary
from compiler.core.errors import CheckFailed, CompileError, InvalidInput
from compiler.core.files import write_atomic
from compiler.core.records import CacheOutcome, Precision, Status
from compiler.core.reuse import RemoteTier
from compiler.pipeline.plan import ReleasePlan, plan_release
from compiler.pipeline.report import EngineLine, ReleaseReport, StageReport, combined
from compiler.pipeline.spec import LoadedPipeline, load_pipeline

REMOTE_ENV = "COMPILE_REMOTE_CACHE"
StageCallback = Callable[[str, str, str], None]
"""(stage, status, detail): one line per stage for a CI log."""


class _Run:
    """Stages run in order, each timed and reported; the first failure ends the run (and is re-raised). A stage
    that caches says where its result came from in ``outcomes``; warnings of the caches go in ``warnings``."""

    def __init__(self, on_stage: StageCallback | None, tier: RemoteTier | None = None) -> None:
        self.stages: list[StageReport] = []
        self.on_stage = on_stage
        self.failure: CompileError | None = None
        self.tier = tier
        self.outcomes: dict[str, CacheOutcome | None] = {}
        self.warnings: list[str] = []

    def note(self, outcome: CacheOutcome | None) -> None:
        if outcome is not None and outcome.warning:
            self.warnings.append(outcome.warning)

    def stage(self, name: str, action: Callable[[], str]) -> None:
        if self.failure is not None:
            self._add(name, Status.SKIPPED, "skipped: an earlier stage failed", 0.0)
            return
        started = time.monotonic()
        try:
            detail = action()
        except CompileError as exc:
            self.failure = exc
            self._add(name, Status.FAILED, str(exc), time.monotonic() - started)
            return
        self._add(name, Status.OK, detail, time.monotonic() - started)

    def _add(self, name: str, status: Status, detail: str, seconds: float) -> None:
        self.stages.append(
            StageReport(
                stage=name, status=status, detail=detail, seconds=round(seconds, 3), cache=self.outcomes.get(name)
            )
        )
        if self.on_stage:
            self.on_stage(name, status.value, detail)


def release(
    pipeline_path: str | Path,
    *,
    store: str | None = None,
    only_sku: str | None = None,
    finalize: bool = False,
    dry_run: bool = False,
    work: Path | None = None,
    on_stage: StageCallback | None = None,
    remote_cache: str | None = None,
    explain: bool = False,
) -> ReleaseReport:
    """Run the pipeline (or one job of it, or its finalize step). The report is written either way; a failed stage
    is in ``report.failure`` (CheckFailed for a gate, the stage's own error otherwise) for the caller to raise.
    ``remote_cache``: the remote cache's URI (else $COMPILE_REMOTE_CACHE, else the pipeline's ``cache:``)."""
    started = time.monotonic()
    pipeline = load_pipeline(pipeline_path)
    if store is not None:
        pipeline = pipeline.model_copy(update={"spec": pipeline.spec.model_copy(update={"store": store})})
    pipeline = _renamed(_with_frozen_inputs(pipeline))  # frozen, then renamed, as build orders them
    plan = plan_release(pipeline)
    only_sku = only_sku.lower() if only_sku is not None else None  # the catalog's names are lower case
    if only_sku is not None and only_sku not in {job.sku for job in plan.jobs}:
        raise InvalidInput(
            f"--only-sku {only_sku}: the pipeline has no such target; it has {', '.join(job.sku for job in plan.jobs)}"
        )
    if only_sku is not None and finalize:
        raise InvalidInput("--only-sku and --finalize are separate jobs: run each --only-sku job, then --finalize")
    spec = pipeline.spec
    signer = None if only_sku else _signer(pipeline)  # a bad key is refused before any work; jobs never sign
    work = Path(work) if work else Path("release") / f"{spec.release.name}-{spec.release.version}"
    mode = "dry-run" if dry_run else "finalize" if finalize else f"only-sku {only_sku}" if only_sku else "release"
    from compiler.cache.reuse import open_tier

    uri = remote_cache if remote_cache is not None else os.environ.get(REMOTE_ENV) or spec.cache
    run = _Run(on_stage, None if dry_run or finalize else open_tier(uri or "", explain))
    engines: list[EngineLine] = []
    published: dict[str, object] = {}
    jobs = [job for job in plan.jobs if only_sku in (None, job.sku)]
    if dry_run:
        run.stage("validate", lambda: _validate(pipeline, plan, uri))
    elif finalize:
        run.stage("finalize", lambda: _finalize(pipeline, plan, published, signer))
    else:
        _build_and_publish(run, pipeline, jobs, work, only_sku, engines, published, signer)
    report = ReleaseReport(
        pipeline=str(pipeline.path),
        name=spec.release.name,
        version=spec.release.version,
        store=spec.store,
        mode=mode,
        passed=run.failure is None,
        stages=run.stages,
        engines=engines,
        published=published or None,
        plan=plan,
        work=str(work),
        seconds=round(time.monotonic() - started, 3),
        warnings=run.warnings,
    )
    if not dry_run:
        _write_report(report, work, f"-{only_sku}" if only_sku else "-finalize" if finalize else "")
    report._failure = run.failure
    return report


def _renamed(pipeline: LoadedPipeline) -> LoadedPipeline:
    """The pipeline with its ``dims:`` applied: every stage reads the renamed copy of the model (in the cache, named
    by content, so every job of the release makes the same one)."""
    from compiler.core.files import default_cache_dir
    from compiler.data.dims import renamed_path

    if not pipeline.spec.dims:
        return pipeline
    try:
        model = renamed_path(pipeline.spec.model, pipeline.spec.dims, default_cache_dir(), "dims:")
    except InvalidInput as exc:
        raise InvalidInput(f"{pipeline.path}: {exc}") from None
    return pipeline.model_copy(update={"spec": pipeline.spec.model_copy(update={"model": model})})


def _signer(pipeline: LoadedPipeline):
    from compiler.releases.attest import signer_of

    signing = pipeline.spec.signing
    return signer_of(None, signing.key if signing else None, pipeline.path)


def _context(pipeline: LoadedPipeline, calibrations: dict[str, Path]):
    """What the provenance records of the pipeline run: the file and its digest, the calibration data's digest."""
    from compiler.core.record_files import parse_record, read_record_bytes
    from compiler.core.records import CALIBRATION_RECORD, CalibrationRecord
    from compiler.releases.provenance import BuildContext, portable_name, repository_of

    data = data_sha256 = None
    for folder in calibrations.values():
        path = folder / CALIBRATION_RECORD
        record = parse_record(read_record_bytes(path, "calibrate again"), path, CalibrationRecord, "calibrate again")
        data, data_sha256 = record.data, record.data_sha256
    repository = repository_of(pipeline.path)
    return BuildContext(
        pipeline=portable_name(pipeline.path, repository),
        pipeline_sha256=pipeline.sha256,
        calibration_data=portable_name(data, repository) if data and pipeline.spec.release.name_data else None,
        calibration_data_sha256=data_sha256,
    )


def _build_and_publish(
    run: _Run,
    pipeline: LoadedPipeline,
    jobs,
    work: Path,
    only_sku: str | None,
    engines: list[EngineLine],
    published: dict[str, object],
    signer=None,
) -> None:
    from compiler.stores import open_store

    spec = pipeline.spec
    store = open_store(spec.store, create=True)
    if only_sku is not None:
        earlier = store.staged(spec.release.name, spec.release.version).get(only_sku)
        if earlier is not None:

            def retried() -> str:
                """The part an earlier attempt staged, if it is this pipeline's and holds this job's engines."""
                from compiler.releases.publish import staged_part

                staged_part(
                    store,
                    spec.release.name,
                    spec.release.version,
                    only_sku,
                    earlier,
                    pipeline.sha256,
                    jobs[0].precisions,
                )
                return f"{only_sku} is already staged (a retried job): nothing to do"

            run.stage("stage", retried)
            return
    calibrations: dict[str, Path] = {}
    build_dirs: list[Path] = []
    run.stage("inspect", lambda: _inspect(pipeline, run))
    run.stage("calibrate", lambda: _calibrate(run, pipeline, jobs, work, calibrations))
    run.stage("build", lambda: _build(run, pipeline, jobs, work, calibrations, build_dirs, engines))
    run.stage("check", lambda: _check(run, pipeline, build_dirs, calibrations))

    def publish_step() -> str:
        from compiler.core.options import PublishOptions
        from compiler.releases.publish import publish, stage

        name, version, golden = spec.release.name, spec.release.version, spec.release.golden
        result = (
            stage(build_dirs, store, name, version, only_sku, pipeline_sha256=pipeline.sha256, golden=golden)
            if only_sku
            else publish(
                build_dirs,
                store,
                name,
                version,
                options=PublishOptions(golden=golden),
                signer=signer,
                context=_context(pipeline, calibrations),
            )
        )
        published.update(result.model_dump())
        return (
            f"{result.status}: {name}@{version}, {result.engines} engines in {result.store}; "
            f"{result.uploaded_blobs} blobs sent ({result.uploaded_bytes} bytes), {result.present_blobs} there"
            + (f"; signature {result.signature}" if signer is not None else "")
        )

    run.stage("stage" if only_sku else "publish", publish_step)


def _validate(pipeline: LoadedPipeline, plan: ReleasePlan, remote_cache: str | None) -> str:
    """Everything a release would read and refuse, without building or sending anything: the model and profiles,
    the data, the rules, the store's and remote cache's URIs, the exclusions."""
    from compiler.cache.remote import check_remote_uri
    from compiler.stores import open_store

    _inspect(pipeline)
    spec = pipeline.spec
    sections = [s for s in (spec.calibration, spec.check) if s is not None]
    files = [*(s.data for s in sections), *(s.labels for s in sections), spec.check.rules]
    for path in filter(None, files):
        if not path.exists():
            raise InvalidInput(f"{pipeline.path}: {path} does not exist")
    for metric in {s.metric for s in sections if s.metric}:
        from compiler.data.metric import load_metric

        load_metric(metric)  # imported in its child now, as the run would (a bad one is exit 2 before any work)
    if "://" in spec.store and not spec.store.startswith("file://"):
        open_store(spec.store)  # the URI's syntax and backend (nothing is sent)
    check_remote_uri(remote_cache)
    if _calibrated(pipeline, plan.jobs) and spec.calibration.exclude:
        from calibration.api import check_exclude

        check_exclude(spec.model, spec.calibration.exclude)  # the model's node names: no calibration needed
    jobs = "; ".join(
        f"{job.sku} ({job.backend}): {', '.join(job.precisions)} on {', '.join(job.runs_on)}" for job in plan.jobs
    )
    return f"would release {plan.name}@{plan.version} to {spec.store}: {jobs}"


def _with_frozen_inputs(pipeline: LoadedPipeline) -> LoadedPipeline:
    """The pipeline with its ``const:`` inputs frozen: every stage then takes the frozen model (docs/pipeline.md)."""
    spec = pipeline.spec
    if not spec.const:
        return pipeline
    from compiler.data.freeze import frozen_model, parse_consts

    texts = [f"{name}={value!r}" for name, value in spec.const.items()]
    model = frozen_model(spec.model, parse_consts(texts))
    return pipeline.model_copy(update={"spec": spec.model_copy(update={"model": model})})


def _inspect(pipeline: LoadedPipeline, run: _Run | None = None) -> str:
    from compiler.inspect.memo import inspect_model

    spec = pipeline.spec
    report = inspect_model(spec.model, spec.profiles, tier=run.tier if run else None)
    if run is not None:
        run.outcomes["inspect"] = report.cache
        run.note(report.cache)
    if report.problem is not None:
        raise report.problem
    view = report.tensorrt
    partitions = f", {len(view.partitions)} TensorRT partition(s)" if view.status.status == "ok" else ""
    source = report.cache.source if report.cache else None
    how = {"hit": ", from the local cache", "remote": ", from the remote cache"}.get(
        source or "", ", parsed by TensorRT"
    )
    return (
        f"{report.model.node_count} nodes, {len(report.profiles.names) if report.profiles else 0} "
        f"profile(s) valid{partitions}{how if partitions else ''}"
    )


def _calibrated(pipeline: LoadedPipeline, jobs) -> list[str]:
    """The precisions the release calibrates (or converts with exclusions) for ``jobs``; exit 2 when they need a
    calibration section the pipeline lacks."""
    targets = {p for job in jobs for p in job.precisions}
    wanted = sorted(p for p in targets if Precision(p).calibrated)
    c = pipeline.spec.calibration
    if wanted and c is None:
        raise InvalidInput(f"{pipeline.path}: {', '.join(wanted)} targets need a calibration section (data)")
    if c is not None and Precision.FP16 in targets and (c.fallback or c.exclude):
        wanted.append(Precision.FP16.value)  # converted here, so its exclusions and fallback apply to the build
    return wanted


def _calibrate(run: _Run, pipeline: LoadedPipeline, jobs, work: Path, calibrations: dict[str, Path]) -> str:
    from calibration import calibrate
    from compiler.core.options import CalibrationOptions

    spec = pipeline.spec
    wanted, c = _calibrated(pipeline, jobs), spec.calibration
    if not wanted:
        return "skipped: no int8 or fp8 target"
    done = []
    for precision in wanted:  # each once; every build takes the folder of its precision
        folder = work / "calibration" / precision
        result = calibrate(
            spec.model,
            c.data,
            folder,
            CalibrationOptions(**c.model_dump(exclude={"data", "precision"}), precision=precision),
            staged=True,
            tier=run.tier,
        )
        run.outcomes["calibrate"] = result.cache
        run.note(result.cache)
        failed = [g for g in result.gates if not g.passed]
        if failed:
            raise CheckFailed(
                f"{precision} calibration gate {failed[0].name} on '{failed[0].output}': "
                f"{failed[0].value:.4g} vs {failed[0].threshold:.4g} (report: {folder / 'report.json'})"
            )
        calibrations[precision] = folder
        kept = f", {len(result.excluded)} node(s) kept in higher precision" if result.excluded else ""
        how = (
            "from the remote cache"
            if result.cache and result.cache.source == "remote"
            else "reused"
            if result.reused
            else "calibrated"
        )
        via = f" via {c.quantizer}" if c.quantizer != "onnxruntime" else ""
        done.append(f"{precision}{f' {c.method}{via}' if precision != 'fp16' else ''}{kept}, {how}")
    return "; ".join(done)


def _build(
    run: _Run,
    pipeline: LoadedPipeline,
    jobs,
    work: Path,
    calibrations: dict[str, Path],
    build_dirs: list[Path],
    engines: list[EngineLine],
) -> str:
    from compiler.core.options import BuildOptions
    from compiler.engines import build_engines

    spec = pipeline.spec
    for job in jobs:
        out = work / "builds" / job.sku
        folders = tuple(calibrations[p] for p in job.precisions if p in calibrations)
        report = build_engines(
            spec.model,
            spec.profiles,
            [job.sku],
            job.precisions,
            out,
            BuildOptions(
                calibration=folders,
                backend=spec.target(job.sku).backend,
                skus=spec.skus,
                remote_cache=run.tier.uri or "",
                explain=run.tier.explain_misses,
            ),
        )
        build_dirs.append(out)
        engines += [
            EngineLine(
                sku=t.sku, precision=t.precision, status=t.status, cache_hit=t.cache_hit, folder=t.path, cache=t.cache
            )
            for t in report.targets
        ]
        run.warnings += [w for t in report.targets for w in t.warnings if w.startswith("remote cache ")]
        run.outcomes["build"] = combined([(f"{e.sku}/{e.precision}", e.cache) for e in engines])
        if report.failed:
            first = report.failed[0]
            raise (InvalidInput if first.refused else CheckFailed)(
                f"{first.sku}/{first.precision} failed to build: "
                f"{first.errors[0] if first.errors else first.status} (log: {first.path}/build.log)"
            )
    hits = sum(e.cache_hit for e in engines)
    remote = sum(bool(e.cache and e.cache.source == "remote") for e in engines)
    return f"{len(engines)} engines ({hits} from the cache" + (f", {remote} of them remote)" if remote else ")")


def _check(run: _Run, pipeline: LoadedPipeline, build_dirs: list[Path], calibrations: dict[str, Path]) -> str:
    from compiler.check import check

    spec = pipeline.spec
    options = spec.check.model_copy(
        update={
            "model": spec.model,
            "profiles": spec.profiles,
            "calibration": (*spec.check.calibration, *calibrations.values()),
        }
    )
    counts: dict[str, int] = {}
    reused = 0
    outcomes = []
    for folder in build_dirs:
        report = check(folder, options, tier=run.tier)
        reused += report.reused
        outcomes.append((folder.name, report.cache))
        run.note(report.cache)
        run.outcomes["check"] = combined(outcomes)
        for status, count in report.counts.items():
            counts[status] = counts.get(status, 0) + count
        if not report.passed:
            where, failed = report.failures[0]
            raise CheckFailed(f"check failed: {where} {failed.name}: {failed.summary} (report: {folder}/check.md)")
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) + (
        f" ({reused} of {len(build_dirs)} folders' check.json reused)" if reused else ""
    )


def _finalize(pipeline: LoadedPipeline, plan: ReleasePlan, published: dict[str, object], signer=None) -> str:
    from compiler.releases.publish import finalize

    result = finalize(
        pipeline.spec.store,
        plan.name,
        plan.version,
        {job.sku: job.precisions for job in plan.jobs},
        pipeline.sha256,
        signer=signer,
        context=_context(pipeline, {}),
    )
    published.update(result.model_dump())
    return f"{result.status}: {plan.name}@{plan.version}, {result.engines} engines from {len(plan.jobs)} jobs"


def _write_report(report: ReleaseReport, work: Path, suffix: str) -> None:
    """release-report.json, .md (also the CI job summary, with the headline of the builds this run made) and .html."""
    from compiler.pipeline.report import markdown

    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / f"release-report{suffix}.json", report.model_dump_json(indent=2).encode())
    text = markdown(report) + _write_page(report, work, suffix)
    write_atomic(work / f"release-report{suffix}.md", text.encode())
    append_step_summary(text)


def _write_page(report: ReleaseReport, work: Path, suffix: str) -> str:
    """release-report.html beside the Markdown report, of the builds this run made (a finalize run has none), and
    its headline in Markdown ("" without builds)."""
    from compiler.pipeline.report import stage_rows
    from compiler.report import headline, write_page
    from compiler.report.diff import diff
    from compiler.report.view import from_work_folder

    view = from_work_folder(work, f"{report.name}@{report.version}", stage_rows(report))
    if view is None:
        return ""
    previous = _previous(report)
    page = write_page(view, work / f"release-report{suffix}.html", previous)
    return "\n" + headline.markdown(view, diff(previous, view) if previous else None, page.name)


def _previous(report: ReleaseReport):
    """The view of the version published before this one in the store, to show what changed; None when there is
    none or the store cannot say (the page is written without the comparison: a report never fails a release)."""
    from compiler.releases.listing import latest
    from compiler.report.view import from_release
    from compiler.stores import open_store

    try:
        store = open_store(report.store)
        version = latest(store, report.name, before=report.version)
        return from_release(store, f"{report.name}@{version}") if version else None
    except CompileError:
        return None
