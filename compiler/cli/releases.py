"""`compile publish`, `pull`, `ls` and `promote`: releases in a store."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from compiler.cli import render, render_releases
from compiler.cli.params import (
    AllowYankedOption,
    JsonOption,
    ReleaseArgument,
    SignKeyOption,
    StoreOption,
    VerifyKeyOption,
    examples,
    option,
    switch,
)
from compiler.core.errors import CheckFailed
from compiler.core.flags import CACHE, INPUTS, OUTPUT, PRECISIONS, TARGETS
from compiler.core.text import and_more, printable
from compiler.stores import DEFAULT_STORE  # the interface only: each backend is imported when its URI is used


@examples(
    "compile publish engines --name digits --version 1.0.0",
    "compile publish engines-ampere engines-ada --store s3://models/team --name digits --version 1.0.0 "
    "--sign-key /run/secrets/release.pem",
)
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
    allow_failed: Annotated[
        bool, switch("--allow-failed", INPUTS, "Publish the targets that built even if others or the check failed.")
    ] = False,
    repair: Annotated[
        bool,
        switch(
            "--repair",
            INPUTS,
            "First read back every blob of the folder the store holds "
            "and replace damaged ones (what pull or ls --verify "
            "reported).",
        ),
    ] = False,
    sign_key: SignKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    json: JsonOption = False,
) -> None:
    """Publish one or more build folders of a model as an immutable, content-addressed release, with its
    provenance; signed with --sign-key."""
    from compiler.releases.attest import signer_of
    from compiler.releases.publish import publish as publish_release

    signer = signer_of(sign_key)  # a bad key is refused before anything is read or sent
    with nullcontext() if json else render.phase_progress("blobs") as progress:
        result = publish_release(
            build_dirs, store, name, version, allow_failed=allow_failed, progress=progress, signer=signer, repair=repair
        )
    if json:
        render.emit_json(result)
    else:
        render_releases.published(result)
    for skipped in result.skipped_targets:
        sys.stderr.write(f"warning: left out {printable(skipped)} (--allow-failed)\n")


@examples(
    "compile pull digits@1.0.0 --sku rtx-4090 --out digits.plan",
    "compile pull digits@stable --store s3://models/team --sku auto --precision fp16 --out /models/digits.plan "
    "--verify-key release.pub",
)
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
    precision: Annotated[str | None, option(PRECISIONS, TARGETS, "The precision (when it has several).")] = None,
    tensorrt_version: Annotated[
        str | None,
        option(
            "VERSION",
            TARGETS,
            "Your runtime's version (TensorRT 10.8, TensorRT-RTX 1.7.1.116): only a plan it may load is picked.",
        ),
    ] = None,
    verify_key: VerifyKeyOption = None,
    store: StoreOption = DEFAULT_STORE,
    no_cache: Annotated[bool, switch("--no-cache", CACHE, "Download even if the pull cache has the plan.")] = False,
    allow_yanked: AllowYankedOption = False,
    out: Annotated[
        Path,
        option(
            "FILE", OUTPUT, "Where the plan goes (its record, FILE.json, is written beside it).", show_default=False
        ),
    ],
    golden: Annotated[
        bool,
        switch(
            "--golden",
            OUTPUT,
            "Also write the release's golden inputs and FP32 reference outputs beside the plan (golden.npz), verified.",
        ),
    ] = False,
    json: JsonOption = False,
) -> None:
    """The one verified plan of a release for a GPU SKU."""
    from compiler.core.errors import InvalidInput
    from compiler.core.records import GOLDEN_FILE
    from compiler.releases.pull import pull as pull_engine

    if golden and Path(out).name == GOLDEN_FILE:
        raise InvalidInput(
            f"--out {out}: {GOLDEN_FILE} is written beside the plan with --golden; name the plan otherwise"
        )
    result = pull_engine(
        store,
        release,
        out=out,
        sku=sku,
        precision=precision,
        tensorrt_version=tensorrt_version,
        use_cache=not no_cache,
        verify_key=verify_key,
        allow_yanked=allow_yanked,
        golden=Path(out).with_name(GOLDEN_FILE) if golden else None,
    )
    render.warnings(result.warnings)
    if json:
        render.emit_json(result)
    else:
        render_releases.pulled(result)


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


@examples(
    "compile promote digits@1.0.0 --channel stable",
    "compile promote digits@1.1.0 --channel canary --store s3://models/team",
)
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
    allow_yanked: AllowYankedOption = False,
    repair: Annotated[
        bool, switch("--repair", INPUTS, "Replace a damaged channel record (its history starts again at this move).")
    ] = False,
    store: StoreOption = DEFAULT_STORE,
    allow_failed: Annotated[
        bool,
        switch(
            "--allow-failed", INPUTS, "Promote a version whose check failed or that was published with --allow-failed."
        ),
    ] = False,
    json: JsonOption = False,
) -> None:
    """Point a channel at a published version (the one mutable operation, as a compare-and-swap). A version whose
    check failed, or published with --allow-failed, is refused (exit 1) unless --allow-failed."""
    from compiler.releases.channels import promote as promote_release

    result = promote_release(
        store, release, channel, allow_yanked=allow_yanked, allow_failed=allow_failed, repair=repair
    )
    if json:
        render.emit_json(result)
    else:
        render_releases.promoted(result)


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
