"""`compile build`: one engine per SKU x precision."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import ConstOption, JsonOption, ModelArgument, examples, option, with_options
from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.flags import BUILD, INPUTS, OUTPUT, PRECISIONS, TARGETS
from compiler.core.text import printable


@examples(
    "compile build model.onnx --profiles profiles.yaml --sku rtx-4090 --precision fp16 --out engines",
    "compile build model.onnx --profiles profiles.yaml --sku rtx-4090 --sku rtx-3090 --precision int8 "
    "--data data.npz --out engines --jobs 2",
)
@with_options(BUILD)
def build(
    model: ModelArgument,
    *,
    profiles: Annotated[
        Path | None,
        option(
            "FILE",
            INPUTS,
            "Shape profiles YAML; every profile goes into each engine. Without it, a model of static input "
            "shapes builds with those shapes (profile 'static').",
            show_default=False,
        ),
    ] = None,
    sku: Annotated[
        list[str],
        option(
            "SKU", TARGETS, "GPU SKU of the catalog (compile skus lists them); repeat for several.", show_default=False
        ),
    ],
    precision: Annotated[
        list[str], option(PRECISIONS, TARGETS, "Engine precision; repeat for several.", show_default=False)
    ],
    options: dict,
    const: ConstOption = None,
    out: Annotated[
        Path, option("DIR", OUTPUT, "Output folder: DIR/<sku>/<precision>/engine.plan.", show_default=False)
    ],
    json: JsonOption = False,
) -> None:
    """One engine per SKU x precision under DIR/<sku>/<precision>/, with a content-addressed cache."""
    from compiler.engines import BuildOptions, execute_builds, plan_builds

    options = BuildOptions(**options)
    from compiler.data.freeze import frozen_model, parse_consts

    model = frozen_model(model, parse_consts(const or ()), options.cache_dir)
    with nullcontext() if json else render.phase_progress() as progress:  # shows only if --data calibrates
        planned = plan_builds(model, profiles, sku, precision, out, options, calibration_progress=progress)
    if json:
        report = execute_builds(planned, model, out, options.jobs)
        render.emit_json(report)
    else:
        with render.build_progress(planned) as progress:
            report = execute_builds(planned, model, out, options.jobs, progress)
        render.builds(report)
    if options.explain and not json:
        for target in report.targets:
            if target.cache and target.cache.source == "miss":
                render.console.print(f"miss {target.sku}/{target.precision}: {printable(target.cache.reason or '')}")
    for target in report.targets:
        for warning in target.warnings:
            sys.stderr.write(f"warning: {target.sku}/{target.precision}: {printable(warning)}\n")
    if report.failed:
        first = report.failed[0]
        problem = InvalidInput if first.refused else CheckFailed
        raise problem(
            f"{len(report.failed)} of {len(report.targets)} builds failed; {first.sku}/{first.precision}:"
            f" {first.errors[0] if first.errors else first.status} (log: {first.path}/build.log)"
        )
