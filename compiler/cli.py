"""The `compile` command: a thin Typer layer over the typed Python API.

Every command has ``--json``; every expected failure becomes one ``error:`` line on
stderr and the contract's exit code (tracebacks only with ``--debug``).
"""

import os
import re
import signal
import sys
import threading
import traceback
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from compiler.errors import (
    STOP_SIGNALS,
    CheckFailed,
    CompileError,
    ExitCode,
    Interrupted,
    InvalidInput,
    note_stop,
    stop_received,
)
from compiler.output import (
    build_progress,
    console,
    emit_json,
    gate_figure,
    human_size,
    phase_progress,
    printable,
    status_text,
    table,
)
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used

FLAG = ""
"""The metavar of an on/off flag: nothing, where Typer would print ``<bool>`` as if it took a value."""


class _PlainHelp:
    """Help that reads like a CLI's: ``compile build [OPTIONS] MODEL``, not Typer's ``{MODEL}``, and ``--help``
    without a ``<bool>`` as if it took a value."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{(.*)\}(\.\.\.)?$", r"\1\2", piece) for piece in super().collect_usage_pieces(ctx)]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = FLAG
        return option


class _Command(_PlainHelp, TyperCommand):
    pass


class _Group(_PlainHelp, TyperGroup):
    pass


app = typer.Typer(
    name="compile",
    cls=_Group,
    help="Turn ONNX models into TensorRT engines: inspect, calibrate, build, check and release them.",
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_state = {"debug": False}

INPUTS, TARGETS, CALIBRATION, GATES, CACHE, STORE, OUTPUT = ("Inputs", "Targets", "Calibration", "Gates", "Cache",
                                                             "Store", "Output")
"""Help panels, in the order a command's options are read."""

JsonOption = Annotated[bool, typer.Option("--json", metavar=FLAG, rich_help_panel=OUTPUT,
                                          help="Print one JSON document on stdout and nothing else.")]
ModelArgument = Annotated[Path, typer.Argument(metavar="MODEL", help="The ONNX model (FP32).", show_default=False)]
StoreOption = Annotated[str, typer.Option(metavar="URI", envvar="COMPILE_STORE", rich_help_panel=STORE,
                                          help="A folder, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY "
                                               "(oci+http:// for a plain-HTTP registry); default $COMPILE_STORE "
                                               "or ./artifacts.")]
ReleaseArgument = Annotated[str, typer.Argument(metavar="NAME@VERSION|NAME@CHANNEL", show_default=False,
                                                help="The release, by version or by channel.")]


def _print_version(value: bool) -> None:
    if value:
        from compiler import version
        from compiler.backends import installed_versions

        editions = ", ".join(f"{name} {found or 'not installed'}" for name, found in installed_versions().items())
        console.print(f"compile {version()} ({editions})")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _global(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", metavar=FLAG, help="Show Python tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", metavar=FLAG, is_eager=True, callback=_print_version,
                                          help="Print compile's version and the TensorRT editions found.")] = False,
) -> None:
    _state["debug"] = debug
    if ctx.invoked_subcommand is None:  # `compile` alone: the help, and success
        console.print(ctx.get_help())
        raise typer.Exit()


def _example(*commands: str) -> str:
    """A command's help epilog: how it is typically run."""
    return "Examples:\n\n" + "\n\n".join(f"  {command}" for command in commands)


@app.command(cls=_Command, epilog=_example("compile doctor", "compile doctor --json"))
def doctor(json: JsonOption = False) -> None:
    """Backends and versions, GPUs and compute capabilities, onnxruntime providers."""
    from compiler.doctor import diagnose

    report = diagnose()
    if json:
        return emit_json(report)
    console.print(f"compile {report.compile_version} on Python {report.python} ({report.platform})")
    console.print(table("Backends", ["backend", "installed", "version", "detail"], [
        [b.name, "yes" if b.installed else "no", b.version, b.detail] for b in report.backends
    ]))
    gpu_rows = [[g.index, g.name, g.compute_capability, f"{g.memory_gb:.0f} GiB"] for g in report.gpus]
    console.print(table("GPUs", ["#", "name", "compute capability", "memory"],
                        gpu_rows or [["-", f"none ({report.gpu_detail})", "", ""]]))
    console.print(f"onnx {report.onnx}, onnxruntime {report.onnxruntime} "
                  f"(providers: {', '.join(report.onnxruntime_providers)}), polygraphy {report.polygraphy}")


@app.command(cls=_Command, epilog=_example("compile inspect model.onnx --profiles profiles.yaml",
                             "compile inspect model.onnx --profiles profiles.yaml --build-check --sku rtx-4090"))
