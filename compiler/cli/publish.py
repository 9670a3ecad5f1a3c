"""`compile publish`: build folders become an immutable release in a store."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, SignKeyOption, StoreOption, examples, option, with_options
from compiler.core.flags import INPUTS, OUTPUT, PUBLISH, STORE
from compiler.core.text import printable
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile publish engines --name digits --version 1.0.0",
    "compile publish engines-ampere engines-ada --store s3://models/team --name digits --version 1.0.0 "
    "--sign-key /run/secrets/release.pem",
)
@with_options(PUBLISH, (INPUTS, STORE, OUTPUT))
def publish(
    build_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="BUILD_DIR",
            show_default=False,
            help="The --out folders of compile build, one model's (e.g. one per CI runner).",
        ),
    ],
    *,
    name: Annotated[str, option("NAME", INPUTS, "Release name (a-z 0-9 . _ -).", show_default=False)],
    version: Annotated[
        str,
        option(
            "VERSION", INPUTS, "Release version (A-Z a-z 0-9 . _ -); published once, never changed.", show_default=False
        ),
    ],
    options: dict,
    sign_key: SignKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Publish one or more build folders of a model as an immutable, content-addressed release, with its
    provenance; signed with --sign-key."""
    from compiler.core.options import PublishOptions
    from compiler.releases.attest import signer_of
    from compiler.releases.publish import publish as publish_release

    options = PublishOptions(**options)
    signer = signer_of(sign_key)  # a bad key is refused before anything is read or sent
    with nullcontext() if json else render.phase_progress("blobs") as progress:
        result = publish_release(build_dirs, store, name, version, options, progress=progress, signer=signer)
    if json:
        render.emit_json(result)
    else:
        render_releases.published(result)
    for skipped in result.skipped_targets:
        sys.stderr.write(f"warning: left out {printable(skipped)} (--allow-failed)\n")
