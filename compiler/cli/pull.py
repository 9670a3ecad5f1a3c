"""`compile pull`: the one verified plan of a release for a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, ReleaseArgument, StoreOption, examples, option, switch, with_options
from compiler.core.errors import InvalidInput
from compiler.core.flags import CACHE, INPUTS, OUTPUT, PULL, STORE, TARGETS
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile pull digits@1.0.0 --sku rtx-4090 --out digits.plan",
    "compile pull digits@stable --store s3://models/team --sku auto --precision fp16 --out /models/digits.plan "
    "--verify-key release.pub",
    "compile pull --all digits@1.0.0 --out digits-1.0.0 --verify-key release.pub",
)
@with_options(PULL, (TARGETS, INPUTS, STORE, CACHE, OUTPUT))
def pull(
    release: ReleaseArgument,
    *,
    out: Annotated[
        Path,
        option(
            "FILE|DIR",
            OUTPUT,
            "Where the plan goes (its record, FILE.json, is written beside it); with --all, the folder.",
            show_default=False,
        ),
    ],
    options: dict,
    sku: Annotated[
        str | None,
        option(
            "SKU",
            TARGETS,
            "GPU SKU of the catalog (compile skus lists them), or auto for this machine's GPU.",
            show_default=False,
        ),
    ] = None,
    every_file: Annotated[
        bool,
        switch(
            "--all",
            TARGETS,
            "Every file of the release (all plans, layers, checks, golden inputs) into the folder --out, with its "
            "model_signing signature (model.sig) when it has one (docs/provenance.md).",
        ),
    ] = False,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """The one verified plan of a release for a GPU SKU, or with --all the whole release into a folder."""
    from compiler.core.options import PullOptions

    if every_file == (sku is not None):
        raise InvalidInput("give --sku SKU (one plan) or --all (every file of the release into the folder --out)")
    if every_file:
        from compiler.releases.pull_all import pull_all

        pulled = pull_all(store, release, PullOptions(**options), out=out)
        render.warnings(pulled.warnings)
        render.emit_json(pulled) if json else render_releases.pulled_all(pulled)
        return
    from compiler.releases.pull import pull as pull_engine

    result = pull_engine(store, release, PullOptions(**options), out=out, sku=sku)
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.pulled(result)
