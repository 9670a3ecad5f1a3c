"""Channels: a name (stable, canary) that points at a published version, moved by compare-and-swap with its
whole history kept."""

from __future__ import annotations

import random
import time

from pydantic import BaseModel

from compiler.core.errors import EnvironmentProblem
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
    """``moved``, or ``unchanged`` when the channel already pointed there."""
    attempts: int


def promote(store: str | Store, ref: str | Ref, channel: str) -> PromoteResult:
    """Point ``channel`` at ``ref``'s version (which must be published), as a compare-and-swap retried against
    concurrent promotions, so none is lost and every move stays in the channel's history."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    check_channel(channel)
    store = open_store(store)
    version = resolve(store, Ref(ref.name, ref.tag)).version
    refuse_shadowing(store, ref.name, channel, new="channel")
    deadline = time.monotonic() + PROMOTE_SECONDS
    attempts = 0
    while True:
        attempts += 1
        current = read_channel(store, ref.name, channel)
        previous = current[0].version if current else None
        if previous == version:
            return PromoteResult(store=store.uri, name=ref.name, channel=channel, version=version, previous=previous,
                                 status="unchanged", attempts=attempts)
        who = provenance()
        kept = current[0].history[-(MAX_HISTORY - 1):] if current else []
        history = [*kept, ChannelMove(version=version, by=who.by, at=who.at)]
        record = ChannelRecord(name=ref.name, channel=channel, version=version, history=history)
        if store.write_channel(ref.name, channel, record.model_dump_json(indent=2).encode(),
                               current[1] if current else None):
            return PromoteResult(store=store.uri, name=ref.name, channel=channel, version=version, previous=previous,
                                 status="moved", attempts=attempts)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"{ref.name}@{channel}: still moving under other promotions after "
                                     f"{attempts} attempts; try again")
        time.sleep(random.uniform(0.01, 0.05 * min(attempts, 10)))
