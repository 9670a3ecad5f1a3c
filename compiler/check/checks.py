"""Running every check of a build folder and writing check.json: the one function :func:`check`."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compiler.check.report import earlier_report
from compiler.core.errors import InvalidInput
from compiler.core.options import CheckOptions, parse_sample_axes
from compiler.core.progress import counter
from compiler.core.records import CacheOutcome, CheckReport, CheckResult, EngineCheck, Precision, Progress, Status
from compiler.core.reuse import Refused, RemoteTier, Reuse, temporary_folder, with_warning
from compiler.data.model import OnnxModel, load_model
from compiler.engines.folder import REBUILD, BuildFolder, Target, built_model, read_build, source_model

if TYPE_CHECKING:
    from compiler.check.fusions import Rule
    from compiler.core.profiles import ShapeProfile, SkuCatalog
    from compiler.core.records import EngineRecord, GoldenRecord
    from compiler.data.datasets import Dataset
    from compiler.data.metric import Metric
    from compiler.data.ranges import Reference


def check(
    build_dir: str | Path,
    options: CheckOptions | None = None,
    progress: Progress | None = None,
    tier: RemoteTier | None = None,
) -> CheckReport:
    """Every check of the build folder, written to ``BUILD_DIR/check.json`` and ``check.md``; the report says what
    passed, failed or was skipped and why. Raises InvalidInput for a folder that is not a build, bad rules or data
    (before any work), EnvironmentProblem for a missing backend. ``tier`` (the remote cache): a verdict of the same
    inputs is taken from there, and one made here is sent there."""
    from compiler.check.report import write_report
    from compiler.core.records import CHECK_RECORD, GOLDEN_FILE

    options = options or CheckOptions()
    with _validated(Path(build_dir), options, progress, time.perf_counter()) as run:
        reuse = Reuse(tier, "checks", _inputs_sha256(run.build, run.source, run.dataset, options, run.models))
        built_models = [str(path) if path else None for path, _ in run.models.values()]
        reused, cache = _reused(run.build.root, reuse, options)
        if reused is not None:
            reused._built_models = built_models
            return reused
        with tempfile.TemporaryDirectory(prefix="compile-check-") as work:
            report = _run(run, Path(work))
    report = report.model_copy(update={"inputs_sha256": reuse.key})
    write_report(report, run.build.root)
    sent = reuse.send(run.build.root, [CHECK_RECORD] + ([GOLDEN_FILE] if report.golden else []))
    report = report.model_copy(update={"cache": with_warning(cache, sent)})
    report._built_models = built_models
    return report


@contextmanager
def _validated(
    build_dir: Path, options: CheckOptions, progress: Progress | None, started: float
) -> Iterator[_CheckRun]:
    """Every input read and validated before any expensive work (InvalidInput names the first at fault): the
    build folder, where the reports go, the calibration folders, the rules, the SKUs, the source model, the
    profiles, the samples, the metric and labels, and each engine's built model. The samples stay open until the
    run is done."""
    from compiler.check.fusions import load_rules

    build = _checkable(read_build(build_dir))
    _check_paths(build, options)
    rules = load_rules(options.rules)  # bad rules fail before any work
    catalog = _catalog(build, options.skus)
    source = source_model(build, options.model, options.dim, options.cache_dir)
    profiles = _profiles(build, options.profiles)
    dataset = None
    if options.data is not None:
        from compiler.data.datasets import open_dataset

        dataset = open_dataset(options.data, source, sample_axes=parse_sample_axes(options.sample_axis))
    try:
        if dataset is not None:
            from compiler.check.data_shapes import check_data_shapes

            check_data_shapes(dataset, source, [t.engine for t in build.targets if t.engine is not None])
        scoring = _metric(options, dataset)
        models = {
            t.label: built_model(t, source, options.cache_dir, options.calibration)
            for t in build.targets
            if t.engine is not None
        }
        yield _CheckRun(build, options, source, profiles, rules, catalog, dataset, models, scoring, progress, started)
    finally:
        if dataset is not None:
            dataset.close()


def _check_paths(build: BuildFolder, options: CheckOptions) -> None:
    """Refuse a build folder the reports cannot be written to, reports that would overwrite an input, and a
    ``--calibration`` that is not a folder."""
    from compiler.check.report import MARKDOWN
    from compiler.core.files import check_writable_folder
    from compiler.core.paths import check_not_overwriting
    from compiler.core.records import CHECK_RECORD, GOLDEN_FILE

    check_writable_folder(build.root, "BUILD_DIR")
    inputs = [
        p for p in (options.data, options.model, options.rules, options.skus, options.profiles, options.labels) if p
    ] + [folder / name for folder in options.calibration for name in ("model.onnx", "calibration.json")]
    check_not_overwriting(
        [build.root / CHECK_RECORD, build.root / MARKDOWN, build.root / GOLDEN_FILE], inputs, "BUILD_DIR"
    )
    for folder in options.calibration:
        if not Path(folder).is_dir():
            raise InvalidInput(f"--calibration {folder}: not a folder; pass the --out folder of compile calibrate")


def _catalog(build: BuildFolder, skus: Path | None) -> SkuCatalog:
    """The SKU catalog, refused (before any work) when it does not know an engine's SKU."""
    from compiler.core.profiles import load_sku_catalog

    catalog = load_sku_catalog(extra=skus)  # the bundled SKUs, and the file's (replacing one of a name)
    for target in build.targets:
        if target.engine is not None:
            catalog.get(target.engine.sku)  # an unknown SKU is a usage error
    return catalog


