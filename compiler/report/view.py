"""What a release report shows, gathered once from the records: a release's engines, every accuracy figure against
its gate, each check's verdict, the calibration and the stages' timeline. Made from build folders (with the
calibration folders they were built from) or from a published release (its manifest and the check reports and
layer lists it names), so the page, ``compile diff`` and the node-data overlays read one model, not six files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from compiler.core.record_files import read_record
from compiler.core.records import (
    CALIBRATION_RECORD,
    CHECK_RECORD,
    AccuracyReport,
    CalibrationRecord,
    CheckReport,
    LayersRecord,
    Status,
)

VIEW_FORMAT = 1
GATE_FIGURES = {
    "finite": ("nonfinite", False),
    "min-cosine": ("cosine_mean", True),
    "min-cosine-low": ("cosine_low", True),
    "min-sqnr": ("sqnr_db", True),
    "min-top1": ("top1_agreement", True),
    "min-top5": ("top5_agreement", True),
    "max-abs-error": ("max_abs_error", False),
    "min-recall": ("recall", True),
    "min-precision": ("precision", True),
    "min-iou": ("iou", True),
}
"""Each accuracy gate -> (the figure it reads, whether higher is better): how a figure is drawn and compared."""
SENSITIVE_SHOWN = 10


class EngineRow(BaseModel):
    sku: str
    precision: str
    status: str
    plan_bytes: int | None = None
    plan_sha256: str | None = None
    build_seconds: float | None = None
    profiles: list[str] = []
    runtime: str = ""
    kernels: int | None = None
    kernel_precisions: dict[str, int] = {}
    low_precision_share: float | None = None
    """Of the kernels that compute in a precision, the share in the engine's own (int8/fp8/fp16); None for fp32."""

    @property
    def label(self) -> str:
        return f"{self.sku}/{self.precision}"


class Figure(BaseModel):
    """One accuracy figure of one output of one engine (or calibration), and the gate that judges it."""

    where: str
    output: str
    gate: str
    figure: str
    value: float
    threshold: float | None
    passed: bool | None
    higher_is_better: bool


class CheckRow(BaseModel):
    where: str
    check: str
    status: str
    summary: str
    evidence: list[str] = []


class Sensitive(BaseModel):
    node: str
    op: str
    sqnr_db: float


class CalibrationRow(BaseModel):
    precision: str
    method: str | None
    samples: int
    holdout_samples: int
    quantized_nodes: int | None
    excluded: list[str] = []
    fallback: str | None = None
    sensitive: list[Sensitive] = []
    seconds: float | None = None
    """What making the calibration took (a reused one: when it was made), with its phases."""
    phases: dict[str, float] = {}


class StageRow(BaseModel):
    stage: str
    status: str
    seconds: float
    cache: str | None = None
    detail: str = ""


class ReleaseView(BaseModel):
    """Everything the report page shows, for machines too (``compile report --json``)."""

    format_version: int = VIEW_FORMAT
    title: str
    name: str | None = None
    version: str | None = None
    source: str
    """``build folders`` or ``release``."""
    signed: str = "unsigned"
    passed: bool
    counts: dict[str, int] = {}
    engines: list[EngineRow] = []
    figures: list[Figure] = []
    checks: list[CheckRow] = []
    calibrations: list[CalibrationRow] = []
    stages: list[StageRow] = []
    failures: list[str] = []
    links: dict[str, str] = {}
    """Label -> a path relative to the report's own folder (files that exist there)."""
    model: str | None = None
    """The source model's path, where the folders name it (what Model Explorer opens)."""
    layers: dict[str, LayersRecord] = Field(default_factory=dict, exclude=True)
    """``sku/precision`` -> the engine's kernels (for the node-data overlays; not in --json)."""


def engine_row(engine: Any, layers: LayersRecord | None, status: str = Status.OK) -> EngineRow:
    """An EngineRecord (build folder) or ReleaseEngine (manifest) as a row; layers give the precision mix."""
    plan = getattr(engine, "plan", None)
    size = engine.size_bytes if plan is None else plan.size_bytes
    digest = engine.sha256 if plan is None else plan.sha256
    runtime = getattr(engine, "runtime", None)
    precision = str(engine.precision)
    row = EngineRow(
        sku=engine.sku,
        precision=precision,
        status=str(status),
        plan_bytes=size,
        plan_sha256=digest,
        build_seconds=getattr(engine, "build_seconds", None),
        profiles=[p.name for p in engine.profiles],
        runtime=runtime.name
        if runtime is not None
        else f"{engine.backend.get('name')} {engine.backend.get('version')}",
    )
    if layers is not None:
        typed = {k: v for k, v in layers.kernel_precisions.items() if k != "none"}
        own = {"int8": "Int8", "fp8": "FP8", "fp16": "Half"}.get(precision)
        share = typed.get(own, 0) / sum(typed.values()) if own and typed else None
        row = row.model_copy(
            update={
                "kernels": layers.kernels,
                "kernel_precisions": layers.kernel_precisions,
                "low_precision_share": share,
            }
        )
    return row


