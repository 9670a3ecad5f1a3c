"""One calibration, step by step: :func:`prepare` (the inputs checked, the content key) → reuse (the folder or the
remote cache, :mod:`calibration.reuse`) → quantize (a :class:`calibration.quantizers.Quantizer` collects and writes
the model) → :func:`prove` (one real build) → :func:`judge` (held-out accuracy, sensitivity, FP16 range) →
:func:`write` (``calibration.json`` last) → :func:`gated`. ``calibrate`` and ``--fallback auto`` both run it
through :func:`calibrate_once`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibration import calibrators
from calibration.accuracy import compare, gates
from calibration.calibrators import HistogramOptions
from calibration.quantizers import Job, Quantized, Quantizer, quantizer_for
from calibration.reuse import look_up, reusable, sent
from compiler.core.errors import CheckFailed, InvalidInput, stop_signals_held
from compiler.core.files import file_sha256, hash_json, replace_dir, staging_folder, writable_folder, write_atomic
from compiler.core.options import CalibrationOptions, parse_sample_axes
from compiler.core.paths import check_not_overwriting
from compiler.core.progress import counter, timed
from compiler.core.records import (
    CALIBRATION_FILES,
    CALIBRATION_FORMAT,
    CALIBRATION_RECORD,
    CALIBRATION_VERDICT,
    AccuracyReport,
    CalibrationResult,
    Progress,
    TensorRange,
)
from compiler.core.reuse import RemoteTier
from compiler.data.datasets import Dataset, ImagePreprocess, open_dataset
from compiler.data.footprint import Fit, sample_shapes
from compiler.data.metric import Metric, metric_and_labels
from compiler.data.model import OnnxModel, load_model, node_name
from compiler.data.model_inputs import model_inputs
from compiler.data.output_kinds import mixed_outputs
from compiler.data.sampling import Split, split
from compiler.data.session import session

if TYPE_CHECKING:
    import numpy as np

    from calibration.fallback_reuse import Reuse


@dataclass(frozen=True)
class Plan:
    """A calibration's inputs, checked, with its content key and what a fallback hands it."""

    options: CalibrationOptions
    quantizer: Quantizer
    source: OnnxModel
    dataset: Dataset
    chosen: Split
    batch_size: int
    fixed_batch: int | None
    keep_nodes: frozenset[str]
    keep_ops: frozenset[str]
    metric: Metric | None
    labels: dict[str, np.ndarray] | None
    record: dict[str, Any]  # calibration.json's keyed part
    key: str
    out: Path
    started: float
    progress: Progress | None = None
    found: dict[str, dict] = field(default_factory=dict)  # --fallback auto's: why it excluded each node
    reuse: Reuse | None = None  # --fallback auto's first calibration

    @property
    def precision(self) -> str:
        return self.record["precision"]

    @property
    def method(self) -> str | None:
        return self.record["method"]

    def job(self, out: Path, work: Path) -> Job:
        return Job(
            self.source,
            self.dataset,
            self.chosen.calibration,
            self.precision,
            self.method,
            self.batch_size,
            self.options,
            self.keep_nodes,
            self.keep_ops,
            out,
            work,
            self.progress,
            self.reuse,
            self.fixed_batch,
        )


def calibrate_once(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: CalibrationOptions,
    *,
    preprocess: ImagePreprocess | None = None,
    staged: bool = False,
    progress: Progress | None = None,
    tier: RemoteTier | None = None,
    found: dict[str, dict] | None = None,
    reuse: Reuse | None = None,
) -> CalibrationResult:
    """One calibration with ``options`` as they are (``--fallback`` is the caller's): the result of its key when one
    was made before, else made, gated and sent to the remote cache. ``found`` and ``reuse`` are a fallback's."""
    started = time.perf_counter()
    out = Path(out)
    source = load_model(model)
    dataset = open_dataset(data, source, preprocess, parse_sample_axes(options.sample_axis))
    try:
        plan = replace(
            prepare(options, source, dataset, out, staged, started), progress=progress, found=found or {}, reuse=reuse
        )
        previous, miss = look_up(out, plan.key, plan.record, options.reuse, staged, tier)
        if previous is not None:
            return judged(gated(previous, options.gates, reused=True), out)
        dataset.check_values()
        refuse_unfit(plan)
        if not staged:
            writable_folder(out, "--out")
            (out / CALIBRATION_RECORD).unlink(missing_ok=True)  # the folder is incomplete until we finish
            return judged(sent(gated(produce(plan, out), options.gates, reused=False), out, tier, miss), out)
        with staging_folder(out.parent, out.name) as staging:
            result = produce(plan, staging)
            if options.reuse and (previous := reusable(out, plan.key)) is not None:  # a concurrent run came first
                return judged(gated(previous, options.gates, reused=True), out)
            replace_dir(out, staging)
            return judged(sent(gated(result, options.gates, reused=False), out, tier, miss), out)
    finally:
        dataset.close()