def _profiles(build: BuildFolder, path: Path | None) -> list[ShapeProfile]:
    """The shape profiles the engines were built with; ``--profiles``' (or none) when no engine was built."""
    from compiler.core.profiles import load_profiles

    engines = [t.engine for t in build.targets if t.engine is not None]
    if engines:
        return list(engines[0].profiles)
    return list(load_profiles(path).profiles) if path else []


def _reused(root: Path, reuse: Reuse, options: CheckOptions) -> tuple[CheckReport | None, CacheOutcome]:
    """A verdict of the same inputs: the folder's own check.json, else the remote cache's (written into the
    folder); None and why there was none otherwise."""
    from compiler.core.records import CHECK_RECORD

    if not options.reuse:
        return None, CacheOutcome(source="miss", reason="--no-reuse")
    found, outcome = reuse.take(
        lambda: earlier_report(root / CHECK_RECORD, reuse.key),
        lambda folder, _: _fetched(folder, reuse.key, root),
        staging=lambda: temporary_folder(".compile-check-", root),
        missing="no check.json of these inputs",
    )
    return (found.model_copy(update={"cache": outcome}) if found is not None else None), outcome


def _fetched(folder: Path, key: str, root: Path) -> CheckReport:
    """The remote cache's check.json of ``key`` (and the golden inputs it wrote) put in ``root``, refused unless it
    says it was made from these inputs and its golden.npz is the one it records."""
    import os

    from compiler.check.report import write_report
    from compiler.core.records import CHECK_RECORD, GOLDEN_FILE

    found = earlier_report(folder / CHECK_RECORD, key)
    if found is None:
        raise Refused("its check.json is of other inputs")
    if found.golden is not None:
        os.replace(folder / GOLDEN_FILE, root / GOLDEN_FILE)
    found = found.model_copy(update={"build_dir": str(root)})
    write_report(found.model_copy(update={"reused": False}), root)
    return found


def _metric(options: CheckOptions, dataset):
    """``--metric`` loaded and ``--labels`` read before any work; (None, None) without them."""
    from compiler.data.metric import metric_and_labels

    if options.metric is not None and dataset is None:
        raise InvalidInput(f"--metric {options.metric}: needs --data (the samples it scores)")
    return metric_and_labels(options.metric, options.min_metric, options.labels, dataset)


def _checkable(build: BuildFolder) -> BuildFolder:
    """The folder, refused unless every target that built still has its plan, layers.json and build.log: the
    fusion and memory checks read them."""
    for target in build.targets:
        lacking = (
            ["engine.plan"]
            if target.missing
            else [
                name
                for name, value in (("layers.json", target.layers), ("build.log", target.log))
                if target.engine is not None and value is None
            ]
        )
        if lacking:
            raise InvalidInput(f"{target.folder / lacking[0]}: missing or not a regular file; {REBUILD}")
    return build


