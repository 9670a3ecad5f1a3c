"""`compile gc`: remove what a store or the remote cache no longer needs."""

from __future__ import annotations

import re
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import JsonOption, examples, option, switch
from compiler.core.errors import InvalidInput
from compiler.core.flags import CACHE, OUTPUT, STORE
from compiler.core.plugins import store_forms

SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[KMGT]?)i?B?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``50G``, ``512MiB``, ``1.5T`` or a number of bytes."""
    match = SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(f"--max-size {text!r}: give a size such as 500M, 50G or 2T")
    shift = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[match["unit"].upper()]
    return int(float(match["number"]) * (1 << shift))


@examples(
    "compile gc --store s3://models/team --keep 5 --dry-run",
    "compile gc --store ./artifacts --keep 3 --keep-days 30 --json",
    "compile gc --remote-cache s3://ci-cache/compile --keep-days 14 --max-size 200G",
)
def gc(
    store: Annotated[
        str | None,
        option("URI", STORE, f"The store whose old versions go ({store_forms()})."),
    ] = None,
    remote_cache: Annotated[str | None, option("URI", CACHE, "The remote cache to trim instead.")] = None,
    keep: Annotated[
        int | None,
        option(
            "N",
            STORE,
            "Keep the newest N versions of each release (channels' versions "
            "and their rollback history are always kept).",
        ),
    ] = None,
    keep_days: Annotated[
        float | None, option("D", STORE, "Keep versions (or cache entries) younger than D days.")
    ] = None,
    max_size: Annotated[
        str | None, option("SIZE", CACHE, "Remote cache: drop the oldest entries until it fits (500M, 50G, 2T).")
    ] = None,
    grace_minutes: Annotated[
        float,
        option(
            "M",
            STORE,
            "Nothing younger than this goes, and an unreferenced blob "
            "goes only once it has been so for this long (publishers at work).",
        ),
    ] = 60,
    dry_run: Annotated[
        bool, switch("--dry-run", OUTPUT, "List what would go and the bytes freed; remove nothing.")
    ] = False,
    json: JsonOption = False,
) -> None:
    """Remove old versions and the blobs only they used, or trim the remote cache."""
    if (store is None) == (remote_cache is None):
        raise InvalidInput("give --store URI (releases) or --remote-cache URI (the remote cache), one of them")
    if store is not None:
        if max_size is not None:
            raise InvalidInput("--max-size trims the remote cache; for a store give --keep N and/or --keep-days D")
        from compiler.releases.store_gc import gc_store

        report = gc_store(store, keep=keep, keep_days=keep_days, grace_minutes=grace_minutes, dry_run=dry_run)
    else:
        if keep is not None:
            raise InvalidInput(
                "--keep counts release versions; for the remote cache give --keep-days D and/or --max-size SIZE"
            )
        from compiler.cache.cache_gc import gc_cache

        report = gc_cache(
            remote_cache,
            keep_days=keep_days,
            grace_minutes=grace_minutes,
            dry_run=dry_run,
            max_bytes=None if max_size is None else parse_size(max_size),
        )
    if json:
        render.emit_json(report)
    else:
        render.collected(report)