def prepare(
    options: CalibrationOptions, source: OnnxModel, dataset: Dataset, out: Path, staged: bool, started: float
) -> Plan:
    """The inputs checked (nothing overwritten, one fixed batch size, ``--exclude`` names, the metric) and the
    content key: model, data, samples and every option that changes the result, with the tools' versions."""
    check_not_overwriting(
        [out / name for name in (*CALIBRATION_FILES, CALIBRATION_RECORD)],
        [source.path, *source.external_files, *dataset.inputs(), *([Path(options.labels)] if options.labels else [])],
        "--out",
        replaced=[out] if staged else [],
    )
    fixed_batch = _fixed_batch(source, parse_sample_axes(options.sample_axis))
    batch_size = options.batch_size if fixed_batch is None else fixed_batch
    chosen = split(dataset.count, options.holdout, options.samples, options.seed, fixed_batch, dataset.path)
    method = None if options.precision == "fp16" else options.method
    keep_nodes, keep_ops = resolve_exclude(source.proto, options.exclude, source.path)
    quantizer = quantizer_for(options)
    entries, tool_versions = quantizer.key()
    if method:  # the build proof keeps in float what its TensorRT computes so: its version is part of the result
        from compiler.backends.build_proof import proof_versions

        tool_versions = tool_versions | proof_versions()
    metric, labels = metric_and_labels(options.metric, options.min_metric, options.labels, dataset)
    record = {
        "format_version": CALIBRATION_FORMAT,
        "precision": options.precision,
        "method": method,
        "model_sha256": source.sha256,
        "data_sha256": dataset.sha256,
        "samples": len(chosen.calibration),
        "batch_size": batch_size,
        "seed": options.seed,
        "options": _recorded(options, method, entries, metric is not None),
        "versions": _versions() | tool_versions,
    }
    return Plan(
        options=options,
        quantizer=quantizer,
        source=source,
        dataset=dataset,
        chosen=chosen,
        batch_size=batch_size,
        fixed_batch=fixed_batch,
        keep_nodes=keep_nodes,
        keep_ops=keep_ops,
        metric=metric,
        labels=labels,
        record=record,
        key=hash_json(record),
        out=out,
        started=started,
    )


def refuse_unfit(plan: Plan) -> None:
    """A ``--chunk-mb`` that cannot hold one sample of the largest run is exit 2 before anything is written: the
    held-out comparison, the FP32 model and the quantized one side by side (whose activations are the FP32 model's:
    its dequantized weights do not count per sample). The runs are fitted again, each with its own model."""
    if plan.precision != "fp16" and plan.options.quantizer == "onnxruntime":
        shapes = sample_shapes(plan.dataset, plan.chosen.calibration)
        fit = Fit(shapes, plan.options.chunk_mb, plan.batch_size, plan.fixed_batch, _held_out(plan))
        fit.samples([plan.source.proto, plan.source.proto])


def _fixed_batch(source: OnnxModel, sample_axes: dict[str, int]) -> int | None:
    """The batch size the model's inputs fix (a calibration batch must be it), if any; two different are refused."""
    fixed = {i.batch for i in model_inputs(source, sample_axes) if i.batch is not None}
    if len(fixed) > 1:
        raise InvalidInput(f"{source.path}: inputs have different fixed batch sizes {sorted(fixed)}")
    return fixed.pop() if fixed else None