def _inputs_sha256(
    build: BuildFolder, source: OnnxModel, dataset, options: CheckOptions, models: dict[str, tuple[Path | None, str]]
) -> str:
    """Everything a verdict depends on: the engines (each plan's digest binds its model, calibration and build
    log), whether each engine's built model was found (accuracy is skipped without it), the source model, the
    samples, the rules and catalog files by content, the options and the versions of the tools that judge. Paths
    are left out: the same inputs elsewhere give the same verdict."""
    from compiler.backends import installed_versions
    from compiler.check.golden_capture import SAMPLES as GOLDEN_SAMPLES
    from compiler.check.report import versions
    from compiler.core.files import file_sha256, hash_json
    from compiler.core.profiles import bundled_catalog_path
    from compiler.core.records import CHECK_FORMAT

    files = {
        "rules": options.rules,
        "skus": options.skus or bundled_catalog_path(),
        "profiles": options.profiles,
        "labels": options.labels,
    }
    return hash_json(
        {
            "format": CHECK_FORMAT,
            "model": source.sha256,
            "data": dataset.sha256 if dataset is not None else None,
            "golden": GOLDEN_SAMPLES if dataset is not None else None,  # a check.json from before golden inputs: rerun
            "engines": [
                [
                    t.status.sku,
                    t.status.precision,
                    t.status.status,
                    t.engine.sha256 if t.engine else None,
                    t.label in models and models[t.label][0] is not None,
                ]
                for t in build.targets
            ],
            "files": {name: file_sha256(Path(path)) if path else None for name, path in files.items()},
            "calibrations": sorted(
                file_sha256(Path(c) / "calibration.json")
                for c in options.calibration
                if (Path(c) / "calibration.json").is_file()
            ),  # where a failure's advice comes from
            "options": options.keyed_values(),
            "versions": {**versions(), **installed_versions()},
        }
    )


@dataclass(frozen=True)
class _CheckRun:
    """What one check run reads, each part validated before any expensive work: the build folder, the options,
    the source model and its profiles, the fusion rules, the SKU catalog, the samples (None without --data), each
    target's built model (its path, None when not at hand, and where it was looked for), the metric and labels,
    and when the run started."""

    build: BuildFolder
    options: CheckOptions
    source: OnnxModel
    profiles: list[ShapeProfile]
    rules: list[Rule]
    catalog: SkuCatalog
    dataset: Dataset | None
    models: dict[str, tuple[Path | None, str]]
    scoring: tuple[Metric | None, dict[str, np.ndarray] | None]
    progress: Progress | None
    started: float


def _run(run: _CheckRun, work: Path) -> CheckReport:
    """Every check, in this order: the lint starts first (Polygraphy's runs in a child beside the rest), then the
    partitions, one FP32 pass over the samples and each target's checks; the lint's result goes first."""
    from compiler.backends import default_backend
    from compiler.check.lint import finish_lint, start_lint
    from compiler.check.partitions import check_partitions

    options, profiles = run.options, run.profiles
    first_shapes = {name: list(r.min) for name, r in profiles[0].shapes.items()} if profiles else {}
    lint = start_lint(run.source, first_shapes, work) if options.lint else None
    built = [t for t in run.build.targets if t.engine is not None]
    backend = built[0].engine.backend["name"] if built else default_backend()
    model_checks = [
        check_partitions(
            run.source, backend, profiles, options.max_partitions, options.max_unsupported, options.max_boundary_mb
        )
    ]
    graph_of = _graph_loader(run)
    run, samples = _fp32_pass(run, graph_of)
    measured: dict[str, CheckResult] = {}  # accuracy by built model: the engines of one model share it
    engine_checks = [
        _engine_check(run, target, graph_of, samples, measured) if target.engine is not None else _unbuilt(target)
        for target in run.build.targets
    ]
    if lint is not None:
        model_checks.insert(0, finish_lint(lint))
    report = _report(run.build, run.source, model_checks, engine_checks, run.options, run.started)
    return report.model_copy(update={"golden": samples.golden if samples is not None else None})


@dataclass(frozen=True)
class _Samples:
    """The FP32 model's one pass over the samples checked, which accuracy and FP16 range share, and the golden
    inputs written from it."""

    reference: Reference
    indices: np.ndarray
    golden: GoldenRecord | None


def _fp32_pass(run: _CheckRun, graph_of: Callable[[Target], OnnxModel]) -> tuple[_CheckRun, _Samples | None]:
    """The FP32 model's outputs on the samples checked (and its intermediate ranges when an engine is FP16), and
    golden.npz written from them; None without --data. A model with a fixed batch size runs whole batches of it:
    the run comes back with that ``batch_size``."""
    from compiler.check.golden_capture import capture as capture_golden
    from compiler.data.ranges import reference_pass

    if run.dataset is None:
        return run, None
    count, batch = _sample_count(run.source, run.dataset, run.options.samples)
    if batch is not None:
        run = replace(run, options=run.options.model_copy(update={"batch_size": batch}))
    held_out = _calibrations_held_out(run, batch)
    indices = np.arange(count) if held_out is None else held_out[:count]
    run.dataset.check_values()
    wants_ranges = any(t.engine is not None and t.engine.precision == Precision.FP16 for t in run.build.targets)
    reference = reference_pass(
        run.source,
        run.dataset,
        indices,
        run.options.batch_size,
        wants_ranges,
        run.options.chunk_mb,
        counter("fp32", len(indices), run.progress),
        fp32_constants=_kept_constants(run, graph_of) if wants_ranges else frozenset(),
    )
    golden = capture_golden(run.build.root, run.dataset, indices, reference.outputs, batch)
    return run, _Samples(reference, indices, golden)


