"""`compile export triton`: a published release in a serving system's layout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import (
    CACHE,
    OUTPUT,
    PRECISIONS,
    TARGETS,
    JsonOption,
    ReleaseArgument,
    StoreOption,
    examples,
    option,
    switch,
)
from compiler.core.text import printable
from compiler.stores import DEFAULT_STORE


@examples("compile export triton digits@1.0.0 --repo models",
          "compile export triton digits@stable --store oci://registry.example/ml --repo /models --precision fp16 "
          "--triton-version 3 --json")
def triton(
    release: ReleaseArgument,
    *,
    repo: Annotated[Path, option("DIR", OUTPUT, "The Triton model repository (an existing folder).",
                                 show_default=False)],
    model_name: Annotated[str | None, option("N", OUTPUT, "The model's folder and name (default: the release "
                                             "name).")] = None,
    triton_version: Annotated[int, option("N", OUTPUT, "The numeric version folder to write.")] = 1,
    precision: Annotated[str | None, option(PRECISIONS, TARGETS, "The precision to serve (when the release has "
                                            "several).")] = None,
    default_plan: Annotated[str | None, option("CC", TARGETS, "Also set default_model_filename to this compute "
                                               "capability's plan (unset: an unknown GPU fails to load).")] = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, switch("--no-cache", CACHE, "Download even if the pull cache has the plans.")] = False,
    json: JsonOption = False,
) -> None:
    """A Triton model repository of a release: config.pbtxt and one verified plan per compute capability."""
    from compiler.export.triton import export_triton

    result = export_triton(store, release, repo, model_name=model_name, precision=precision,
                           triton_version=triton_version, default_plan=default_plan, use_cache=not no_cache)
    for warning in result.warnings:
        sys.stderr.write(f"warning: {printable(warning)}\n")
    if json:
        render.emit_json(result)
    else:
        render.exported(result)