def _recorded(
    options: CalibrationOptions, method: str | None, quantizer: dict[str, str], scored: bool
) -> dict[str, Any]:
    """The options that change a calibration's result but are not fields of its record: the quantizer's entries,
    and the metric with its labels when one scores the report (another metric is another result)."""
    recorded: dict[str, Any] = {
        "holdout": options.holdout,
        "requested_samples": options.samples,
        "chunk_mb": options.chunk_mb,
    }
    if method in ("entropy", "percentile"):
        recorded |= {"num_bins": options.num_bins, "num_quantized_bins": HistogramOptions.num_quantized_bins}
        recorded["histogram_range"] = "min-max pass"  # calibration.histograms: not onnxruntime's growing bins
    if method == "percentile":
        recorded["percentile"] = options.percentile
    if options.exclude:
        recorded["exclude"] = sorted(set(options.exclude))
    recorded |= quantizer
    if scored:
        recorded["metric"] = options.metric
        recorded["labels_sha256"] = file_sha256(options.labels) if options.labels else None
    return recorded


def produce(plan: Plan, folder: Path) -> CalibrationResult:
    """Calibrate into ``folder`` (``out``, or the staging folder that becomes it), ``calibration.json`` last.

    The model is written in a hidden folder inside ``folder`` and moved into place only once the held-out report is
    done, so a run stopped midway leaves no model of its own there, whole or cut short."""
    phases: dict[str, float] = {}
    reference = session(plan.source.path, "model")  # fail fast on a model onnxruntime cannot run
    with ExitStack() as cleanup:
        work = _temporary_folder(cleanup, None, "calibrate-")
        if plan.reuse is None and plan.precision != "fp16":  # the build proof's second round takes the first's work
            from calibration.fallback_reuse import Reuse

            plan = replace(plan, reuse=Reuse(_temporary_folder(cleanup, None, "calibrate-first-")))
        pending = _temporary_folder(cleanup, folder, ".calibrate-")
        with timed(phases, "quantize"):
            made = plan.quantizer.quantize(plan.job(pending / "model.onnx", work))
        proof = (None, None)  # a conversion has nothing to prove here
        if made.quantized_ops is not None:
            built = counter("build proof", 1, plan.progress)
            with timed(phases, "build proof"):
                plan, made, proof = proven(plan, made, pending / "model.onnx", work)
            built(1)
        report = judge(plan, reference, made, phases)
        with stop_signals_held():  # the model and the weights it names go in together
            for name in ("model.onnx.data", "model.onnx"):
                if (pending / name).is_file():
                    os.replace(pending / name, folder / name)
                else:
                    (folder / name).unlink(missing_ok=True)  # an earlier run's
    return write(plan, folder, made, report, proof, phases)


IN_FLOAT = "TensorRT computes it in float despite its Q/DQ (calibrate's build proof)"
PROOF_ROUNDS = 3
"""Builds of one calibration at most: the proof, and again after keeping in float what TensorRT kept so."""


def proven(plan: Plan, made: Quantized, out: Path, work: Path) -> tuple[Plan, Quantized, tuple]:
    """The Q/DQ model proven by a real build (:func:`prove`). A Conv/MatMul/Gemm given Q/DQ that the build computes
    in float anyway (check's quantized-matmul rule refuses such an engine) is kept in float, the model made again
    without its Q/DQ (from the first one's ranges and model, ``plan.reuse``: nothing is collected again) and proven
    again, so calibrate never makes what check refuses; the plan returned names why (``found``), for
    calibration.json's ``exclusions``."""
    from calibration.sensitivity import source_name

    names = {node_name(n) for n in plan.source.proto.graph.node}
    for _ in range(PROOF_ROUNDS):
        proof = prove(made.model, plan.dataset, plan.chosen.calibration, plan.source, plan.precision)
        fresh = {source_name(n, names) for n in proof.float_nodes} - plan.keep_nodes
        if not fresh:
            break
        plan = replace(
            plan,
            keep_nodes=plan.keep_nodes | fresh,
            found={**plan.found, **{name: {"reason": "build-proof", "why": IN_FLOAT} for name in fresh}},
        )
        made = plan.quantizer.quantize(plan.job(out, work))
    if proof.float_nodes:
        raise CheckFailed(
            f"{plan.source.path}: TensorRT computes {', '.join(proof.float_nodes[:4])} in float despite their "
            f"{plan.precision} Q/DQ, even after keeping them in float; keep them out with --exclude NODE, or "
            f"build in fp16"
        )
    return plan, made, (proof.detail, proof.reformats)