def _kept_constants(run: _CheckRun, graph_of: Callable[[Target], OnnxModel]) -> frozenset[str]:
    """The float32 constants every FP16 engine's model keeps (its readers excluded at calibration): not clamped."""
    from compiler.data.ranges import fp32_constants

    kept = [
        fp32_constants(graph_of(target).proto)
        for target in run.build.targets
        if target.engine is not None and target.engine.precision == Precision.FP16 and run.models[target.label][0]
    ]
    return frozenset.intersection(*kept) if kept else frozenset()


def _calibrations_held_out(run: _CheckRun, batch: int | None) -> np.ndarray | None:
    """The samples the build's calibrations held out, when they calibrated on this very data (same digest) and
    agree on them: check then judges what calibrate judged, not samples the ranges were fitted on, so the same model
    cannot pass one stage and fail the other on sampling alone. None otherwise (check takes the first samples)."""
    from compiler.core.errors import CompileError
    from compiler.core.record_files import read_record
    from compiler.core.records import CalibrationRecord
    from compiler.data.sampling import split

    found = set()
    for path, _ in run.models.values():
        try:
            record = read_record(path.parent / "calibration.json", CalibrationRecord, "") if path else None
            if record is None or record.data_sha256 != run.dataset.sha256:
                continue
            options = record.options
            chosen = split(run.dataset.count, options["holdout"], options.get("samples"), record.seed, batch)
        except (CompileError, OSError, KeyError, TypeError):
            continue  # not a calibration folder of ours, or one of another data file: nothing to align with
        found.add(tuple(int(i) for i in chosen.holdout))
    return np.asarray(found.pop(), dtype=np.int64) if len(found) == 1 else None


def _sample_count(source: OnnxModel, dataset: Dataset, samples: int) -> tuple[int, int | None]:
    """How many samples are checked (``--samples``, at most the data's) and the model's fixed batch size, if it
    has one: then whole batches of it, and data holding less than one batch is refused."""
    from compiler.data.model_inputs import model_inputs

    fixed = {i.batch for i in model_inputs(source, dict(dataset.axes)) if i.batch is not None}
    count = min(samples, dataset.count)
    if not fixed:
        return count, None
    batch = max(fixed)
    count = max(batch, count // batch * batch) if dataset.count >= batch else 0
    if count == 0:
        raise InvalidInput(
            f"{dataset.path}: {dataset.count} sample(s); the model's fixed batch size {batch} needs at least {batch}"
        )
    return count, batch


def _graph_loader(run: _CheckRun) -> Callable[[Target], OnnxModel]:
    """The graph each target's engine was built from (the source model's when its built model is not at hand),
    each file loaded once."""
    loaded: dict[Path, OnnxModel] = {}

    def graph_of(target: Target) -> OnnxModel:
        path = run.models[target.label][0] or run.source.path
        if path not in loaded:
            loaded[path] = run.source if path == run.source.path else load_model(path, check=False, digest=False)
        return loaded[path]

    return graph_of


def _engine_check(
    run: _CheckRun,
    target: Target,
    graph_of: Callable[[Target], OnnxModel],
    samples: _Samples | None,
    measured: dict[str, CheckResult],
) -> EngineCheck:
    """A built engine's checks: its fusions, its memory on its SKU, accuracy against FP32, FP16 range (an FP16
    engine) and the engine's own accuracy."""
    from compiler.check.accuracy import engine_accuracy, output_limits
    from compiler.check.fusions import Graph, check_fusions
    from compiler.check.gain import check_gain
    from compiler.check.memory import check_memory
    from compiler.data.ranges import check_ranges, fp16_tensors

    engine = target.engine
    path, where = run.models[target.label]
    checks = [
        check_fusions(
            run.rules,
            engine.precision,
            target.layers.layers,
            Graph(graph_of(target).proto),
            where if path else f"the source model's graph ({where})",
        ),
        check_memory(target.log, engine.sku, run.catalog.get(engine.sku), run.options.headroom),
        check_gain(
            engine.precision,
            engine.backend.get("name", ""),
            target.layers.layers,
            Graph(graph_of(target).proto),
            run.options.min_low_precision,
        ),
        _accuracy(run, engine, path, where, samples, measured),
    ]
    if engine.precision == Precision.FP16:
        checks.append(
            _skipped("fp16-range", "no --data given: the FP32 model's intermediate ranges need samples")
            if samples is None
            else check_ranges(
                samples.reference,
                len(samples.indices),
                fp16_tensors(graph_of(target) if path else None),
                lambda output: output_limits(run.options, Precision.FP16, output),
            )
        )
    checks.append(engine_accuracy(engine))
    return EngineCheck(
        sku=engine.sku,
        precision=engine.precision,
        path=str(target.folder),
        engine_sha256=engine.sha256,
        status=_worst(checks),
        checks=checks,
    )


def _accuracy(
    run: _CheckRun,
    engine: EngineRecord,
    path: Path | None,
    where: str,
    samples: _Samples | None,
    measured: dict[str, CheckResult],
) -> CheckResult:
    """The engine's built model against FP32 on the samples, measured once per built model (``measured``);
    skipped without samples or for an FP32 engine, and a failure when the built model is not at hand."""
    from compiler.check.accuracy import check_accuracy

    if samples is None:
        return _skipped("accuracy", "no --data given: pass samples (npz or an image folder) to compare with FP32")
    if engine.precision == Precision.FP32:
        return _skipped(
            "accuracy",
            "the fp32 engine was built from the FP32 model itself: nothing to "
            "compare in onnxruntime (engine-accuracy needs a GPU)",
        )
    if path is None:
        return _unmeasured(engine.precision, where, run.options)
    key = engine.built_model_sha256
    if key not in measured:
        measured[key] = check_accuracy(
            samples.reference.outputs,
            path,
            engine.precision,
            run.dataset,
            samples.indices,
            run.options,
            counter(f"{engine.precision}", len(samples.indices), run.progress),
            *run.scoring,
        )
    return measured[key]


def _unmeasured(precision: Precision, where: str, options: CheckOptions) -> CheckResult:
    """Accuracy that cannot be measured for want of the model the engine was built from: a failure (a release
    must not pass as checked when it was not), unless ``--allow-skip accuracy``."""
    why = f"the {precision} model the engine was built from is not at hand: {where}"
    if "accuracy" in options.allow_skip:
        return _skipped("accuracy", f"{why} (--allow-skip accuracy)")
    hint = (
        "pass its calibration folder with --calibration DIR, " if precision != Precision.FP16 else ""
    ) + "rebuild with compile build (the build cache keeps the model), or pass --allow-skip accuracy"
    return CheckResult(
        name="accuracy", status=Status.FAILED, figures={"looked": where}, summary=f"not measured: {why}; {hint}"
    )


def _skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name=name, status=Status.SKIPPED, summary=f"skipped: {why}")


