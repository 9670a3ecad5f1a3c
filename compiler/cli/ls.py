"""`compile ls`: the releases in a store, and with --verify what of them is damaged."""

from __future__ import annotations

from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, StoreOption, examples, switch
from compiler.core.errors import CheckFailed
from compiler.core.flags import INPUTS
from compiler.core.text import and_more, printable
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile ls",
    "compile ls digits --store s3://models/team",
    "compile ls digits@1.0.0 --json",
    "compile ls --verify --store s3://models/team",
)
def list_releases(
    release: Annotated[
        str | None,
        typer.Argument(metavar="[NAME[@VERSION]]", show_default=False, help="A release, or one version of it."),
    ] = None,
    verify: Annotated[
        bool,
        switch(
            "--verify",
            INPUTS,
            "Read every manifest, channel and blob (of NAME, or of the "
            "store) and list what is damaged, dangling or unreferenced; "
            "exit 1 if anything is damaged or dangling.",
        ),
    ] = False,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Releases, their versions and channels, and the engines of one version."""
    from compiler.releases.listing import list_store

    if verify:
        from compiler.releases.fsck import verify_store

        report = verify_store(store, release)
        render.emit_json(report) if json else render_releases.store_check(report)
        if not report.passed:
            broken = [f for f in report.findings if f.kind != "unreferenced"]
            raise CheckFailed(
                f"store {printable(report.store)}: {len(broken)} damaged or dangling: "
                f"{printable(broken[0].key)} ({broken[0].kind})" + and_more(len(broken) - 1)
            )
        return
    listing = list_store(store, release)
    if json:
        render.emit_json(listing)
    else:
        render_releases.listing(listing)
    render.warnings(
        [
            f"store {listing.store}: {entry} was not listed (not a plain file or folder); move it out of the store "
            "or put the record itself there (compile gc refuses to run while it is there)"
            for entry in listing.skipped
        ]
    )