def inspect(
    model: ModelArgument,
    profiles: Annotated[Path | None, typer.Option(metavar="FILE", rich_help_panel=INPUTS,
                                                  help="Shape profiles YAML to validate against the model.")] = None,
    backend: Annotated[str | None, typer.Option(metavar="NAME", rich_help_panel=TARGETS,
                                                help="tensorrt-rtx or tensorrt (default: the one installed).")] = None,
    build_check: Annotated[bool, typer.Option("--build-check", metavar=FLAG, rich_help_panel=TARGETS,
                                              help="Prove support with a real build.")] = False,
    sku: Annotated[str | None, typer.Option(metavar="SKU", rich_help_panel=TARGETS,
                                            help="SKU for --build-check (default rtx-4090).")] = None,
    json: JsonOption = False,
) -> None:
    """Model summary, TensorRT partitions and unsupported nodes, profile validation."""
    from compiler.inspection import inspect_model

    if sku is not None and not build_check:
        raise InvalidInput(f"--sku {sku} is only used with --build-check; add --build-check or drop --sku")
    report = inspect_model(model, profiles, backend, (sku or "rtx-4090") if build_check else None)
    if json:
        emit_json(report)
    else:
        _render_inspect(report)
    if report.problem is not None:
        raise report.problem


def _render_inspect(report) -> None:
    from rich.markup import escape

    from compiler.profiles import format_dims  # not at start-up: pydantic models and YAML every command would pay

    m = report.model
    opsets = ", ".join(f"{domain} {version}" for domain, version in m.opsets.items())
    console.print(f"[bold]{escape(m.path)}[/bold]  {human_size(m.size_bytes)}  sha256 {m.sha256[:12]}")
    console.print(escape(f"IR {m.ir_version}, opsets {opsets}, producer {m.producer or '-'}, {m.node_count} nodes, "
                         f"{m.parameter_count:,} parameters ({human_size(m.parameter_bytes)})"))
    if m.custom_domains:
        console.print(escape(f"custom domains: {', '.join(m.custom_domains)}"))
    if m.control_flow:
        console.print(escape(f"control flow: {', '.join(m.control_flow)}"))
    if m.metadata:
        console.print(escape("metadata: " + ", ".join(f"{key}={value}" for key, value in m.metadata.items())))

    console.print(table("Inputs and outputs", ["kind", "name", "dtype", "shape"],
                        [["input", t.name, t.dtype, format_dims(t.shape)] for t in m.inputs]
                        + [["output", t.name, t.dtype, format_dims(t.shape)] for t in m.outputs]))
    console.print(table("Operators", ["op", "count"], [[op, n] for op, n in m.op_counts.items()]))
    trt = report.tensorrt
    if trt.status.status != "ok":
        console.print(f"TensorRT: {status_text(trt.status.status)} {escape(trt.status.detail)}")
    else:
        verdict = "[green]fully supported[/green]" if trt.supported else "[red]not fully supported[/red]"
        console.print(f"TensorRT ({escape(f'{trt.backend} {trt.version}')}): {verdict}, "
                      f"parsed in {trt.parse_seconds:.2f} s")
        console.print(table("TensorRT partitions", ["nodes", "count", "inputs", "outputs"], [
            [", ".join(f"{a}-{b}" if a != b else str(a) for a, b in p.nodes), p.node_count,
             ", ".join(p.inputs), ", ".join(p.outputs)] for p in trt.partitions
        ]))
        if trt.unsupported:
            console.print(table("Unsupported nodes", ["#", "name", "op", "domain", "reason"], [
                [u.index, u.name, u.op, u.domain, u.reason] for u in trt.unsupported
            ]))
    if trt.build_check is not None:
        console.print(f"build check: {status_text(trt.build_check.status)} {escape(trt.build_check.detail)}")
    if report.profiles is not None:
        p = report.profiles
        console.print(escape(f"profiles {', '.join(p.names)} from {p.file}: ")
                      + ("[green]valid[/green]" if p.valid else "[red]invalid[/red]"))
        for error in p.errors:
            console.print(escape(f"  - {error}"), highlight=False)


@app.command(cls=_Command, epilog=_example(
    "compile build model.onnx --profiles profiles.yaml --sku rtx-4090 --precision fp16 --out engines",
    "compile build model.onnx --profiles profiles.yaml --sku rtx-4090 --sku rtx-3090 --precision int8 "
    "--data data.npz --out engines --jobs 2"))