def _unbuilt(target: Target) -> EngineCheck:
    """A target without an engine: its build failed, and nothing of it can be released."""
    errors = target.status.errors
    result = CheckResult(
        name="build",
        status=Status.FAILED,
        evidence=errors,
        summary=f"no engine: the build {target.status.status}" + (f": {errors[0]}" if errors else ""),
    )
    return EngineCheck(
        sku=target.status.sku,
        precision=target.status.precision,
        path=str(target.folder),
        engine_sha256=None,
        status=Status.FAILED,
        checks=[result],
    )


def _worst(checks: list[CheckResult]) -> Status:
    return Status.FAILED if any(c.status == Status.FAILED for c in checks) else Status.OK


def _report(
    build: BuildFolder,
    source: OnnxModel,
    model_checks: list[CheckResult],
    engines: list[EngineCheck],
    options: CheckOptions,
    started: float,
) -> CheckReport:
    from compiler.check.report import versions

    every = [*model_checks, *(c for e in engines for c in e.checks)]
    counts = {status: 0 for status in ("ok", "failed", "skipped")} | dict(Counter(c.status.value for c in every))
    report = CheckReport(
        build_dir=str(build.root),
        model=str(source.path),
        model_sha256=source.sha256,
        passed=True,
        status=Status.OK,
        summary="",
        counts=counts,
        model_checks=model_checks,
        engines=engines,
        options=options.model_dump(mode="json"),
        versions=versions(),
        seconds=round(time.perf_counter() - started, 3),
    )
    failed = report.failures
    if failed:
        where, first = failed[0]
        summary = f"{len(failed)} check(s) failed; first: {where} {first.name}: {first.summary}"
    else:
        skipped = f", {counts['skipped']} skipped" if counts["skipped"] else ""
        summary = f"all {counts['ok']} check(s) passed{skipped}"
    return report.model_copy(
        update={"passed": not failed, "status": Status.FAILED if failed else Status.OK, "summary": summary}
    )


__all__ = ["CheckOptions", "CheckReport", "check"]
