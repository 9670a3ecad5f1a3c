"""Channels: a name (stable, canary) that points at a published version, moved by compare-and-swap with its
whole history kept."""

from __future__ import annotations

import random
import time
from typing import Any

from pydantic import BaseModel

from compiler.core.errors import CheckFailed, EnvironmentProblem
from compiler.core.options import PromoteOptions
from compiler.core.records import ChannelMove, ChannelRecord
from compiler.releases.manifest import provenance, read_channel, refuse_shadowing, resolve
from compiler.stores import Store, open_store
from compiler.stores.base import Ref, check_channel

MAX_HISTORY = 10_000
"""Moves a channel record keeps (the latest; ~1 MB): a record must stay far below what a reader takes (64 MiB),
or the channel would become unreadable after enough promotions."""
PROMOTE_SECONDS = 60.0
"""How long a promotion keeps retrying against concurrent ones before it gives up."""


class PromoteResult(BaseModel):
    store: str
    name: str
    channel: str
    version: str
    previous: str | None
    status: str
    """``moved``, ``unchanged`` when the channel already pointed there, ``signed`` when it pointed there unsigned
    and a key was given, or ``repaired`` when ``--repair`` replaced a damaged record."""
    attempts: int
    signed: bool = False
    """Whether the channel's move is signed (``--sign-key``)."""


def promote(
    store: str | Store,
    ref: str | Ref,
    channel: str,
    options: PromoteOptions | None = None,
    *,
    signer: Any = None,
) -> PromoteResult:
    """Point ``channel`` at ``ref``'s version (which must be published), as a compare-and-swap retried against
    concurrent promotions, so none is lost and every move stays in the channel's history. A version whose check
    failed, or that was published with ``--allow-failed``, is refused (CheckFailed) unless ``options.allow_failed``.
    ``options.repair``: a channel record that is damaged (unreadable, too large, not ours) is replaced, still by
    compare-and-swap on what was there, with a history that starts at this move."""
    options = options or PromoteOptions()
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    check_channel(channel)
    store = open_store(store)
    resolved = resolve(store, Ref(ref.name, ref.tag), allow_yanked=options.allow_yanked)
    version, failures = resolved.version, resolved.manifest.failures
    if failures and not options.allow_failed:
        raise CheckFailed(
            f"{ref.name}@{version}: not promoted to {channel}: it was published with failures "
            f"({'; '.join(failures[:3])}{'; ...' if len(failures) > 3 else ''}); fix and publish a new "
            f"version, or pass --allow-failed to promote it anyway"
        )
    refuse_shadowing(store, ref.name, channel, new="channel")
    deadline = time.monotonic() + PROMOTE_SECONDS
    attempts = 0
    while True:
        attempts += 1
        current, expected = _current(store, ref.name, channel, options.repair)
        previous = current[0].version if current else None
        said = dict(store=store.uri, name=ref.name, channel=channel, version=version, previous=previous)
        if previous == version and (signer is None or current[0].signature):
            return PromoteResult(**said, status="unchanged", attempts=attempts, signed=bool(current[0].signature))
        record = _next_record(ref.name, channel, version, current[0] if current else None)
        if signer is not None:
            from compiler.releases.channel_signing import signed_record

            record = signed_record(record, resolved.manifest_sha256, signer)
        if store.write_channel(ref.name, channel, record.model_dump_json(indent=2).encode(), expected):
            status = "signed" if previous == version else "moved" if current or expected is None else "repaired"
            return PromoteResult(**said, status=status, attempts=attempts, signed=signer is not None)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"{ref.name}@{channel}: still moving under other promotions after {attempts} attempts; try again"
            )
        time.sleep(random.uniform(0.01, 0.05 * min(attempts, 10)))


def _next_record(name: str, channel: str, version: str, current: ChannelRecord | None) -> ChannelRecord:
    """The channel after a move to ``version`` (its history and count of moves one longer), or, when it points
    there already (a move made unsigned, now signed), the same state."""
    if current is not None and current.version == version:
        return current.model_copy(update={"sequence": max(current.sequence, len(current.history)), "signature": None})
    who = provenance()
    kept = current.history[-(MAX_HISTORY - 1) :] if current else []
    sequence = max(current.sequence, len(current.history)) + 1 if current else 1
    history = [*kept, ChannelMove(version=version, by=who.by, at=who.at)]
    return ChannelRecord(name=name, channel=channel, version=version, history=history, sequence=sequence)


def _current(
    store: Store, name: str, channel: str, repair: bool
) -> tuple[tuple[ChannelRecord, str] | None, str | None]:
    """The channel's record and the token a move must name; with ``repair``, a damaged record counts as none
    (its token still guards the swap, so a concurrent repair or move is not overwritten)."""
    try:
        current = read_channel(store, name, channel)
    except CheckFailed:
        if not repair:
            raise
        found = store.read_channel(name, channel)
        return None, found[1] if found else None
    return current, current[1] if current else None
