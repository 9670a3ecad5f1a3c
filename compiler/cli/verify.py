"""`compile verify` and `compile provenance`: what a consumer checks before trusting a release."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Annotated

from compiler.cli import render, render_releases
from compiler.cli.params import JsonOption, ReleaseArgument, StoreOption, examples, option
from compiler.core.flags import INPUTS
from compiler.stores import DEFAULT_STORE


@examples(
    "compile verify digits@1.0.0 --key release.pub",
    "compile verify digits@stable --store s3://models/team --key release.pub --json",
    "compile verify digits@1.0.0 --identity https://github.com/ORG/REPO/.github/workflows/release.yml@refs/"
    "heads/main --issuer https://token.actions.githubusercontent.com",
)
def verify(
    release: ReleaseArgument,
    *,
    key: Annotated[
        str | None,  # not Path: it would turn env://VAR into env:/VAR
        option(
            "PUB.pem",
            INPUTS,
            "The publisher's public key (EC P-256 or Ed25519 PEM, a file or env://VAR).",
            show_default=False,
        ),
    ] = None,
    identity: Annotated[
        str | None,
        option(
            "ID",
            INPUTS,
            "For a keyless (Sigstore) release: the signer's identity "
            "as its certificate names it (a CI workflow URL or an email).",
            show_default=False,
        ),
    ] = None,
    issuer: Annotated[
        str | None,
        option(
            "URL",
            INPUTS,
            "With --identity: the OIDC issuer that vouched for it "
            "(GitHub Actions: https://token.actions.githubusercontent.com).",
            show_default=False,
        ),
    ] = None,
    source_repository: Annotated[
        str | None,
        option(
            "URL",
            INPUTS,
            "With --identity: the repository the signer's certificate must name as its source "
            "(https://github.com/ORG/REPO): under a shared reusable workflow the identity alone is every caller's.",
            show_default=False,
        ),
    ] = None,
    source_ref: Annotated[
        str | None,
        option(
            "REF",
            INPUTS,
            "With --identity: the source ref the certificate must name (refs/tags/v1.0.0).",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Check a release against a public key (or a keyless signer's identity): the signature over its manifest,
    its provenance's subjects against the manifest's plans, and every blob's sha256. Exit 0 verified, 1 unsigned,
    bad signature or a mismatch (saying which), 2 bad input, 3 Sigstore unreachable (keyless)."""
    from compiler.releases.verify import verify_release

    with nullcontext() if json else render.phase_progress("blobs") as progress:
        result = verify_release(
            store,
            release,
            key,
            identity=identity,
            issuer=issuer,
            source_repository=source_repository,
            source_ref=source_ref,
            progress=progress,
        )
    if json:
        render.emit_json(result)
    else:
        render_releases.verified(result)


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
        render.emit_json(statement, versioned=False)
    else:
        render_releases.provenance(statement)
