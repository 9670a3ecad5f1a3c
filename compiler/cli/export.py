"""`compile export triton`: a published release in a serving system's layout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from compiler.cli import render, render_releases
from compiler.cli.params import (
    AllowYankedOption,
    JsonOption,
    ReleaseArgument,
    StoreOption,
    VerifyKeyOption,
    examples,
    option,
    switch,
)
from compiler.core.flags import CACHE, OUTPUT, PRECISIONS, TARGETS
from compiler.stores import DEFAULT_STORE


@examples(
    "compile export triton digits@1.0.0 --repo models --triton-release 25.10",
    "compile export triton digits@stable --store oci://registry.example/ml --repo /models --precision fp16 "
    "--triton-release 25.10 --model-version 3 --json",
)
def triton(
    release: ReleaseArgument,
    *,
    repo: Annotated[
        Path, option("DIR", OUTPUT, "The Triton model repository (an existing folder).", show_default=False)
    ],
    triton_release: Annotated[
        str | None,
        option(
            "YY.MM",
            TARGETS,
            "The Triton release that serves it: its TensorRT must load every plan (docs/serving.md has the table).",
        ),
    ] = None,
    triton_tensorrt: Annotated[
        str | None,
        option(
            "VERSION",
            TARGETS,
            "The server's TensorRT version, for a Triton image the table does not list (wins over the table).",
        ),
    ] = None,
    model_name: Annotated[
        str | None, option("N", OUTPUT, "The model's folder and name (default: the release name).")
    ] = None,
    model_version: Annotated[
        int | None, option("N", OUTPUT, "The model's numeric version folder to write (default 1).")
    ] = None,
    triton_version: Annotated[
        int | None, option("N", OUTPUT, "Deprecated: the old name of --model-version.", hidden=True)
    ] = None,
    precision: Annotated[
        str | None, option(PRECISIONS, TARGETS, "The precision to serve (when the release has several).")
    ] = None,
    default_plan: Annotated[
        str | None,
        option(
            "CC",
            TARGETS,
            "Also set default_model_filename to this compute capability's plan (unset: an unknown GPU fails to load).",
        ),
    ] = None,
    verify_key: VerifyKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, switch("--no-cache", CACHE, "Download even if the pull cache has the plans.")] = False,
    allow_yanked: AllowYankedOption = False,
    json: JsonOption = False,
) -> None:
    """A Triton model repository of a release: config.pbtxt (batching, warmup) and one verified plan per compute
    capability, for a Triton release whose TensorRT loads every plan."""

    from compiler.export.triton import export_triton

    if triton_version is not None:
        sys.stderr.write(
            "warning: --triton-version is deprecated: it names the model's version folder, not the "
            "Triton release; use --model-version (and --triton-release for the release)\n"
        )
    result = export_triton(
        store,
        release,
        repo,
        model_name=model_name,
        precision=precision,
        model_version=model_version,
        triton_version=triton_version,
        triton_release=triton_release,
        triton_tensorrt=triton_tensorrt,
        default_plan=default_plan,
        use_cache=not no_cache,
        verify_key=verify_key,
        allow_yanked=allow_yanked,
    )
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
def rtx(
    release: ReleaseArgument,
    *,
    out: Annotated[
        Path, option("DIR", OUTPUT, "Where the model's folder goes (an existing folder).", show_default=False)
    ],
    runtime_version: Annotated[
        str | None,
        option("VERSION", TARGETS, "The application's TensorRT-RTX version: every engine must load with it."),
    ] = None,
    model_name: Annotated[
        str | None, option("N", OUTPUT, "The model's folder name (default: the release name).")
    ] = None,
    precision: Annotated[str | None, option(PRECISIONS, TARGETS, "Only this precision's engines.")] = None,
    verify_key: VerifyKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, switch("--no-cache", CACHE, "Download even if the pull cache has the plans.")] = False,
    allow_yanked: AllowYankedOption = False,
    json: JsonOption = False,
) -> None:
    """A TensorRT-RTX release for applications: each compute capability's engine and an ONNX Runtime EP-context
    model naming it (TensorRT RTX execution provider), with rtx.json and the golden inputs, verified before any
    file is written."""
    from compiler.export.rtx import export_rtx

    result = export_rtx(
        store,
        release,
        out,
        model_name=model_name,
        precision=precision,
        runtime_version=runtime_version,
        use_cache=not no_cache,
        verify_key=verify_key,
        allow_yanked=allow_yanked,
    )
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.exported_rtx(result)