def prove(model: Path, dataset: Dataset, indices: np.ndarray, source: OnnxModel, precision: str):
    """One real build of the Q/DQ model (:func:`compiler.backends.build_proof.prove_build`) before anything says
    ok: the proof (what proved it, the reformat kernels and float nodes that build got)."""
    from compiler.backends.build_proof import prove_build
    from compiler.core.records import Status

    shapes = {name: array.shape for name, array in dataset.read(indices[:1]).items()}
    proof = prove_build(model, shapes, source.input_dims(), dict(dataset.axes))
    if proof.status == Status.FAILED:
        if prove_build(source.path, shapes, source.input_dims(), dict(dataset.axes)).status == Status.FAILED:
            raise CheckFailed(
                f"{source.path}: the model does not build with TensorRT even in FP32, so no "
                f"{precision} calibration of it can: {proof.detail}"
            )
        raise CheckFailed(
            f"{source.path}: the {precision} Q/DQ model does not build: {proof.detail}; keep the node "
            f"it names out of {precision} with --exclude NODE, or build in fp16"
        )
    return proof


def judge(plan: Plan, reference, made: Quantized, phases: dict[str, float]) -> AccuracyReport:
    """The held-out comparison against FP32 per output, with the quantized nodes' sensitivity ranking (int8/fp8)
    or the intermediate values' FP16 range (fp16), each timed into ``phases``; :func:`gated` evaluates the gates on
    it."""
    holdout = plan.chosen.holdout
    shapes = sample_shapes(plan.dataset, holdout)
    fit = Fit(shapes, plan.options.chunk_mb, plan.batch_size, plan.fixed_batch, _held_out(plan))
    ranked: dict[str, Any] = {}
    if made.quantized_ops is not None:  # first: the reference session holds no activations yet
        what = f"{plan.source.path}'s sensitivity pass"
        ranked = {"quantized_nodes": sum(made.quantized_ops.values())}
        with timed(phases, "sensitivity"):
            ranked |= sensitivity(plan, made.float_model, made.model, replace(fit, what=what))
    with timed(phases, "held-out comparison"):
        report = compare(
            reference,
            made.model,
            plan.precision,
            plan.dataset,
            holdout,
            fit.samples([plan.source.proto, made.model]),
            plan.fixed_batch,
            counter("held-out", len(holdout), plan.progress),
            plan.metric,
            plan.labels,
            plan.options.output,
            mixed_outputs(plan.source.proto.graph),  # the source's outputs: already parsed
        )
    report = report.model_copy(update=ranked)
    if plan.precision == "fp16":
        with timed(phases, "fp16 range"):
            report = _with_fp16_range(report, plan, made.model)
    return report


def _with_fp16_range(report: AccuracyReport, plan: Plan, converted: Path) -> AccuracyReport:
    """The comparison's blind spot covered: the FP32 model's intermediate ranges on the held-out samples against
    FP16's (what ``compile check`` does for fp16 engines)."""
    from compiler.data.agreement import limits
    from compiler.data.ranges import check_ranges, fp16_tensors, fp32_constants, reference_pass

    holdout = plan.chosen.holdout
    fp16 = load_model(converted, check=False, digest=False)
    kept = fp32_constants(fp16.proto)
    reference = reference_pass(
        plan.source, plan.dataset, holdout, plan.batch_size, True, plan.options.chunk_mb, fp32_constants=kept
    )
    given = plan.options
    limit = limits("fp16", given.min_cosine, given.min_sqnr, given.min_top1, given.max_abs_error, given.gate_on)
    result = check_ranges(reference, len(holdout), fp16_tensors(fp16), lambda _: limit)
    return report.model_copy(
        update={
            "coverage": result.figures["coverage"],
            "fp16_range": {**result.figures, "summary": result.summary, "evidence": result.evidence},
        }
    )


SENSITIVITY_SAMPLES = 64
"""Held-out samples the sensitivity pass runs on: a ranking, not a verdict."""


def sensitivity(plan: Plan, prepared: Path | None, model_out: Path, fit: Fit) -> dict[str, Any]:
    """report.json's ``sensitivity`` (every quantized node, most damaging first), or why it could not be made: a
    ranking that cannot be computed does not cost the calibration. A fallback's final calibration takes its first
    one's (:meth:`calibration.fallback_reuse.Reuse.ranking`)."""
    from calibration.sensitivity import local_errors, ranking

    reuse = plan.reuse
    if reuse and (kept := reuse.ranking(model_out)) is not None:
        return {"sensitivity": kept}
    try:
        judged = plan.chosen.holdout[:SENSITIVITY_SAMPLES]
        errors = local_errors(
            prepared, model_out, plan.dataset, judged, fit, counter("sensitivity", len(judged), plan.progress)
        )
    except CheckFailed as exc:
        return {"sensitivity": None, "sensitivity_error": str(exc)}
    ranked = ranking(errors, model_out, {node_name(n) for n in plan.source.proto.graph.node})
    if reuse:
        reuse.ranked = ranked
    return {"sensitivity": ranked}