def build(
    model: ModelArgument,
    *,
    profiles: Annotated[Path, typer.Option(metavar="FILE", rich_help_panel=INPUTS, show_default=False,
                                           help="Shape profiles YAML; every profile goes into each engine.")],
    sku: Annotated[list[str], typer.Option(metavar="SKU", rich_help_panel=TARGETS, show_default=False,
                                           help="GPU SKU from profiles/skus.yaml; repeat for several.")],
    precision: Annotated[list[str], typer.Option(metavar="P", rich_help_panel=TARGETS, show_default=False,
                                                 help="fp32, fp16, int8 or fp8; repeat for several.")],
    calibration: Annotated[Path | None, typer.Option(metavar="DIR", rich_help_panel=CALIBRATION,
                                                     help="Output folder of compile calibrate (int8/fp8).")] = None,
    data: Annotated[Path | None, typer.Option(metavar="DATA", rich_help_panel=CALIBRATION,
                                              help="Calibration data (.npz or image folder) to calibrate int8/fp8 "
                                                   "now (kept in the cache) when --calibration is not given.")] = None,
    method: Annotated[str | None, typer.Option(metavar="METHOD", rich_help_panel=CALIBRATION,
                                               help="Calibration method with --data: minmax (the default), "
                                                    "entropy, percentile.")] = None,
    jobs: Annotated[int, typer.Option(metavar="N", rich_help_panel=TARGETS,
                                      help="Builds at once, each in a process of its own (1-64).")] = 1,
    backend: Annotated[str | None, typer.Option(metavar="NAME", rich_help_panel=TARGETS,
                                                help="Override the SKU's backend (tensorrt-rtx, tensorrt).")] = None,
    workspace_mb: Annotated[int | None, typer.Option(metavar="MIB", rich_help_panel=TARGETS,
                                                     help="Builder workspace limit in MiB (1 to 1048576).")] = None,
    optimization_level: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=TARGETS,
                                                           help="Builder optimization level (0-5).")] = None,
    cache_dir: Annotated[Path | None, typer.Option(metavar="DIR", rich_help_panel=CACHE,
                                                   help="Build cache (default $COMPILE_CACHE_DIR or "
                                                        "~/.cache/compile).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", metavar=FLAG, rich_help_panel=CACHE,
                                           help="Build everything anew.")] = False,
    out: Annotated[Path, typer.Option(metavar="DIR", rich_help_panel=OUTPUT, show_default=False,
                                      help="Output folder: DIR/<sku>/<precision>/engine.plan.")],
    json: JsonOption = False,
) -> None:
    """One engine per SKU x precision under DIR/<sku>/<precision>/, with a content-addressed cache."""
    from compiler.build import BuildOptions, execute_builds, plan_builds

    options = BuildOptions(calibration=calibration, data=data, method=method, cache_dir=cache_dir,
                           use_cache=not no_cache, backend=backend, workspace_mb=workspace_mb,
                           optimization_level=optimization_level, jobs=jobs)
    with nullcontext() if json else phase_progress() as progress:  # shows only if --data calibrates
        planned = plan_builds(model, profiles, sku, precision, out, options, calibration_progress=progress)
    if json:
        report = execute_builds(planned, model, out, options.jobs)
        emit_json(report)
    else:
        with build_progress(planned) as progress:
            report = execute_builds(planned, model, out, options.jobs, progress)
        console.print(table("Builds", ["sku", "precision", "status", "cache", "seconds", "folder / error"], [
            [t.sku, t.precision, status_text(t.status), "hit" if t.cache_hit else "miss", f"{t.seconds:.2f}",
             t.errors[0] if t.errors else t.path] for t in report.targets
        ]))
    for target in report.targets:
        for warning in target.warnings:
            sys.stderr.write(f"warning: {target.sku}/{target.precision}: {printable(warning)}\n")
    if report.failed:
        first = report.failed[0]
        raise CheckFailed(f"{len(report.failed)} of {len(report.targets)} builds failed; {first.sku}/{first.precision}:"
                          f" {first.errors[0] if first.errors else first.status} (log: {first.path}/build.log)")


@app.command(cls=_Command, epilog=_example(
    "compile calibrate model.onnx --data data.npz --precision int8 --out calibrated",
    "compile calibrate model.onnx --data images/ --method entropy --min-cosine 0.99 "
                             "--out calibrated"))
