"""`compile verify` and `compile provenance`: what a consumer checks before trusting a release."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import INPUTS, JsonOption, ReleaseArgument, StoreOption, examples, option
from compiler.stores import DEFAULT_STORE


@examples("compile verify digits@1.0.0 --key release.pub",
          "compile verify digits@stable --store s3://models/team --key release.pub --json")
def verify(
    release: ReleaseArgument,
    *,
    key: Annotated[Path, option("PUB.pem", INPUTS, "The publisher's public key (EC P-256 or Ed25519 PEM).",
                                show_default=False)],
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Check a release against a public key: the signature over its manifest, its provenance's subjects against
    the manifest's plans, and every blob's sha256. Exit 0 verified, 1 unsigned, bad signature or a mismatch
    (saying which), 2 bad input."""
    from compiler.releases.verify import verify_release

    with nullcontext() if json else render.phase_progress("blobs") as progress:
        result = verify_release(store, release, key, progress=progress)
    if json:
        render.emit_json(result)
    else:
        render.verified(result)


@examples("compile provenance digits@1.0.0", "compile provenance digits@stable --store s3://models/team --json")
def provenance(
    release: ReleaseArgument,
    *,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """A release's SLSA provenance (an in-toto statement) as the store holds it; `compile verify` checks it."""
    from compiler.releases.verify import read_provenance

    statement = read_provenance(store, release)
    if json:
        render.emit_json(statement)
    else:
        render.provenance(statement)