def _held_out(plan: Plan) -> str:
    return f"{plan.source.path}'s held-out comparison (the FP32 and {plan.precision} models side by side)"


def write(
    plan: Plan, folder: Path, made: Quantized, report: AccuracyReport, proof, phases: dict[str, float]
) -> CalibrationResult:
    """calibration.cache (int8/fp8), report.json, then calibration.json: the record of what ``folder`` holds."""
    source, precision = plan.source, plan.precision
    cache = None
    if made.quantized_ops is not None:
        cache = calibrators.trt_cache(made.ranges, calibrators.tensor_names(source.proto), plan.method)
    if cache is None:
        (folder / "calibration.cache").unlink(missing_ok=True)
    else:
        _write(folder / "calibration.cache", cache)
    _write(folder / "report.json", report.model_dump_json(indent=2) + "\n")
    ranges = {
        name: TensorRange(min=lo, max=hi, amax=calibrators.amax(lo, hi), scale=calibrators.scale(lo, hi, precision))
        for name, (lo, hi) in made.ranges.items()
    }
    result = CalibrationResult(
        **plan.record,
        cache_key=plan.key,
        model=str(source.path),
        data=str(plan.dataset.path),
        data_kind=plan.dataset.kind,
        holdout_samples=len(plan.chosen.holdout),
        trt_cache_header=None if cache is None else cache.splitlines()[0],
        files={name: file_sha256(folder / name) for name in CALIBRATION_FILES if (folder / name).is_file()},
        out=str(plan.out),
        ranges=ranges,
        seconds=round(time.perf_counter() - plan.started, 3),
        phases=phases,
        report=report,
        quantized_nodes=None if made.quantized_ops is None else sum(made.quantized_ops.values()),
        quantized_ops=made.quantized_ops,
        excluded=made.excluded,
        build_proof=proof[0],
        reformats=proof[1],
        exclusions=_exclusions(made.excluded, source.proto, plan.found),
    )
    _write(folder / CALIBRATION_RECORD, result.record().model_dump_json(indent=2) + "\n")
    return result


def judged(result: CalibrationResult, out: Path) -> CalibrationResult:
    """The verdict of ``result``'s gates written beside its record (verdict.json), for ``compile build`` to read."""
    from compiler.data.agreement import describe

    failed = [describe(g) for g in result.gates if not g.passed]
    verdict = json.dumps({"passed": result.passed, "failed": failed}).encode()
    path = out / CALIBRATION_VERDICT
    if not path.is_file() or path.read_bytes() != verdict:  # a reuse under the same gates touches nothing
        write_atomic(path, verdict)
    return result


def gated(result: CalibrationResult, limits: dict[str, float | None], reused: bool) -> CalibrationResult:
    """The gates evaluated on the result's held-out report (made here or reused)."""
    checked = gates(result.report, **limits)
    return result.model_copy(update={"gates": checked, "passed": all(g.passed for g in checked), "reused": reused})


def _exclusions(excluded: list[str], proto, found: dict[str, dict]) -> list[dict]:
    """Each excluded node with why: ``given`` (``--exclude``) or ``found`` (``--fallback auto``, with its figure)."""
    from calibration.sensitivity import source_name

    names = {node_name(n) for n in proto.graph.node}
    return [{"node": node, **found.get(source_name(node, names), {"reason": "given"})} for node in excluded]


def resolve_exclude(proto, names: tuple[str, ...], path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """``--exclude`` values as (node names, op types) of the model; one that is neither is refused, named."""
    nodes = {node_name(node) for node in proto.graph.node}
    ops = {node.op_type for node in proto.graph.node}
    for name in names:
        if name not in nodes and name not in ops:
            raise InvalidInput(
                f"--exclude {name}: {path} has no node named {name!r} and no {name!r} op; give a node "
                f"name or one of its op types ({', '.join(sorted(ops)[:12])}"
                f"{', ...' if len(ops) > 12 else ''})"
            )
    return frozenset(n for n in names if n in nodes), frozenset(n for n in names if n not in nodes)


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
