"""`compile yank`: a published version withdrawn."""

from __future__ import annotations

from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, StoreOption, examples, option
from compiler.core.flags import INPUTS
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile yank digits@1.0.0 --reason 'calibrated on the wrong data'",
    "compile yank digits@1.1.0 --reason 'accuracy regression on night images' --store s3://models/team --json",
)
def yank(
    release: Annotated[
        str, typer.Argument(metavar="NAME@VERSION", show_default=False, help="The published version to withdraw.")
    ],
    *,
    reason: Annotated[
        str, option("TEXT", INPUTS, "Why it is withdrawn (shown to whoever tries to use it).", show_default=False)
    ],
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Withdraw a version: its manifest stays, pull, export and promote refuse it unless --allow-yanked."""
    from compiler.releases.yank import yank as yank_release

    result = yank_release(store, release, reason)
    if json:
        render.emit_json(result)
    else:
        render_releases.yanked(result)
