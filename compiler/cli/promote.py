"""`compile promote`: a channel moved to a published version."""

from __future__ import annotations

from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, SignKeyOption, StoreOption, examples, option, with_options
from compiler.core.flags import INPUTS, OUTPUT, PROMOTE, STORE
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile promote digits@1.0.0 --channel stable",
    "compile promote digits@1.1.0 --channel canary --store s3://models/team",
    "compile promote digits@1.1.0 --channel stable --store s3://models/team --sign-key env://RELEASE_SIGNING_KEY",
)
@with_options(PROMOTE, (INPUTS, STORE, OUTPUT))
def promote(
    release: Annotated[
        str,
        typer.Argument(
            metavar="NAME@VERSION", show_default=False, help="The published version the channel should point at."
        ),
    ],
    *,
    channel: Annotated[
        str, option("CHANNEL", INPUTS, "The channel to move (a-z 0-9 _ -, starting with a letter).", show_default=False)
    ],
    options: dict,
    sign_key: SignKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Point a channel at a published version (the one mutable operation, as a compare-and-swap). A version whose
    check failed, or published with --allow-failed, is refused (exit 1) unless --allow-failed. With --sign-key the
    move is signed, and verifying consumers refuse a channel moved without it (docs/provenance.md)."""
    from compiler.core.options import PromoteOptions
    from compiler.releases.attest import signer_of
    from compiler.releases.channels import promote as promote_release

    signer = signer_of(sign_key)  # a bad key is refused before anything is read or moved
    result = promote_release(store, release, channel, PromoteOptions(**options), signer=signer)
    if json:
        render.emit_json(result)
    else:
        render_releases.promoted(result)
