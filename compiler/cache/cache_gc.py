"""`compile gc --remote-cache`: the remote cache kept to an age and a size. Entries older than the days kept go,
then the oldest until the cache fits the size cap; then the blobs nothing references any more are swept
(:mod:`compiler.cache.sweep`)."""

from __future__ import annotations

import time
from collections import Counter

from pydantic import ValidationError

from compiler.cache.remote import EntryIndex, open_remote
from compiler.cache.sweep import KINDS, Sweep, SweepFigures, refuse_hidden_entries, sweep_or_note
from compiler.core.errors import InvalidInput


class CacheGcReport(SweepFigures):
    store: str
    dry_run: bool
    entries: int
    removed_entries: list[str]
    """``kind/key`` of each entry removed (or that would be)."""
    kept_bytes: int


def gc_cache(
    uri: str,
    *,
    keep_days: float | None = None,
    max_bytes: int | None = None,
    grace_minutes: float = 60,
    dry_run: bool = False,
) -> CacheGcReport:
    if keep_days is None and max_bytes is None:
        raise InvalidInput("give --keep-days D and/or --max-size SIZE: what the remote cache keeps")
    if keep_days is not None and not 0 <= keep_days <= 36500:
        raise InvalidInput(f"--keep-days {keep_days}: give a number from 0 to 36500")
    if not 0 <= grace_minutes <= 36500 * 1440:
        raise InvalidInput(f"--grace-minutes {grace_minutes}: give a number of minutes from 0")
    started, now = time.monotonic(), time.time()
    store = open_remote(uri).store
    requests = [0]

    def count() -> None:
        requests[0] += 1

    entries: list[tuple[float, str, str, dict[str, int]]] = []
    raw: dict[tuple[str, str], bytes] = {}
    for kind in KINDS:
        count()
        for key in store.entry_keys(kind):
            count()
            raw[kind, key] = store.read_entry(kind, key) or b""
            try:
                index = EntryIndex.model_validate_json(raw[kind, key])
                entries.append((index.created, kind, key, {f.sha256: f.size for f in index.files.values()}))
            except (ValidationError, ValueError):
                entries.append((0.0, kind, key, {}))  # a damaged entry: the first to go
    entries.sort()
    doomed = [
        (kind, key)
        for created, kind, key, _ in entries
        if keep_days is not None and now - created >= keep_days * 86400 and now - created >= grace_minutes * 60
    ]
    live = _Live(entries, doomed)
    if max_bytes is not None:
        for created, kind, key, blobs in entries:  # oldest first, until the rest fits
            if live.bytes <= max_bytes or now - created < grace_minutes * 60:
                break
            if (kind, key) not in live.gone:
                doomed.append((kind, key))
                live.drop(kind, key, blobs)
    refuse_hidden_entries(store, count)
    if not dry_run:
        for kind, key in doomed:
            store.delete_entry(kind, key)
            count()
    sweep, note = sweep_or_note(store, set(doomed), grace_minutes * 60, dry_run, count=count, known_entries=raw)
    return CacheGcReport(
        store=store.uri,
        dry_run=dry_run,
        entries=len(entries),
        removed_entries=[f"{kind}/{key}" for kind, key in doomed],
        kept_bytes=live.bytes,
        **Sweep.figures(sweep),
        blob_note=note,
        requests=requests[0],
        seconds=round(time.monotonic() - started, 3),
    )


class _Live:
    """The bytes of the blobs the entries that stay hold (a blob two entries share counted once), kept as entries
    are dropped: each drop costs its own blobs, not a recount of the cache."""

    def __init__(self, entries: list[tuple[float, str, str, dict[str, int]]], doomed: list[tuple[str, str]]) -> None:
        self.gone = set(doomed)
        self.sizes = {d: s for *_, blobs in entries for d, s in blobs.items()}
        self.holders = Counter(d for _, kind, key, blobs in entries if (kind, key) not in self.gone for d in blobs)
        self.bytes = sum(self.sizes[d] for d in self.holders)

    def drop(self, kind: str, key: str, blobs: dict[str, int]) -> None:
        self.gone.add((kind, key))
        for digest in blobs:
            self.holders[digest] -= 1
            if not self.holders[digest]:
                del self.holders[digest]
                self.bytes -= self.sizes[digest]