def calibrate(
    model: ModelArgument,
    *,
    data: Annotated[Path, typer.Option(metavar="DATA", rich_help_panel=INPUTS, show_default=False,
                                       help=".npz (one array per input, samples on axis 0) or an image folder "
                                            "with preprocess.yaml.")],
    precision: Annotated[str, typer.Option(metavar="P", rich_help_panel=CALIBRATION,
                                           help="int8, fp8 (Q/DQ model) or fp16 (converted model).")] = "int8",
    method: Annotated[str, typer.Option(metavar="METHOD", rich_help_panel=CALIBRATION,
                                        help="Range method: minmax, entropy or percentile.")] = "minmax",
    samples: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=CALIBRATION,
                                                help="Cap on calibration samples.")] = None,
    batch_size: Annotated[int, typer.Option(metavar="N", rich_help_panel=CALIBRATION,
                                            help="Samples per onnxruntime run.")] = 32,
    holdout: Annotated[float, typer.Option(metavar="X", rich_help_panel=CALIBRATION,
                                           help="Held-out samples for the accuracy report: a fraction (< 1) "
                                                "or a count.")] = 0.2,
    seed: Annotated[int, typer.Option(metavar="N", rich_help_panel=CALIBRATION,
                                      help="Seed of the calibration / held-out split.")] = 0,
    percentile: Annotated[float, typer.Option(metavar="X", rich_help_panel=CALIBRATION,
                                              help="Percentile kept by --method percentile.")] = 99.999,
    num_bins: Annotated[int, typer.Option(metavar="N", rich_help_panel=CALIBRATION,
                                          help="Histogram bins for entropy and percentile.")] = 2048,
    chunk_mb: Annotated[int, typer.Option(metavar="MIB", rich_help_panel=CALIBRATION,
                                          help="Activation memory per onnxruntime chunk (MiB).")] = 256,
    min_cosine: Annotated[float | None, typer.Option(metavar="X", rich_help_panel=GATES,
                                                     help="Gate: mean cosine similarity of every output.")] = None,
    min_top1: Annotated[float | None, typer.Option(metavar="X", rich_help_panel=GATES,
                                                   help="Gate: top-1 agreement of class-score outputs (a "
                                                        "fraction, 0.98 for 98 %).")] = None,
    max_abs_error: Annotated[float | None, typer.Option(metavar="X", rich_help_panel=GATES,
                                                        help="Gate: max absolute error of every output.")] = None,
    out: Annotated[Path, typer.Option(metavar="DIR", rich_help_panel=OUTPUT, show_default=False,
                                      help="Output folder: model.onnx, calibration.json, calibration.cache, "
                                           "report.json.")],
    no_reuse: Annotated[bool, typer.Option("--no-reuse", metavar=FLAG, rich_help_panel=OUTPUT,
                                           help="Recompute even if DIR holds this result.")] = False,
    json: JsonOption = False,
) -> None:
    """Quantized (int8/fp8 Q/DQ) or converted (fp16) model, ranges, TensorRT calibration cache, accuracy report."""
    from rich.markup import escape

    from calibration import calibrate as run_calibration
    from compiler.options import CalibrationOptions

    options = CalibrationOptions(precision=precision, method=method, samples=samples, batch_size=batch_size,
                                 holdout=holdout, seed=seed, percentile=percentile, num_bins=num_bins,
                                 chunk_mb=chunk_mb, min_cosine=min_cosine, min_top1=min_top1,
                                 max_abs_error=max_abs_error, reuse=not no_reuse)
    with phase_progress() as update:
        result = run_calibration(model, data, out, options, progress=update)
    if json:
        emit_json(result)
    else:
        what = f"{result.precision} {result.method}" if result.method else result.precision
        console.print(f"[bold]{escape(str(result.out))}[/bold]  {what}  {result.samples} calibration + "
                      f"{result.holdout_samples} held-out samples  "
                      + ("reused (same model, data and options)" if result.reused else f"{result.seconds:.1f} s"))
        console.print(table("Held-out accuracy against FP32", ["output", "cosine mean", "cosine min",
                                                               "max abs error", "top-1 agreement"], [
            [o.name, f"{o.cosine_mean:.5f}", f"{o.cosine_min:.5f}", f"{o.max_abs_error:.4g}",
             "-" if o.top1_agreement is None else f"{o.top1_agreement:.2%}"] for o in result.report.outputs
        ]))
        if result.report.fp16_range is not None:
            console.print(f"FP16 range: {escape(result.report.fp16_range['summary'])}")
            for line in result.report.fp16_range["evidence"][:5]:
                console.print(f"  {escape(line)}")
        if result.report.coverage:
            console.print(f"what the comparison could see: {escape(result.report.coverage)}")
        if result.gates:
            console.print(table("Gates", ["gate", "output", "value", "threshold", "status"], [
                [g.name, g.output, gate_figure(g.name, g.value), gate_figure(g.name, g.threshold),
                 "ok" if g.passed else "FAILED"] for g in result.gates
            ]))
    failed = [g for g in result.gates if not g.passed]
    if failed:
        first = failed[0]
        raise CheckFailed(f"{len(failed)} gate(s) failed; {first.name} on output '{first.output}': "
                          f"{gate_figure(first.name, first.value)} vs threshold "
                          f"{gate_figure(first.name, first.threshold)} (report: {Path(result.out) / 'report.json'})")


def _per_output(flag: str, values: list[str] | None, number: bool = True) -> dict[str, Any]:
    """``--atol 0.1`` (every output) and ``--atol logits=0.5`` (one output), repeated: output name -> value."""
    chosen: dict[str, Any] = {}
    for value in values or []:
        name, _, given = value.rpartition("=")
        if number:
            try:
                chosen[name] = float(given)
            except ValueError:
                raise InvalidInput(f"{flag} {value}: give a number, or OUTPUT=NUMBER for one output") from None
        else:
            chosen[name] = given
    return chosen


def _threshold(what: str) -> Any:
    return typer.Option(metavar="[OUTPUT=]X", rich_help_panel=GATES, show_default=False,
                        help=f"Gate: {what}; X for every output or OUTPUT=X for one, repeated.")


@app.command(cls=_Command, epilog=_example(
    "compile check engines --data data.npz",
    "compile check engines --data images/ --samples 256 --min-cosine logits=0.995 --rules rules.yaml --json"))
