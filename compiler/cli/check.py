"""`compile check`: the gates of a build folder."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import (
    CACHE,
    GATES,
    INPUTS,
    OUTPUT,
    BuildDirArgument,
    JsonOption,
    RemoteCacheOption,
    examples,
    option,
    per_output,
    switch,
    threshold,
)
from compiler.core.errors import CheckFailed
from compiler.core.flags import CHECK


@examples(
    "compile check engines --data data.npz",
    "compile check engines --data data.npz --calibration calibrated",
    "compile check engines --data images/ --samples 256 --min-cosine logits=0.995 --rules rules.yaml --json",
)
def check(
    build_dir: BuildDirArgument,
    *,
    data: Annotated[Path | None, option("DATA", INPUTS, CHECK["data"])] = None,
    samples: Annotated[int, option("N", INPUTS, CHECK["samples"])] = 64,
    batch_size: Annotated[int, option("N", INPUTS, CHECK["batch_size"])] = 8,
    model: Annotated[Path | None, option("FILE", INPUTS, CHECK["model"])] = None,
    profiles: Annotated[Path | None, option("FILE", INPUTS, CHECK["profiles"])] = None,
    rules: Annotated[Path | None, option("FILE", INPUTS, CHECK["rules"])] = None,
    skus: Annotated[Path | None, option("FILE", INPUTS, CHECK["skus"])] = None,
    headroom: Annotated[float, option("X", GATES, CHECK["headroom"])] = 0.1,
    max_partitions: Annotated[int, option("N", GATES, CHECK["max_partitions"])] = 1,
    max_unsupported: Annotated[int, option("N", GATES, CHECK["max_unsupported"])] = 0,
    max_boundary_mb: Annotated[float | None, option("MIB", GATES, CHECK["max_boundary_mb"])] = None,
    atol: Annotated[list[str] | None, threshold(CHECK["atol"])] = None,
    rtol: Annotated[list[str] | None, threshold(CHECK["rtol"])] = None,
    error_stat: Annotated[list[str] | None, threshold(CHECK["error_stat"])] = None,
    error_quantile: Annotated[list[str] | None, threshold(CHECK["error_quantile"])] = None,
    min_cosine: Annotated[list[str] | None, threshold(CHECK["min_cosine"])] = None,
    min_top1: Annotated[list[str] | None, threshold(CHECK["min_top1"])] = None,
    min_sqnr: Annotated[list[str] | None, threshold(CHECK["min_sqnr"])] = None,
    calibration: Annotated[list[Path] | None, option("DIR", INPUTS, CHECK["calibration"])] = None,
    metric: Annotated[str | None, option("MODULE:FUNCTION", GATES, CHECK["metric"])] = None,
    min_metric: Annotated[float | None, option("X", GATES, CHECK["min_metric"])] = None,
    labels: Annotated[Path | None, option("FILE", INPUTS, CHECK["labels"])] = None,
    allow_skip: Annotated[list[str] | None, option("CHECK", GATES, CHECK["allow_skip"])] = None,
    chunk_mb: Annotated[int, option("MIB", INPUTS, CHECK["chunk_mb"])] = 256,
    no_lint: Annotated[bool, switch("--no-lint", INPUTS, "Skip the ONNX checker and Polygraphy lint.")] = False,
    no_reuse: Annotated[
        bool, switch("--no-reuse", OUTPUT, "Check again even if check.json was made from the same inputs.")
    ] = False,
    cache_dir: Annotated[Path | None, option("DIR", CACHE, CHECK["cache_dir"])] = None,
    remote_cache: RemoteCacheOption = None,
    json: JsonOption = False,
) -> None:
    """Fusions, partitions, memory fit, accuracy, FP16 range and lint of a build folder, as gates; writes
    BUILD_DIR/check.json and check.md. Unset accuracy thresholds take the precision's defaults (docs/check.md)."""
    from compiler.check import check as run_check
    from compiler.core.options import CheckOptions

    options = CheckOptions(
        data=data,
        samples=samples,
        batch_size=batch_size,
        model=model,
        profiles=profiles,
        rules=rules,
        skus=skus,
        headroom=headroom,
        max_partitions=max_partitions,
        max_unsupported=max_unsupported,
        max_boundary_mb=max_boundary_mb,
        atol=per_output("--atol", atol),
        rtol=per_output("--rtol", rtol),
        error_stat=per_output("--error-stat", error_stat, number=False),
        error_quantile=per_output("--error-quantile", error_quantile),
        min_cosine=per_output("--min-cosine", min_cosine),
        min_top1=per_output("--min-top1", min_top1),
        min_sqnr=per_output("--min-sqnr", min_sqnr),
        calibration=tuple(calibration or ()),
        allow_skip=tuple(allow_skip or ()),
        metric=metric,
        min_metric=min_metric,
        labels=labels,
        chunk_mb=chunk_mb,
        lint=not no_lint,
        reuse=not no_reuse,
        cache_dir=cache_dir,
    )
    with nullcontext() if json else render.phase_progress() as progress:
        from compiler.cache.tier import CacheTier

        report = run_check(build_dir, options, progress=progress, shared=CacheTier(remote_cache))
    render.emit_json(report) if json else render.check_report(report)
    render.cache_outcome("check", report.cache, False)
    if not report.passed:
        raise CheckFailed(f"{report.summary} (report: {Path(report.build_dir) / 'check.json'})")
