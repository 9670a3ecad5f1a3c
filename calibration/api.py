"""``calibrate``: dataset → ranges → Q/DQ (or FP16) model → TensorRT cache → held-out accuracy report.

Output folder::

    model.onnx          the Q/DQ (int8/fp8) or FP16 model, the original's metadata_props kept
    model.onnx.data     its weights, when beyond protobuf's 2 GiB limit
    calibration.json    precision, method, model/data sha256, sample counts, per-tensor ranges, options
    calibration.cache   TensorRT <= 10 calibration cache (int8/fp8 runs)
    report.json         held-out comparison against FP32 per output

``calibration.json`` is written last and holds the run's content key (model, data, options, tool
versions): a second run with the same key and intact files reuses the folder instead of recomputing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import onnx

from calibration import calibrators
from calibration.accuracy import compare, gates
from calibration.calibrators import HistogramOptions
from calibration.convert import convert_fp16
from calibration.folder import RERUN, read_calibration
from compiler.core.errors import CheckFailed, InvalidInput, stop_signals_held
from compiler.core.files import file_sha256, hash_json, replace_dir, staging_folder, writable_folder, write_atomic
from compiler.core.options import CalibrationOptions
from compiler.core.paths import check_not_overwriting
from compiler.core.progress import counter
from compiler.core.records import (
    CALIBRATION_FILES,
    CALIBRATION_FORMAT,
    CALIBRATION_RECORD,
    AccuracyReport,
    CacheOutcome,
    CalibrationResult,
    Progress,
    TensorRange,
    read_record,
)
from compiler.data.datasets import ImagePreprocess, model_inputs, open_dataset, split
from compiler.data.metric import metric_and_labels
from compiler.data.model import load_model
from compiler.data.session import session


def calibrate(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: CalibrationOptions | None = None,
    *,
    preprocess: ImagePreprocess | None = None,
    staged: bool = False,
    progress: Progress | None = None,
    shared: Any = None,
    found: dict[str, dict] | None = None,
    reuse: Any = None,
) -> CalibrationResult:
    """Calibrate (int8/fp8) or convert (fp16) ``model`` with ``data``; write the results into ``out``.

    ``options.holdout`` is the fraction (< 1) or count of samples kept out of calibration to measure accuracy;
    ``samples`` caps the calibration set; ``chunk_mb`` bounds the activations held at once. Gates
    (``min_cosine`` on each output's mean cosine, ``min_top1``, ``max_abs_error``) are evaluated into
    ``result.gates`` / ``result.passed``; the outputs are written either way.

    ``staged`` is for folders that concurrent runs share (the build cache): the results are written
    into a new sibling folder that is renamed to ``out`` only when complete, so a reader of ``out``
    never sees another run's half-written ``model.onnx``; by default ``out`` is written in place,
    ``calibration.json`` last.

    ``shared``: the caches beyond ``out`` (a :class:`compiler.cache.tier.CacheTier`): a result ``out`` lacks is
    taken from the remote cache when it has it, and one made here is sent there.

    ``found`` and ``reuse`` are ``--fallback auto``'s: why it excluded each node, and the prepared model and
    ranges of its first calibration (:class:`calibration.fallback.Reuse`).
    """
    options = options or CalibrationOptions()
    modelopt = options.quantizer == "modelopt" and options.precision != "fp16"  # fp16 converts, quantizes nothing
    if modelopt:
        from calibration.modelopt import refuse_unsupported

        refuse_unsupported(options)
    if options.fallback == "auto":
        from calibration.fallback import calibrate_with_fallback

        return calibrate_with_fallback(
            calibrate, model, data, out, options, preprocess=preprocess, staged=staged, progress=progress
        )
    precision, method = options.precision, None if options.precision == "fp16" else options.method
    batch_size = options.batch_size
    started = time.perf_counter()
    out = Path(out)
    source = load_model(model)
    dataset = open_dataset(data, source, preprocess)
    try:
        check_not_overwriting(
            [out / name for name in (*CALIBRATION_FILES, CALIBRATION_RECORD)],
            [
                source.path,
                *source.external_files,
                *dataset.inputs(),
                *([Path(options.labels)] if options.labels else []),
            ],
            "--out",
            replaced=[out] if staged else [],
        )
        fixed = {i.batch for i in model_inputs(source) if i.batch is not None}
        if len(fixed) > 1:
            raise InvalidInput(f"{source.path}: inputs have different fixed batch sizes {sorted(fixed)}")
        fixed_batch = fixed.pop() if fixed else None
        if fixed_batch is not None:
            batch_size = fixed_batch
        chosen = split(dataset.count, options.holdout, options.samples, options.seed, fixed_batch, dataset.path)
        recorded = {"holdout": options.holdout, "requested_samples": options.samples, "chunk_mb": options.chunk_mb}
        if method in ("entropy", "percentile"):
            recorded |= {"num_bins": options.num_bins, "num_quantized_bins": HistogramOptions.num_quantized_bins}
        if method == "percentile":
            recorded["percentile"] = options.percentile
        keep_nodes, keep_ops = _resolve_exclude(source.proto, options.exclude, source.path)
        if options.exclude:
            recorded["exclude"] = sorted(set(options.exclude))
        versions = _versions()
        if modelopt:  # another quantizer, another result (its versions checked now: a broken one is exit 3 here)
            from compiler.core.modelopt import versions as modelopt_versions

            recorded["quantizer"] = "modelopt"
            versions |= modelopt_versions()
        metric, labels = metric_and_labels(options.metric, options.min_metric, options.labels, dataset)
        if metric is not None:  # the score is part of the report: another metric or labels is another result
            recorded["metric"] = options.metric
            recorded["labels_sha256"] = file_sha256(options.labels) if options.labels else None
        record = {
            "format_version": CALIBRATION_FORMAT,
            "precision": precision,
            "method": method,
            "model_sha256": source.sha256,
            "data_sha256": dataset.sha256,
            "samples": len(chosen.calibration),
            "batch_size": batch_size,
            "seed": options.seed,
            "options": recorded,
            "versions": versions,
        }
        key = hash_json(record)
        if options.reuse and (previous := _reusable(out, key)) is not None:  # same data bytes: already checked
            return _with_gates(previous, options.gates, reused=True).model_copy(
                update={"cache": CacheOutcome(source="hit")}
            )
        miss = CacheOutcome(source="miss", reason="not in the folder" if options.reuse else "--no-reuse")
        if shared is not None and options.reuse:
            if shared.remote is not None:
                found, miss = _from_shared(shared, key, out, staged)
                if found is not None:
                    return _with_gates(found, options.gates, reused=True).model_copy(update={"cache": miss})
            miss = miss.model_copy(update={"reason": shared.explain_calibration(record, [out], miss.reason)})

        def produce(folder: Path) -> CalibrationResult:
            """Calibrate into ``folder`` (``out``, or the staging folder that becomes it), ``calibration.json`` last.

            The model is written in a hidden folder inside ``folder`` and moved into place only once the held-out
            report is done, so a run stopped midway leaves no model of its own there, whole or cut short."""
            reference = session(source.path, "model")  # fail fast on a model onnxruntime cannot run
            value_ranges: dict[str, tuple[float, float]] = {}
            header = cache = quantized_ops = prepared = build_proof = reformats = None
            excluded: list[str] = []
            with ExitStack() as cleanup:
                work = _temporary_folder(cleanup, None, "calibrate-")
                pending = _temporary_folder(cleanup, folder, ".calibrate-")
                model_out = pending / "model.onnx"
                if precision == "fp16":
                    excluded = _matching(source.proto, keep_nodes, keep_ops)
                    convert_fp16(source.path, model_out, keep_nodes, keep_ops)
                elif modelopt:
                    from calibration.modelopt import float_twin, quantize

                    excluded = _matching(source.proto, keep_nodes, keep_ops)
                    value_ranges = quantize(
                        source,
                        dataset.read(chosen.calibration),
                        precision,
                        method,
                        model_out,
                        work,
                        keep_nodes,
                        keep_ops,
                    )
                    prepared = float_twin(source, model_out, work)
                else:
                    prepared = (reuse.prepare if reuse else calibrators.prepare)(source.path, work)
                    excluded = _matching(onnx.load_model(prepared, load_external_data=False), keep_nodes, keep_ops)
                    wanted = calibrators.tensors_to_calibrate(prepared, frozenset(excluded))
                    tensors = reuse.ranges(wanted) if reuse else None
                    if tensors is None:
                        tensors = calibrators.collect_ranges(
                            prepared,
                            dataset,
                            chosen.calibration,
                            method,
                            batch_size,
                            HistogramOptions(num_bins=options.num_bins, percentile=options.percentile),
                            options.chunk_mb,
                            work,
                            counter("calibrate", len(chosen.calibration), progress),
                            wanted,
                        )
                        if reuse:
                            reuse.keep(tensors)
                    value_ranges = calibrators.ranges(tensors)
                    if not (reuse and reuse.write_without(model_out, frozenset(excluded))):
                        calibrators.quantize(prepared, tensors, precision, method, model_out, work, frozenset(excluded))
                        calibrators.keep_float_consumers(model_out, frozenset(excluded))
                        if reuse:
                            reuse.keep_model(model_out)
                if precision != "fp16":
                    quantized_ops = calibrators.quantized_nodes(model_out)
                    if not quantized_ops:
                        reason = (
                            f"every one of them is excluded (--exclude {' --exclude '.join(options.exclude)})"
                            if excluded
                            else "ModelOpt selected none of them"
                            if modelopt
                            else "the model has none to quantize"
                        )
                        raise CheckFailed(
                            f"{source.path}: {precision} calibration quantized no node: TensorRT runs "
                            f"{precision.upper()} only in {', '.join(calibrators.TENSORRT_QUANTIZED_OPS)} with float "
                            f"activations, and {reason}; build it in fp16 (--precision fp16) instead"
                        )
                    calibrators.keep_metadata(source.proto, model_out)
                    build_proof, reformats = _prove_build(model_out, dataset, chosen.calibration, source, precision)
                    cache = calibrators.trt_cache(value_ranges, calibrators.tensor_names(source.proto), method)
                    header = cache.splitlines()[0]
                report = compare(
                    reference,
                    model_out,
                    precision,
                    dataset,
                    chosen.holdout,
                    batch_size,
                    fixed_batch,
                    counter("held-out", len(chosen.holdout), progress),
                    metric,
                    labels,
                )
                if quantized_ops is not None:
                    report = report.model_copy(
                        update={
                            "quantized_nodes": sum(quantized_ops.values()),
                            **_sensitivity(source, prepared, model_out, dataset, chosen.holdout, batch_size, reuse),
                        }
                    )
                if precision == "fp16":
                    report = _with_fp16_range(
                        report, source, model_out, dataset, chosen.holdout, batch_size, options.chunk_mb
                    )
                with stop_signals_held():  # the model and the weights it names go in together
                    for name in ("model.onnx.data", "model.onnx"):
                        if (pending / name).is_file():
                            os.replace(pending / name, folder / name)
                        else:
                            (folder / name).unlink(missing_ok=True)  # an earlier run's
            if cache is None:
                (folder / "calibration.cache").unlink(missing_ok=True)
            else:
                _write(folder / "calibration.cache", cache)
            _write(folder / "report.json", report.model_dump_json(indent=2) + "\n")
            files = {name: file_sha256(folder / name) for name in CALIBRATION_FILES if (folder / name).is_file()}
            result = CalibrationResult(
                **record,
                cache_key=key,
                model=str(source.path),
                data=str(dataset.path),
                data_kind=dataset.kind,
                holdout_samples=len(chosen.holdout),
                trt_cache_header=header,
                files=files,
                out=str(out),
                ranges={
                    name: TensorRange(
                        min=lo, max=hi, amax=calibrators.amax(lo, hi), scale=calibrators.scale(lo, hi, precision)
                    )
                    for name, (lo, hi) in value_ranges.items()
                },
                seconds=round(time.perf_counter() - started, 3),
                report=report,
                quantized_nodes=None if quantized_ops is None else sum(quantized_ops.values()),
                quantized_ops=quantized_ops,
                excluded=excluded,
                build_proof=build_proof,
                reformats=reformats,
                exclusions=_exclusions(excluded, source.proto, found or {}),
            )
            _write(folder / CALIBRATION_RECORD, result.record().model_dump_json(indent=2) + "\n")
            return result

        dataset.check_values()
        if not staged:
            writable_folder(out, "--out")
            (out / CALIBRATION_RECORD).unlink(missing_ok=True)  # the folder is incomplete until we finish
            return _shared_out(_with_gates(produce(out), options.gates, reused=False), out, shared, miss)
        with staging_folder(out.parent, out.name) as staging:
            result = produce(staging)
            if options.reuse and (previous := _reusable(out, key)) is not None:  # a concurrent run came first
                return _with_gates(previous, options.gates, reused=True)
            replace_dir(out, staging)
            return _shared_out(_with_gates(result, options.gates, reused=False), out, shared, miss)
    finally:
        dataset.close()


def _from_shared(shared: Any, key: str, out: Path, staged: bool) -> tuple[CalibrationResult | None, CacheOutcome]:
    """The result of ``key`` from the remote cache, verified against its own record and put in ``out`` (whole, by
    a rename when ``staged``; file by file, ``calibration.json`` last, otherwise)."""
    with staging_folder(out.parent, out.name) as staging:
        outcome = shared.fetch("calibrations", key, staging)
        if outcome.source != "remote":
            return None, outcome
        found = _reusable(staging, key)
        if found is None:
            return None, shared.refuse("calibrations", key, "its files contradict its calibration.json or its key")
        if staged:
            replace_dir(out, staging)
        else:
            writable_folder(out, "--out")
            (out / CALIBRATION_RECORD).unlink(missing_ok=True)
            for name in CALIBRATION_FILES:
                if (staging / name).is_file():
                    os.replace(staging / name, out / name)
                else:
                    (out / name).unlink(missing_ok=True)  # an earlier run's
            os.replace(staging / CALIBRATION_RECORD, out / CALIBRATION_RECORD)
    return found.model_copy(update={"out": str(out)}), outcome


def _shared_out(result: CalibrationResult, out: Path, shared: Any, miss: CacheOutcome) -> CalibrationResult:
    """A result made here, sent to the remote cache (a failure there is a warning: the result is whole)."""
    warnings = [miss.warning] if miss.warning else []
    if shared is not None:
        warnings += filter(
            None,
            [
                shared.send(
                    "calibrations",
                    result.cache_key,
                    out,
                    [*result.files, CALIBRATION_RECORD],
                    result.record().model_dump(mode="json"),
                )
            ],
        )
    return result.model_copy(update={"cache": miss.model_copy(update={"warning": " / ".join(warnings) or None})})


def _with_fp16_range(
    report: AccuracyReport, source, converted: Path, dataset, holdout, batch_size: int, chunk_mb: int
) -> AccuracyReport:
    """The comparison's blind spot covered: the FP32 model's intermediate ranges on the held-out samples against
    FP16's (what ``compile check`` does for fp16 engines)."""
    from compiler.data.ranges import check_ranges, fp16_tensors, reference_pass

    reference = reference_pass(source, dataset, holdout, batch_size, True, chunk_mb)
    result = check_ranges(reference, len(holdout), fp16_tensors(load_model(converted, check=False, digest=False)))
    return report.model_copy(
        update={
            "coverage": result.figures["coverage"],
            "fp16_range": {**result.figures, "summary": result.summary, "evidence": result.evidence},
        }
    )


SENSITIVITY_SAMPLES = 64
"""Held-out samples the sensitivity pass runs on: a ranking, not a verdict."""


def _sensitivity(source, prepared: Path, model_out: Path, dataset, holdout, batch_size: int, reuse=None) -> dict:
    """report.json's ``sensitivity`` (every quantized node, most damaging first), or why it could not be made: a
    ranking that cannot be computed does not cost the calibration. A fallback's final calibration takes its first
    one's (:meth:`calibration.fallback.Reuse.ranking`)."""
    from calibration.sensitivity import local_errors, ranking

    if reuse and (kept := reuse.ranking(model_out)) is not None:
        return {"sensitivity": kept}
    try:
        errors = local_errors(prepared, model_out, dataset, holdout[:SENSITIVITY_SAMPLES], batch_size)
    except CheckFailed as exc:
        return {"sensitivity": None, "sensitivity_error": str(exc)}
    ranked = ranking(errors, model_out, {n.name for n in source.proto.graph.node if n.name})
    if reuse:
        reuse.ranked = ranked
    return {"sensitivity": ranked}


def _exclusions(excluded: list[str], proto, found: dict[str, dict]) -> list[dict]:
    """Each excluded node with why: ``given`` (``--exclude``) or ``found`` (``--fallback auto``, with its figure)."""
    from calibration.sensitivity import source_name

    names = {n.name for n in proto.graph.node if n.name}
    return [{"node": node, **found.get(source_name(node, names), {"reason": "given"})} for node in excluded]


def _prove_build(model: Path, dataset, indices, source, precision: str):
    """One real build of the Q/DQ model (:func:`compiler.backends.build_proof.prove_build`) before anything says ok:
    what proved it, and the reformat kernels that build got."""
    from compiler.backends.build_proof import prove_build
    from compiler.core.records import Status

    shapes = {name: array.shape for name, array in dataset.read(indices[:1]).items()}
    proof = prove_build(model, shapes, source.input_dims())
    if proof.status == Status.FAILED:
        if prove_build(source.path, shapes, source.input_dims()).status == Status.FAILED:
            raise CheckFailed(
                f"{source.path}: the model does not build with TensorRT even in FP32, so no "
                f"{precision} calibration of it can: {proof.detail}"
            )
        raise CheckFailed(
            f"{source.path}: the {precision} Q/DQ model does not build: {proof.detail}; keep the node "
            f"it names out of {precision} with --exclude NODE, or build in fp16"
        )
    return proof.detail, proof.reformats


def check_exclude(model: str | Path, names: tuple[str, ...]) -> None:
    """Refuse (exit 2) an ``--exclude`` value that names neither a node nor an op type of ``model``, as
    :func:`calibrate` does, without calibrating (``compile release --dry-run``)."""
    source = load_model(model)
    _resolve_exclude(source.proto, names, source.path)


def _resolve_exclude(proto, names: tuple[str, ...], path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """``--exclude`` values as (node names, op types) of the model; one that is neither is refused, named."""
    nodes = {node.name for node in proto.graph.node if node.name}
    ops = {node.op_type for node in proto.graph.node}
    for name in names:
        if name not in nodes and name not in ops:
            raise InvalidInput(
                f"--exclude {name}: {path} has no node named {name!r} and no {name!r} op; give a node "
                f"name or one of its op types ({', '.join(sorted(ops)[:12])}"
                f"{', ...' if len(ops) > 12 else ''})"
            )
    return frozenset(n for n in names if n in nodes), frozenset(n for n in names if n not in nodes)


def _matching(proto, keep_nodes: frozenset[str], keep_ops: frozenset[str]) -> list[str]:
    """Names of the nodes ``--exclude`` keeps in float: those named (also as onnxruntime's pre-processing renames a
    node it fuses, ``NAME/MatMulAddFusion``), and every node of the op types."""
    from calibration.sensitivity import source_name

    return sorted(
        {
            node.name
            for node in proto.graph.node
            if node.name and (source_name(node.name, keep_nodes) in keep_nodes or node.op_type in keep_ops)
        }
    )


def _temporary_folder(cleanup: ExitStack, parent: Path | None, prefix: str) -> Path:
    """A new folder removed when ``cleanup`` ends, with stop signals held while it is made and while it is removed:
    a stop right after its mkdir, or one that cut its removal short, would leave it behind."""
    with stop_signals_held():
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        cleanup.callback(_remove_held, folder)
    return folder


def _remove_held(folder: Path) -> None:
    with stop_signals_held():
        shutil.rmtree(folder, ignore_errors=True)


def _versions() -> dict[str, str]:
    from compiler.data.session import tool_versions

    return tool_versions("onnxruntime", "onnx")


def _write(path: Path, text: str) -> None:
    write_atomic(path, text.encode("utf-8"))


def _reusable(out: Path, key: str) -> CalibrationResult | None:
    """The previous run in ``out`` when it had the same content key and its files are intact."""
    try:
        previous = read_calibration(out)
        if previous.record.cache_key != key:
            return None
        previous.verify(out / name for name in previous.record.files)
        report = read_record(out / "report.json", AccuracyReport, RERUN)
    except (InvalidInput, OSError):
        return None
    return CalibrationResult(**previous.record.model_dump(), report=report)


def _with_gates(result: CalibrationResult, limits: dict[str, float | None], reused: bool) -> CalibrationResult:
    checked = gates(result.report, **limits)
    return result.model_copy(update={"gates": checked, "passed": all(g.passed for g in checked), "reused": reused})


__all__ = ["CalibrationResult", "TensorRange", "calibrate", "check_exclude", "convert_fp16"]