def check(
    build_dir: Annotated[Path, typer.Argument(metavar="BUILD_DIR", show_default=False,
                                              help="The --out folder of compile build.")],
    *,
    data: Annotated[Path | None, typer.Option(metavar="DATA", rich_help_panel=INPUTS,
                                              help="Samples for accuracy and FP16 range: .npz or an image folder "
                                                   "with preprocess.yaml.")] = None,
    samples: Annotated[int, typer.Option(metavar="N", rich_help_panel=INPUTS,
                                         help="Use the first N samples of DATA.")] = 64,
    batch_size: Annotated[int, typer.Option(metavar="N", rich_help_panel=INPUTS,
                                            help="Samples per onnxruntime run.")] = 8,
    model: Annotated[Path | None, typer.Option(metavar="FILE", rich_help_panel=INPUTS,
                                               help="The FP32 model, if not where build.json says.")] = None,
    profiles: Annotated[Path | None, typer.Option(metavar="FILE", rich_help_panel=INPUTS,
                                                  help="Shape profiles to size partition boundaries with when no "
                                                       "engine was built.")] = None,
    rules: Annotated[Path | None, typer.Option(metavar="FILE", rich_help_panel=INPUTS,
                                               help="Fusion rules YAML: extends the bundled rules (replace: true "
                                                    "replaces them).")] = None,
    skus: Annotated[Path | None, typer.Option(metavar="FILE", rich_help_panel=INPUTS,
                                              help="SKU catalog for GPU memory (default: the bundled "
                                                   "skus.yaml).")] = None,
    headroom: Annotated[float, typer.Option(metavar="X", rich_help_panel=GATES,
                                            help="Fraction of GPU memory an engine must leave free.")] = 0.1,
    max_partitions: Annotated[int, typer.Option(metavar="N", rich_help_panel=GATES,
                                                help="Gate: most TensorRT partitions of the model.")] = 1,
    max_unsupported: Annotated[int, typer.Option(metavar="N", rich_help_panel=GATES,
                                                 help="Gate: most nodes TensorRT does not take.")] = 0,
    max_boundary_mb: Annotated[float | None, typer.Option(metavar="MIB", rich_help_panel=GATES,
                                                          help="Gate: most MiB crossing partition boundaries "
                                                               "per inference.")] = None,
    atol: Annotated[list[str] | None, _threshold("absolute tolerance")] = None,
    rtol: Annotated[list[str] | None, _threshold("relative tolerance")] = None,
    error_stat: Annotated[list[str] | None, _threshold("elemwise, max, mean, median or quantile error")] = None,
    error_quantile: Annotated[list[str] | None, _threshold("the quantile of --error-stat quantile (0.99)")] = None,
    min_cosine: Annotated[list[str] | None, _threshold("least mean cosine similarity")] = None,
    min_top1: Annotated[list[str] | None, _threshold("least top-1 agreement (0.98: 98 %)")] = None,
    chunk_mb: Annotated[int, typer.Option(metavar="MIB", rich_help_panel=INPUTS,
                                          help="Intermediate tensors held at once by the FP16 range check.")] = 256,
    no_lint: Annotated[bool, typer.Option("--no-lint", metavar=FLAG, rich_help_panel=INPUTS,
                                          help="Skip the ONNX checker and Polygraphy lint.")] = False,
    no_reuse: Annotated[bool, typer.Option("--no-reuse", metavar=FLAG, rich_help_panel=OUTPUT,
                                           help="Check again even if check.json was made from the same inputs.")
                        ] = False,
    json: JsonOption = False,
) -> None:
    """Fusions, partitions, memory fit, accuracy, FP16 range and lint of a build folder, as gates; writes
    BUILD_DIR/check.json and check.md. Unset accuracy thresholds take the precision's defaults (docs/check.md)."""
    from compiler.check import check as run_check
    from compiler.check.report import render
    from compiler.options import CheckOptions

    options = CheckOptions(
        data=data, samples=samples, batch_size=batch_size, model=model, profiles=profiles, rules=rules, skus=skus,
        headroom=headroom, max_partitions=max_partitions, max_unsupported=max_unsupported,
        max_boundary_mb=max_boundary_mb, atol=_per_output("--atol", atol), rtol=_per_output("--rtol", rtol),
        error_stat=_per_output("--error-stat", error_stat, number=False),
        error_quantile=_per_output("--error-quantile", error_quantile),
        min_cosine=_per_output("--min-cosine", min_cosine), min_top1=_per_output("--min-top1", min_top1),
        chunk_mb=chunk_mb, lint=not no_lint, reuse=not no_reuse)
    with nullcontext() if json else phase_progress() as progress:
        report = run_check(build_dir, options, progress=progress)
    if json:
        emit_json(report)
    else:
        render(report)
    if not report.passed:
        raise CheckFailed(f"{report.summary} (report: {Path(report.build_dir) / 'check.json'})")

@app.command(cls=_Command, epilog=_example(
    "compile publish engines --name digits --version 1.0.0",
    "compile publish engines --store s3://models/team --name digits --version 1.0.0 --json"))