def check_rows(report: CheckReport) -> tuple[list[CheckRow], list[Figure]]:
    """Every check of a check.json as rows, and every accuracy figure of its engines against its gate."""
    rows = [CheckRow(where="model", check=c.name, status=str(c.status), summary=c.summary, evidence=c.evidence)
            for c in report.model_checks]  # fmt: skip
    figures = []
    for engine in report.engines:
        where = f"{engine.sku}/{engine.precision}"
        for check in engine.checks:
            rows.append(CheckRow(where=where, check=check.name, status=str(check.status), summary=check.summary,
                                 evidence=check.evidence))  # fmt: skip
            if check.name == "accuracy" and check.status != Status.SKIPPED:
                figures += _figures(where, check.figures)
    return rows, figures


def _figures(where: str, per_output: dict[str, Any]) -> list[Figure]:
    found = []
    for output, figures in per_output.items():
        if not isinstance(figures, dict):
            continue
        for gate, threshold in (figures.get("thresholds") or {}).items():
            figure, higher = GATE_FIGURES.get(gate, (None, True))
            value = figures.get(figure) if figure else None
            if value is None:
                continue
            passed = value >= threshold if higher else value <= threshold
            found.append(Figure(where=where, output=output, gate=gate, figure=figure, value=float(value),
                                threshold=float(threshold), passed=passed, higher_is_better=higher))  # fmt: skip
    return found


def calibration_row(folder: Path) -> tuple[CalibrationRow, list[Figure]]:
    """A calibration folder's record and held-out report as a row, and its held-out figures against its gates."""
    record = read_record(folder / CALIBRATION_RECORD, CalibrationRecord, "calibrate again")
    report = read_record(folder / "report.json", AccuracyReport, "calibrate again")
    fallback = None
    if record.fallback:
        kept = record.fallback.get("kept") or record.fallback.get("nodes") or []
        fallback = f"--fallback auto: {len(kept)} node(s) kept in higher precision"
    sensitive = [
        Sensitive(node=str(s.get("node")), op=str(s.get("op")), sqnr_db=float(s.get("sqnr_db", 0)))
        for s in (report.sensitivity or [])[:SENSITIVE_SHOWN]
    ]
    row = CalibrationRow(
        precision=record.precision,
        method=record.method,
        samples=record.samples,
        holdout_samples=record.holdout_samples,
        quantized_nodes=record.quantized_nodes,
        excluded=record.excluded,
        fallback=fallback,
        sensitive=sensitive,
        seconds=record.seconds,
        phases=record.phases,
    )
    where = f"calibration/{record.precision}"
    figures = [
        Figure(
            where=where,
            output=o.name,
            gate=gate,
            figure=figure,
            value=float(getattr(o, figure)),
            threshold=None,
            passed=None,
            higher_is_better=higher,
        )
        for o in report.outputs
        for gate, (figure, higher) in GATE_FIGURES.items()
        if gate in ("min-cosine", "min-sqnr", "min-top1", "min-recall", "min-iou") and getattr(o, figure) is not None
    ]
    return row, figures


def from_build_folders(
    title: str, build_dirs: list[Path], calibrations: list[Path], stages: list[StageRow], base: Path
) -> ReleaseView:
    """The view of a release run's (or a build's) folders; links are relative to ``base``, the report's folder."""
    from compiler.engines.folder import read_build

    view = ReleaseView(title=title, source="build folders", passed=True, stages=stages)
    for folder in build_dirs:
        build = read_build(folder, hash_plans=False)
        view.model = view.model or os.path.normpath(build.report.model)
        for target in build.targets:
            if target.engine is not None:
                view.engines.append(engine_row(target.engine, target.layers, target.status.status))
                if target.layers is not None:
                    view.layers[target.label] = target.layers
            else:
                view.engines.append(EngineRow(sku=target.status.sku, precision=str(target.status.precision),
                                              status=str(target.status.status)))  # fmt: skip
                view.failures.append(f"{target.label}: {target.status.status}")
        _add_check(view, folder, base)
    for folder in calibrations:
        if (folder / CALIBRATION_RECORD).is_file():
            row, figures = calibration_row(folder)
            view.calibrations.append(row)
            view.figures += figures
    view.passed = not view.failures and all(s.status != Status.FAILED for s in stages)
    return view


