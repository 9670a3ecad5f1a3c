"""`compile export triton` and `compile export rtx`: a published release in a serving system's layout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, ReleaseArgument, StoreOption, examples, option, with_options
from compiler.core.flags import CACHE, EXPORT_RTX, EXPORT_TRITON, INPUTS, OUTPUT, STORE, TARGETS
from compiler.stores import DEFAULT_STORE

PANELS = (OUTPUT, TARGETS, INPUTS, STORE, CACHE)
"""Where the export goes first: it is what the command is run for."""


@examples(
    "compile export triton digits@1.0.0 --repo models --triton-release 25.10",
    "compile export triton digits@stable --store oci://registry.example/ml --repo /models --precision fp16 "
    "--triton-release 25.10 --model-version 3 --json",
)
@with_options(EXPORT_TRITON, PANELS)
def triton(
    release: ReleaseArgument,
    *,
    repo: Annotated[
        Path, option("DIR", OUTPUT, "The Triton model repository (an existing folder).", show_default=False)
    ],
    options: dict,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """A Triton model repository of a release: config.pbtxt (batching, warmup) and one verified plan per compute
    capability, for a Triton release whose TensorRT loads every plan."""
    from compiler.core.options import TritonOptions
    from compiler.export.triton import export_triton

    options = TritonOptions(**options)
    if options.triton_version is not None:
        sys.stderr.write(
            "warning: --triton-version is deprecated: it names the model's version folder, not the "
            "Triton release; use --model-version (and --triton-release for the release)\n"
        )
    result = export_triton(store, release, repo, options)
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.exported(result)


@examples(
    "compile export rtx digits@1.0.0 --out app-models",
    "compile export rtx digits@stable --store s3://models/team --out app-models --precision fp16 "
    "--runtime-version 1.7.1.116 --json",
)
@with_options(EXPORT_RTX, PANELS)
def rtx(
    release: ReleaseArgument,
    *,
    out: Annotated[
        Path, option("DIR", OUTPUT, "Where the model's folder goes (an existing folder).", show_default=False)
    ],
    options: dict,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """A TensorRT-RTX release for applications: each compute capability's engine and an ONNX Runtime EP-context
    model naming it (TensorRT RTX execution provider), with rtx.json and the golden inputs, verified before any
    file is written."""
    from compiler.core.options import RtxOptions
    from compiler.export.rtx import export_rtx

    result = export_rtx(store, release, out, RtxOptions(**options))
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.exported_rtx(result)