def publish(
    build_dir: Annotated[Path, typer.Argument(metavar="BUILD_DIR", show_default=False,
                                              help="The folder compile build --out wrote.")],
    *,
    name: Annotated[str, typer.Option(metavar="NAME", rich_help_panel=INPUTS, show_default=False,
                                      help="Release name (a-z 0-9 . _ -).")],
    version: Annotated[str, typer.Option(metavar="VERSION", rich_help_panel=INPUTS, show_default=False,
                                         help="Release version (A-Z a-z 0-9 . _ -); published once, never changed.")],
    allow_failed: Annotated[bool, typer.Option("--allow-failed", metavar=FLAG, rich_help_panel=INPUTS,
                                               help="Publish the targets that built even if others or the check "
                                                    "failed.")] = False,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Publish a build folder as an immutable, content-addressed release."""
    from compiler.publish import publish as publish_release

    with nullcontext() if json else phase_progress("blobs") as progress:
        result = publish_release(build_dir, store, name, version, allow_failed=allow_failed, progress=progress)
    if json:
        return emit_json(result)
    what = ("published" if result.status == "published" else "already published with this content; nothing sent")
    console.print(f"{result.name}@{result.version} {what}: {result.engines} engines in {printable(result.store)}; "
                  f"{result.uploaded_blobs} blobs sent ({human_size(result.uploaded_bytes)}), "
                  f"{result.present_blobs} already there, {result.seconds:.2f} s")
    for skipped in result.skipped_targets:
        sys.stderr.write(f"warning: left out {printable(skipped)} (--allow-failed)\n")


@app.command(cls=_Command, epilog=_example(
    "compile pull digits@1.0.0 --sku rtx-4090 --out digits.plan",
    "compile pull digits@stable --store s3://models/team --sku auto --precision fp16 --out /models/digits.plan"))
def pull(
    release: ReleaseArgument,
    *,
    sku: Annotated[str, typer.Option(metavar="SKU", rich_help_panel=TARGETS, show_default=False,
                                     help="GPU SKU from profiles/skus.yaml, or auto for this machine's GPU.")],
    precision: Annotated[str | None, typer.Option(metavar="P", rich_help_panel=TARGETS,
                                                  help="fp32, fp16, int8 or fp8 (when it has several).")] = None,
    tensorrt_version: Annotated[str | None, typer.Option(metavar="VERSION", rich_help_panel=TARGETS,
                                                         help="The runtime's TensorRT version (e.g. 10.8).")] = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, typer.Option("--no-cache", metavar=FLAG, rich_help_panel=CACHE,
                                           help="Download even if the pull cache has the plan.")] = False,
    out: Annotated[Path, typer.Option(metavar="FILE", rich_help_panel=OUTPUT, show_default=False,
                                      help="Where the plan goes (engine.json is written beside it).")],
    json: JsonOption = False,
) -> None:
    """The one verified plan of a release for a GPU SKU."""
    from compiler.releases import pull as pull_engine

    result = pull_engine(store, release, out=out, sku=sku, precision=precision, tensorrt_version=tensorrt_version,
                         use_cache=not no_cache)
    if json:
        return emit_json(result)
    console.print(f"{printable(result.out)}: {result.sku} {result.precision} "
                  f"({', '.join(result.compute_capabilities)}) of {result.release} (version {result.version}), "
                  f"{human_size(result.size_bytes)}, sha256 {result.sha256[:12]} verified"
                  + (", from the pull cache" if result.from_cache else ""))


@app.command(name="ls", cls=_Command, epilog=_example("compile ls", "compile ls digits --store s3://models/team",
                                                      "compile ls digits@1.0.0 --json"))
def list_releases(
    release: Annotated[str | None, typer.Argument(metavar="[NAME[@VERSION]]", show_default=False,
                                                  help="A release, or one version of it.")] = None,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Releases, their versions and channels, and the engines of one version."""
    from compiler.releases import list_store

    listing = list_store(store, release)
    if json:
        return emit_json(listing)
    if listing.manifest is not None:
        content = listing.manifest.content
        console.print(f"{content.name}@{content.version} of {content.model_name} (sha256 "
                      f"{content.model_sha256[:12]}), published {listing.manifest.published.at} by "
                      f"{printable(listing.manifest.published.by)}")
        console.print(table("Engines", ["sku", "compute capability", "precision", "backend", "size", "sha256"], [
            [e.sku, ", ".join(e.compute_capabilities), e.precision, f"{e.backend.get('name')} "
             f"{e.backend.get('version')}", human_size(e.plan.size_bytes), e.plan.sha256[:12]]
            for e in content.engines]))
    elif listing.name is not None:
        console.print(table(f"{listing.name} in {printable(listing.store)}",
                            ["version", "engines", "size", "check", "published", "channels"], [
            [v.version, v.engines, human_size(v.size_bytes), v.check, v.published_at,
             ", ".join(c for c, at in listing.channels.items() if at == v.version)] for v in listing.versions]))
    else:
        console.print(table(f"Releases in {printable(listing.store)}", ["name", "versions", "latest", "channels"], [
            [r.name, len(r.versions), r.versions[-1] if r.versions else "-",
             ", ".join(f"{c}={v}" for c, v in r.channels.items())] for r in listing.releases]
            or [["-", 0, "-", "none published"]]))


@app.command(cls=_Command, epilog=_example("compile promote digits@1.0.0 --channel stable",
                                           "compile promote digits@1.1.0 --channel canary --store s3://models/team"))
def promote(
    release: Annotated[str, typer.Argument(metavar="NAME@VERSION", show_default=False,
                                           help="The published version the channel should point at.")],
    *,
    channel: Annotated[str, typer.Option(metavar="CHANNEL", rich_help_panel=INPUTS, show_default=False,
                                         help="The channel to move (a-z 0-9 _ -, starting with a letter).")],
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Point a channel at a published version (the one mutable operation, as a compare-and-swap)."""
    from compiler.releases import promote as promote_release

    result = promote_release(store, release, channel)
    if json:
        return emit_json(result)
    moved = f"{result.previous} -> {result.version}" if result.previous else f"new, at {result.version}"
    console.print(f"{result.name}@{result.channel}: " + (moved if result.status == "moved"
                                                          else f"already at {result.version}"))


export_app = typer.Typer(name="export", cls=_Group, no_args_is_help=True,
                         help="Write a published release in a serving system's layout.")
app.add_typer(export_app)


@export_app.command(name="triton", cls=_Command, epilog=_example(
    "compile export triton digits@1.0.0 --repo models",
    "compile export triton digits@stable --store oci://registry.example/ml --repo /models --precision fp16 "
    "--triton-version 3 --json"))
def export_triton(
    release: ReleaseArgument,
    *,
    repo: Annotated[Path, typer.Option(metavar="DIR", rich_help_panel=OUTPUT, show_default=False,
                                       help="The Triton model repository (an existing folder).")],
    model_name: Annotated[str | None, typer.Option(metavar="N", rich_help_panel=OUTPUT,
                                                   help="The model's folder and name (default: the release "
                                                        "name).")] = None,
    triton_version: Annotated[int, typer.Option(metavar="N", rich_help_panel=OUTPUT,
                                                help="The numeric version folder to write.")] = 1,
    precision: Annotated[str | None, typer.Option(metavar="P", rich_help_panel=TARGETS,
                                                  help="The precision to serve (when the release has "
                                                       "several).")] = None,
    default_plan: Annotated[str | None, typer.Option(metavar="CC", rich_help_panel=TARGETS,
                                                     help="Also set default_model_filename to this compute "
                                                          "capability's plan (unset: an unknown GPU fails to "
                                                          "load).")] = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, typer.Option("--no-cache", metavar=FLAG, rich_help_panel=CACHE,
                                           help="Download even if the pull cache has the plans.")] = False,
    json: JsonOption = False,
) -> None:
    """A Triton model repository of a release: config.pbtxt and one verified plan per compute capability."""
    from compiler.export.triton import export_triton as export

    result = export(store, release, repo, model_name=model_name, precision=precision, triton_version=triton_version,
                    default_plan=default_plan, use_cache=not no_cache)
    if json:
        return emit_json(result)
    what = "written" if result.status == "written" else "already there with these plans"
    console.print(f"{printable(result.model_dir)}/{result.triton_version}: {result.release} (version "
                  f"{result.version}) {what}; " + ", ".join(f"{cc} -> {file}" for cc, file in result.plans.items()))


PipelineArgument = Annotated[Path, typer.Argument(metavar="PIPELINE", show_default=False,
                                                 help="The pipeline YAML (docs/pipeline.md).")]


@app.command(name="plan", cls=_Command, epilog=_example(
    "compile plan pipelines/example.yaml", "compile plan pipelines/example.yaml --format github-matrix"))
def plan_command(
    pipeline: PipelineArgument,
    format: Annotated[str, typer.Option(metavar="FORMAT", rich_help_panel=OUTPUT,
                                        help="table, json or github-matrix (for strategy.matrix via fromJSON).")
                      ] = "table",
) -> None:
    """The build jobs of a release, one per SKU, with the runner labels each needs."""
    from compiler.release import github_matrix, load_pipeline, plan_release

    if format not in ("table", "json", "github-matrix"):
        raise InvalidInput(f"--format {format}: choose table, json or github-matrix")
    plan = plan_release(load_pipeline(pipeline))
    if format == "json":
        return emit_json(plan)
    if format == "github-matrix":
        return emit_json(github_matrix(plan))
    console.print(table(f"{plan.name}@{plan.version} -> {printable(plan.store)}",
                        ["job (sku)", "backend", "precisions", "runs on"],
                        [[j.sku, j.backend, ", ".join(j.precisions), ", ".join(j.runs_on)] for j in plan.jobs]))


@app.command(name="release", cls=_Command, epilog=_example(
    "compile release pipelines/example.yaml", "compile release pipelines/example.yaml --dry-run",
    "compile release pipeline.yaml --only-sku h100 --store s3://models/team",
    "compile release pipeline.yaml --finalize --store s3://models/team"))
def release_command(
    pipeline: PipelineArgument,
    store: Annotated[str | None, typer.Option(metavar="URI", envvar="COMPILE_STORE", rich_help_panel=STORE,
                                              help="Override the pipeline's store (default: its store:).")] = None,
    only_sku: Annotated[str | None, typer.Option(metavar="SKU", rich_help_panel=TARGETS,
                                                 help="One job of a sharded release: build, check and stage "
                                                      "this SKU's engines.")] = None,
    finalize: Annotated[bool, typer.Option("--finalize", metavar=FLAG, rich_help_panel=TARGETS,
                                           help="Publish once every job's engines are staged.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", metavar=FLAG, rich_help_panel=TARGETS,
                                          help="Validate everything and print the plan; build nothing.")] = False,
    work: Annotated[Path | None, typer.Option(metavar="DIR", rich_help_panel=OUTPUT,
                                              help="Work folder (default release/NAME-VERSION): builds, "
                                                   "calibration, release-report.md/.json.")] = None,
    json: JsonOption = False,
) -> None:
    """Inspect, calibrate, build, check and publish a release from one pipeline file."""
    from compiler.release import release

    def line(stage: str, status: str, detail: str) -> None:
        if not json:
            console.print(f"{stage:<10} ", status_text(status), f" {printable(detail)}", sep="", highlight=False)

    report = release(pipeline, store=store, only_sku=only_sku, finalize=finalize, dry_run=dry_run, work=work,
                     on_stage=line)
    if json:
        emit_json(report)
    elif not dry_run:
        console.print(f"report: {printable(Path(report.work) / 'release-report.md')}")
    if report.failure is not None:
        raise report.failure


INTERRUPTED = 130
"""The shell's exit code for Ctrl-C (128 + SIGINT)."""
READER_GONE = 128 + signal.SIGPIPE
"""What `yes | head -1` gives: output whose reader went away ends the run quietly, as SIGPIPE would."""


def _stop(signum: int, frame: object) -> None:
    """Ctrl-C and SIGTERM (a cancelled CI job, a stopping container) stop any command the same way: noted, then
    a KeyboardInterrupt, which no ``except Exception`` catches, so cleanup runs and nothing half-done stays.
    `compile build` lets its builders stop through their progress monitors instead (compiler/build/run.py)."""
    note_stop(signum)
    raise KeyboardInterrupt


def main() -> None:
    """Entry point: run the app and map failures to the contract's exit codes."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    code, problem = _run_app()
    stopped = stop_received()
    if stopped is not None and code not in (ExitCode.OK, READER_GONE):  # whatever error the stop became
        code, problem = 128 + stopped, Interrupted(stopped).args[0]
    if problem:
        sys.stderr.write(f"error: {printable(problem)}\n")
    _exit(int(code))


def _run_app() -> tuple[int, str | None]:
    """The app's exit code and its error line, if any."""
    try:
        code = app(standalone_mode=False)
        # Typer turns Ctrl-C inside a command into a silent exit 130
        return (INTERRUPTED, "interrupted") if code == INTERRUPTED else (int(code or 0), None)
    except (typer.Abort, KeyboardInterrupt):
        return INTERRUPTED, "interrupted"
    except SystemExit as exc:  # Typer ends a run whose stdout reader went away (| head) with a bare exit 1
        reader_gone = isinstance(exc.__context__, BrokenPipeError)
        return READER_GONE if reader_gone else exc.code if isinstance(exc.code, int) else ExitCode.CHECK_FAILED, None
    except TyperException as exc:
        return ExitCode.INVALID_INPUT, f"{exc.format_message()} (see compile --help)"
    except CompileError as exc:
        _traceback_if_debugging()
        return exc.exit_code, str(exc)
    except OSError as exc:  # the machine's doing (a full disk, a lost mount), not a bug to report
        _traceback_if_debugging()
        where = f"{exc.filename}: " if exc.filename else ""
        return ExitCode.ENVIRONMENT, (f"{where}{exc.strerror or exc}; check the free space and permissions of the "
                                      f"files and folders this command reads and writes (--debug shows which)")
    except Exception as exc:
        _traceback_if_debugging()
        return ExitCode.CHECK_FAILED, f"internal error: {type(exc).__name__}: {exc}; rerun with --debug and report it"


def _traceback_if_debugging() -> None:
    if _state["debug"]:
        traceback.print_exc()


def _exit(code: int) -> None:
    """Leave without the interpreter's teardown, as mypy does: collecting every module and unloading
    TensorRT's libraries takes ~0.05 s of each run. Threads still working (a model digest being
    remembered for the next run) finish first, and the output is flushed."""
    for signum in STOP_SIGNALS:  # from here on, a stop signal just ends the process
        signal.signal(signum, signal.SIG_DFL)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader that went away (| head) or a closed stream
            stream.flush()
    os._exit(code)
