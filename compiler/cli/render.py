"""Every view printed for people (Rich tables, progress bars, status words) and the one JSON document for machines;
stages return records and never print."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from compiler.core.text import gate_figure, human_size, printable

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from compiler.core.records import BuildReport, CalibrationResult, CheckReport
    from compiler.inspect.doctor import DoctorReport
    from compiler.inspect.report import InspectReport
    from compiler.inspect.skus import SkuListing
    from compiler.pipeline.plan import ReleasePlan


class _LazyConsole:
    """A Rich console created on first use: `--json` runs (CI) never pay Rich's import time."""

    def __init__(self, **options: Any) -> None:
        self._options, self._console = options, None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
            if not self._console.is_terminal and "COLUMNS" not in os.environ:
                self._console.width = 512  # a CI log: Rich's 80 columns would fold paths and errors mid-word
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        """Rich's print, each string made :func:`printable` first: what we print is one line per string, and a name
        from an input file (a model's input, a profile, a path) cannot add lines or reach the terminal as escape
        codes. Tables escape their cells themselves (:func:`table`)."""
        self.get().print(*(printable(o) if isinstance(o, str) else o for o in objects), **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


console = _LazyConsole(soft_wrap=False, highlight=False)
err_console = _LazyConsole(stderr=True)


def version_line() -> str:
    """``compile 0.1.0 (tensorrt-rtx 1.7.1.116, tensorrt not installed)``: the tool and the TensorRT editions found,
    without importing any of them."""
    from compiler import version
    from compiler.backends import installed_versions

    editions = ", ".join(f"{name} {found or 'not installed'}" for name, found in installed_versions().items())
    return f"compile {version()} ({editions})"


OUTPUT_FORMAT = 1
"""The ``format_version`` of every ``--json`` output that has none of its own (records carry theirs); the schemas
are compiler/schemas/*-output.schema.json (compiler.cli.schemas)."""


def write_stdout(text: str) -> None:
    """A document for machines (YAML, JSON) to stdout as it is, every byte (see :func:`emit_json`)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stdout (main() called from Python)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    unwritten = memoryview(text.encode())
    try:
        while unwritten:
            unwritten = unwritten[os.write(fd, unwritten) :]
    except OSError as exc:  # named, for the error line
        raise OSError(exc.errno, exc.strerror, "standard output") from None


def emit_json(result: BaseModel | dict[str, Any] | list[Any], *, versioned: bool = True) -> None:
    """Write the document straight to stdout's file until every byte is out: Python's buffered stdout drops
    the rest of a short write without a word (a disk filling up under `> report.json`), which would leave a
    cut-short document behind a successful exit. An object gets ``format_version`` first unless it has its own or
    is a format of someone else's (``versioned=False``: an in-toto statement, a GitHub matrix)."""
    import json

    data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
    if versioned and isinstance(data, dict) and "format_version" not in data:
        data = {"format_version": OUTPUT_FORMAT, **data}
    write_stdout(json.dumps(data, indent=2) + "\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    view = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        view.add_column(column, overflow="fold")
    for row in rows:
        view.add_row(
            *(cell if isinstance(cell, Text) else escape(printable("" if cell is None else cell)) for cell in row)
        )
    return view


def status_text(status: str) -> Text:
    from rich.text import Text

    styles = {"ok": "green", "failed": "red", "skipped": "yellow", "cancelled": "magenta"}
    return Text(status, style=styles.get(status, "white"))


@contextmanager
def build_progress(jobs) -> Iterator:
    """One progress row per build, fed by TensorRT's progress monitor: (job, phase, done, total)."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from compiler.cli.heartbeat import Heartbeat

    columns = (
        TextColumn("{task.description:<22}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[phase]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    console = err_console.get()
    # Not a terminal (a CI log): no bars, which would show only at the end, but a line as each target ends and a
    # heartbeat line while any builds, so a long matrix shows signs of life
    heartbeat = Heartbeat(console, "steps")
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bars:
        tasks = [bars.add_task(f"{job.sku} {job.precision}", total=None, phase="waiting") for job in jobs]

        def update(index: int, phase: str, done: int, total: int) -> None:
            bars.update(tasks[index], completed=done, total=total or None, phase=phase)
            ended = phase.split(" ")[0] in ("ok", "failed", "cancelled")
            if not console.is_terminal and ended:
                console.print(f"{jobs[index].sku} {jobs[index].precision}: {phase}", highlight=False)
            if phase != "waiting":
                heartbeat.note(f"{jobs[index].sku} {jobs[index].precision}", total or 1 if ended else done, total)

        try:
            yield update
        finally:
            heartbeat.stop()


@contextmanager
def phase_progress(unit: str = "samples") -> Iterator:
    """One progress row per phase (calibrate, held-out; upload), added when the phase first reports (phase, done,
    total), counting ``unit``.

    The display starts with the first report: a run that fails before (or reuses earlier work) prints nothing.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from compiler.cli.heartbeat import Heartbeat

    columns = (
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    console = err_console.get()
    bars = Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
    heartbeat = Heartbeat(console, unit)
    tasks: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        if not tasks:
            bars.start()
        if phase not in tasks:
            tasks[phase] = bars.add_task(phase, total=total, rate="")
        speed = bars.tasks[tasks[phase]].speed if phase in tasks else None
        bars.update(tasks[phase], completed=done, total=total, rate=f"{speed:.1f}/s" if speed else "")
        heartbeat.note(phase, done, total)

    try:
        yield update
    finally:
        heartbeat.stop()
        if tasks:
            bars.stop()


def check_report(report: CheckReport) -> None:
    """A table per section (the model, then each engine) and the verdict."""
    from rich.markup import escape
    from rich.text import Text

    from compiler.check.report import EVIDENCE_SHOWN, sections

    for title, checks in sections(report):
        rows = []
        for c in checks:
            evidence = "\n".join(
                [c.summary, *c.evidence[:EVIDENCE_SHOWN]]
                + (
                    [f"... {len(c.evidence) - EVIDENCE_SHOWN} more in check.json"]
                    if len(c.evidence) > EVIDENCE_SHOWN
                    else []
                )
            )
            rows.append([c.name, status_text(c.status.value), Text("\n".join(map(printable, evidence.split("\n"))))])
        console.print(table(title, ["check", "status", "evidence"], rows))
    verdict = "[green]passed[/green]" if report.passed else "[red]FAILED[/red]"
    when = (
        "reused: check.json was made from these same inputs (--no-reuse checks again)"
        if report.reused
        else f"{report.seconds:.1f} s"
    )
    console.print(f"{verdict}: {escape(printable(report.summary))} ({when})")


def doctor(report: DoctorReport) -> None:
    """Backends, GPUs and the ONNX tool versions."""
    console.print(f"compile {report.compile_version} on Python {report.python} ({report.platform})")
    console.print(
        table(
            "Backends",
            ["backend", "installed", "version", "detail"],
            [[b.name, "yes" if b.installed else "no", b.version, b.detail] for b in report.backends],
        )
    )
    gpu_rows = [[g.index, g.name, g.compute_capability, f"{g.memory_gb:.0f} GiB"] for g in report.gpus]
    console.print(
        table(
            "GPUs",
            ["#", "name", "compute capability", "memory"],
            gpu_rows or [["-", f"none ({report.gpu_detail})", "", ""]],
        )
    )
    console.print(
        f"onnx {report.onnx}, onnxruntime {report.onnxruntime} "
        f"(providers: {', '.join(report.onnxruntime_providers)}), polygraphy {report.polygraphy}"
    )
    from rich.markup import escape

    console.print(f"modelopt (--quantizer modelopt): {escape(report.modelopt)}")
    driver = f"{report.driver} (CUDA {report.cuda})" if report.driver else "none"
    console.print(f"NVIDIA driver: {driver}", markup=False, highlight=False)
    if report.cache is not None:
        count = f"{report.cache.files}{'' if report.cache.complete else '+'} files"
        size = human_size(report.cache.size_bytes)
        console.print(f"cache: {report.cache.path} ({count}, {size})", markup=False, highlight=False)
    console.print(
        table(
            "Stores (probed read-only)",
            ["what", "uri", "status", "detail"],
            [[s.what, s.uri or "-", s.status, s.detail] for s in report.stores],
        )
    )


def sku_catalog(listing: SkuListing) -> None:
    """The SKUs, with where each came from when a --skus file added some."""
    added = any(row.source != "bundled" for row in listing.skus)
    rows = []
    for r in listing.skus:
        host = "any" if r.backend == "tensorrt-rtx" else r.platform  # a datacenter build runs on the GPU's host
        row = [r.name, r.compute_capability, r.backend, ", ".join(r.precisions), f"{r.memory_gb:g} GB", host]
        rows.append([*row, r.description] + [r.source] * added)
    columns = ["sku", "compute capability", "backend", "precisions", "memory", "host", "description"]
    title = "GPU SKUs (compile build --sku NAME; names match in any case)"
    console.print(table(title, columns + ["from"] * added, rows))


def inspection(report: InspectReport) -> None:
    """The model, TensorRT's view of it, and the profiles' verdict."""
    from rich.markup import escape

    from compiler.core.profiles import format_dims  # not at start-up: pydantic models and YAML

    m = report.model
    opsets = ", ".join(f"{domain} {version}" for domain, version in m.opsets.items())
    console.print(f"[bold]{escape(m.path)}[/bold]  {human_size(m.size_bytes)}  sha256 {m.sha256[:12]}")
    console.print(
        escape(
            f"IR {m.ir_version}, opsets {opsets}, producer {m.producer or '-'}, {m.node_count} nodes, "
            f"{m.parameter_count:,} parameters ({human_size(m.parameter_bytes)})"
        )
    )
    if m.custom_domains:
        console.print(escape(f"custom domains: {', '.join(m.custom_domains)}"))
    if m.control_flow:
        console.print(escape(f"control flow: {', '.join(m.control_flow)}"))
    if m.metadata:
        console.print(escape("metadata: " + ", ".join(f"{key}={value}" for key, value in m.metadata.items())))

    console.print(
        table(
            "Inputs and outputs",
            ["kind", "name", "dtype", "shape"],
            [["input", t.name, t.dtype, format_dims(t.shape)] for t in m.inputs]
            + [["output", t.name, t.dtype, format_dims(t.shape)] for t in m.outputs],
        )
    )
    console.print(table("Operators", ["op", "count"], [[op, n] for op, n in m.op_counts.items()]))
    trt = report.tensorrt
    if trt.status.status != "ok":
        console.print(f"TensorRT: {status_text(trt.status.status)} {escape(trt.status.detail)}")
    else:
        verdict = "[green]fully supported[/green]" if trt.supported else "[red]not fully supported[/red]"
        reused = {"hit": "the local cache", "remote": "the remote cache"}.get(
            report.cache.source if report.cache else ""
        )
        parsed = f"parsed in {trt.parse_seconds:.2f} s"
        parsed = f"reused from {reused} ({parsed} when it was made)" if reused else parsed
        console.print(f"TensorRT ({escape(f'{trt.backend} {trt.version}')}): {verdict}, {parsed}")
        if trt.supported and m.control_flow:
            console.print(
                "[yellow]control flow[/yellow]: the parser takes If/Loop/Scan, but the builder may still refuse "
                "them (TensorRT-RTX 1.7 asserts on an LSTM inside an If): prove it with --build-check"
            )
        console.print(
            table(
                "TensorRT partitions",
                ["nodes", "count", "inputs", "outputs"],
                [
                    [
                        ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in p.nodes),
                        p.node_count,
                        ", ".join(p.inputs),
                        ", ".join(p.outputs),
                    ]
                    for p in trt.partitions
                ],
            )
        )
        if trt.unsupported:
            console.print(
                table(
                    "Unsupported nodes",
                    ["#", "name", "op", "domain", "reason"],
                    [[u.index, u.name, u.op, u.domain, u.reason] for u in trt.unsupported],
                )
            )
    if trt.build_check is not None:
        console.print(f"build check: {status_text(trt.build_check.status)} {escape(trt.build_check.detail)}")
    if report.profiles is not None:
        p = report.profiles
        console.print(
            escape(f"profiles {', '.join(p.names)} from {p.file}: ")
            + ("[green]valid[/green]" if p.valid else "[red]invalid[/red]")
        )
        for error in p.errors:
            console.print(escape(f"  - {error}"), highlight=False)


def builds(report: BuildReport) -> None:
    console.print(
        table(
            "Builds",
            ["sku", "precision", "status", "cache", "seconds", "folder / error"],
            [
                [
                    t.sku,
                    t.precision,
                    status_text(t.status),
                    t.cache.source if t.cache else "hit" if t.cache_hit else "miss",
                    f"{t.seconds:.2f}",
                    t.errors[0] if t.errors else t.path,
                ]
                for t in report.targets
            ],
        )
    )


def kind_figure(output) -> str:
    """What an output's kind is judged by beside cosine and SQNR: top-1 agreement, detection recall/precision, IoU."""
    if output.kind == "detection":
        if output.recall is None:
            return f"no FP32 detections ({output.reference_detections})"
        return f"recall {output.recall:.2%}, precision {output.precision:.2%} of {output.reference_detections}"
    if output.iou is not None:
        return f"IoU {output.iou:.2%}"
    return "-" if output.top1_agreement is None else f"{output.top1_agreement:.2%}"


def calibration(result: CalibrationResult) -> None:
    """What was calibrated, its held-out accuracy against FP32, the FP16 range verdict and the gates."""
    from rich.markup import escape

    from compiler.core.progress import phase_summary
    from compiler.data.agreement import inconclusive

    what = f"{result.precision} {result.method}" if result.method else result.precision
    console.print(
        f"[bold]{escape(str(result.out))}[/bold]  {what}  {result.samples} calibration + "
        f"{result.holdout_samples} held-out samples  "
        + ("reused (same model, data and options)" if result.reused else phase_summary(result.seconds, result.phases))
    )
    console.print(
        table(
            "Held-out accuracy against FP32",
            ["output", "kind", "cosine mean", "cosine 5 %", "SQNR dB", "max abs error", "top-1 / recall / IoU"],
            [
                [
                    o.name,
                    o.kind,
                    f"{o.cosine_mean:.5f}",
                    "-" if o.cosine_low is None else f"{o.cosine_low:.5f}",
                    "-" if o.sqnr_db is None else f"{o.sqnr_db:.1f}",
                    f"{o.max_abs_error:.4g}",
                    kind_figure(o),
                ]
                for o in result.report.outputs
            ],
        )
    )
    for o in result.report.outputs:
        if o.note:
            console.print(f"[yellow]note:[/yellow] {escape(o.note)}")
    if result.report.sensitivity:
        console.print(
            table(
                "Most sensitive quantized nodes (output SQNR when quantized alone; all in report.json)",
                ["rank", "node", "op", "SQNR dB", "quantized input"],
                [
                    [str(s["rank"]), s["exclude"], s["op"], f"{s['sqnr_db']:.1f}", ", ".join(s["tensors"])]
                    for s in result.report.sensitivity[:5]
                ],
            )
        )
    if result.report.fp16_range is not None:
        console.print(f"FP16 range: {escape(result.report.fp16_range['summary'])}")
        for line in result.report.fp16_range["evidence"][:5]:
            console.print(f"  {escape(line)}")
    if result.report.coverage:
        console.print(f"what the comparison could see: {escape(result.report.coverage)}")
    _placement(result)
    if result.gates:
        console.print(
            table(
                "Gates",
                ["gate", "output", "value", "threshold", "status"],
                [
                    [
                        g.name,
                        g.output,
                        gate_figure(g.name, g.value),
                        gate_figure(g.name, g.threshold),
                        "ok" if g.passed else "not enough data" if inconclusive(g) else "FAILED",
                    ]
                    for g in result.gates
                ],
            )
        )


def _placement(result: CalibrationResult) -> None:
    """What the build proof said of the Q/DQ model, what it kept in float, and what a fallback cost."""
    from rich.markup import escape

    if result.build_proof:
        console.print(
            f"Q/DQ model {escape(result.build_proof)}"
            + (
                f": {escape('; '.join(result.reformats.layers))}"
                if result.reformats and result.reformats.layers
                else ""
            )
        )
    proven_float = [e["node"] for e in result.exclusions if e.get("reason") == "build-proof"]
    if proven_float:
        console.print(
            f"kept in float: {escape(', '.join(proven_float[:5]))}"
            + (f" and {len(proven_float) - 5} more" if len(proven_float) > 5 else "")
            + f" ({len(proven_float)} node(s) the build computed in float despite their {result.precision} Q/DQ)"
        )
    if result.fallback and result.fallback.get("needed"):
        console.print(escape(fallback_cost(result.precision, result.fallback)))


def fallback_cost(precision: str, cost: dict) -> str:
    """``--fallback auto``'s cost in one line: what it kept in float, the work left low, the reformat kernels."""
    if "kept_fp32" in cost:
        return (
            f"fallback: {len(cost['kept_fp32'])} node(s) kept in FP32, {cost['evaluations']} evaluations, "
            f"{cost['seconds']:.1f} s"
        )
    work = cost.get("low_precision_work")
    reformats = cost.get("reformats")
    return (
        f"fallback: {len(cost['nodes_kept'])} node(s) kept in float ({cost['regions_kept']} of "
        f"{cost['regions']} regions), "
        + ("" if work is None else f"{work:.0%} of Conv/MatMul/Gemm work in {precision}, ")
        + (
            ""
            if reformats is None
            else f"{reformats} precision-boundary reformat kernel(s) (plain "
            f"{precision}: {cost.get('plain_reformats')}), "
        )
        + f"{cost['evaluations']} evaluations, {cost['seconds']:.1f} s"
    )


def release_plan(plan: ReleasePlan) -> None:
    console.print(
        table(
            f"{plan.name}@{plan.version} -> {printable(plan.store)}",
            ["job (sku)", "backend", "precisions", "runs on"],
            [[j.sku, j.backend, ", ".join(j.precisions), ", ".join(j.runs_on)] for j in plan.jobs],
        )
    )


def stage_line(stage: str, status: str, detail: str) -> None:
    """One line per release stage as it ends, for a CI log."""
    from rich.markup import escape

    console.print(f"{stage:<10} ", status_text(status), f" {escape(printable(detail))}", sep="", highlight=False)


def warnings(lines: list[str]) -> None:
    """Each line as one ``warning:`` line on stderr (stdout stays the result, or the JSON document)."""
    for line in lines:
        sys.stderr.write(f"warning: {printable(line)}\n")


def cache_outcome(what: str, outcome, explain: bool) -> None:
    """A cached result's warning (a damaged remote entry) on stderr, and with --explain where it came from."""
    if outcome is None:
        return
    if outcome.warning:
        warnings([outcome.warning])
    if explain:
        console.print(f"{outcome.source} {what}" + (f": {printable(outcome.reason)}" if outcome.reason else ""))


def collected(report) -> None:
    """What compile gc removed (or would), and what it kept and why."""
    verb = "would remove" if report.dry_run else "removed"
    if hasattr(report, "versions"):
        console.print(
            table(
                f"Versions in {printable(report.store)}",
                ["release", "fate", "why", "size"],
                [[v.release, "kept" if v.kept else verb, v.why, human_size(v.size_bytes)] for v in report.versions]
                or [["-", "-", "no releases", "-"]],
            )
        )
        what = f"{report.removed_versions} versions"
    else:
        what = f"{len(report.removed_entries)} of {report.entries} cache entries"
    console.print(
        f"{verb} {what} and {report.removed_blobs} blobs ({human_size(report.freed_bytes)}); "
        f"{report.marked_blobs} unreferenced blobs left for a later gc (grace); {report.requests} requests, "
        f"{report.seconds:.1f} s" + (f"; {report.blob_note}" if report.blob_note else "")
    )
