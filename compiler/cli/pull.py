"""`compile pull`: the one verified plan of a release for a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, ReleaseArgument, StoreOption, examples, option, with_options
from compiler.core.flags import CACHE, INPUTS, OUTPUT, PULL, STORE, TARGETS
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile pull digits@1.0.0 --sku rtx-4090 --out digits.plan",
    "compile pull digits@stable --store s3://models/team --sku auto --precision fp16 --out /models/digits.plan "
    "--verify-key release.pub",
)
@with_options(PULL, (TARGETS, INPUTS, STORE, CACHE, OUTPUT))
def pull(
    release: ReleaseArgument,
    *,
    sku: Annotated[
        str,
        option(
            "SKU",
            TARGETS,
            "GPU SKU of the catalog (compiler/core/skus.yaml), or auto for this machine's GPU.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        option(
            "FILE", OUTPUT, "Where the plan goes (its record, FILE.json, is written beside it).", show_default=False
        ),
    ],
    options: dict,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """The one verified plan of a release for a GPU SKU."""
    from compiler.core.options import PullOptions
    from compiler.releases.pull import pull as pull_engine

    result = pull_engine(store, release, PullOptions(**options), out=out, sku=sku)
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.pulled(result)