def from_work_folder(folder: Path, title: str, stages: list[StageRow]) -> ReleaseView | None:
    """The view of a release run's work folder (``builds/*/``, ``calibration/*``), links relative to it; None when
    it holds no build (a finalize run's folder)."""
    builds = sorted(p.parent for p in folder.glob("builds/*/build.json"))
    if not builds:
        return None
    return from_build_folders(title, builds, sorted(folder.glob("calibration/*")), stages, folder)


def _add_check(view: ReleaseView, folder: Path, base: Path) -> None:
    path = folder / CHECK_RECORD
    if not path.is_file():
        return
    report = read_record(path, CheckReport, "check again")
    rows, figures = check_rows(report)
    view.checks += rows
    view.figures += figures
    for key, count in report.counts.items():
        view.counts[key] = view.counts.get(key, 0) + count
    view.failures += [f"{where} {check.name}: {check.summary}" for where, check in report.failures]
    _link(view, f"check report ({folder.name})", folder / "check.md", base)


def _link(view: ReleaseView, label: str, path: Path, base: Path) -> None:
    """A link to ``path`` from the report's folder ``base``, only when the file is there."""
    if path.is_file():
        view.links[label] = Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def from_release(store: Any, ref: str) -> ReleaseView:
    """The view of a published release: its manifest, and the check reports and layer lists it names (each blob
    verified against the manifest's digest as it is read)."""
    from compiler.releases.manifest import resolve
    from compiler.releases.verify import attachment_within_limit
    from compiler.stores import open_store

    store = open_store(store)
    resolved = resolve(store, ref)
    manifest, content = resolved.manifest, resolved.manifest.content
    what = f"{content.name}@{content.version}"
    view = ReleaseView(title=what, name=content.name, version=content.version, source="release", passed=True)
    for engine in content.engines:
        layers = None
        if engine.layers is not None:
            layers = _blob_record(store, content.name, engine.layers, LayersRecord, f"{engine.sku}/{engine.precision}")
        view.engines.append(engine_row(engine, layers))
        if layers is not None:
            view.layers[f"{engine.sku}/{engine.precision}"] = layers
    for blob in manifest.check_reports:
        report = _blob_record(store, content.name, blob, CheckReport, "check.json")
        rows, figures = check_rows(report)
        view.checks += rows
        view.figures += figures
        for key, count in report.counts.items():
            view.counts[key] = view.counts.get(key, 0) + count
    signature = attachment_within_limit(store, content.name, content.version, "signature", what)
    view.signed = _signer(signature, what) if signature else "unsigned"
    view.failures = list(manifest.failures)
    view.passed = not view.failures
    return view


def _signer(bundle: bytes, what: str) -> str:
    """Who the signature says signed (its key hint, or keyless), not verified here: ``compile verify`` does that."""
    from compiler.releases.signing import keyless_bundle, open_bundle

    if keyless_bundle(bundle):
        return "signed keyless (Sigstore; compile verify --identity/--issuer checks whom)"
    envelope, _ = open_bundle(bundle, f"the signature of {what}")
    hints = sorted(k for k in envelope.signatures if k)
    named = f"key {hints[0][:16]}" if hints else "a key"
    return f"signed by {named} (not verified here: compile verify --key PUB)"


def _blob_record(store: Any, name: str, blob: Any, kind: type, label: str) -> Any:
    """A small JSON record of a release (check.json, layers.json) read from the store and verified."""
    import io

    from compiler.core.errors import CheckFailed
    from compiler.core.record_files import parse_record
    from compiler.stores.base import HashingSink

    buffer = io.BytesIO()
    sink = HashingSink(buffer, blob.size_bytes, blob.sha256, f"{label} (sha256:{blob.sha256})")
    if not store.get_blob(name, blob.sha256, sink, blob.size_bytes) or not sink.matches():
        raise CheckFailed(f"{name}: {label} (sha256:{blob.sha256}) is missing or damaged in the store")
    return parse_record(buffer.getvalue(), Path(label), kind, "publish the release again")
