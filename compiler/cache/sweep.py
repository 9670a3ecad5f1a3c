"""Removing blobs nothing needs, safely beside publishers at work: the second half of ``compile gc``.

A blob goes only when no remaining manifest, staged part, cache entry or live lease (:mod:`compiler.cache.lease`:
what a publisher at work relies on) mentions its digest, and only once it has been found so for a grace period:
the first sweep that finds it marks it (a record beside it, with the time), a later one removes it. The references
are read after the manifests were removed (one written meanwhile is seen), the leases after the references and
again before each removal once the last read is half a second old. With a grace of 0 the mark and the removal are
one sweep. Nothing is removed while a listing hides an entry (a link in a folder store).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from compiler.cache.lease import SweepGuard
from compiler.cache.remote import KIND_FILES
from compiler.core.errors import CheckFailed
from compiler.core.jsonio import parse_json
from compiler.core.record_files import MAX_RECORD_BYTES
from compiler.stores import Store
from compiler.stores.base import Unsupported

DIGEST = re.compile(rb"[0-9a-f]{64}")
MARKS = "marks"
"""The cache kind whose entries are the marks of unreferenced blobs (key: the blob's digest)."""
KINDS = tuple(KIND_FILES)
POOL = "cache/engines"
"""The blob pool gc lists and removes from (one pool holds every blob of a store, releases' and the cache's)."""


@dataclass
class Sweep:
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    marked: list[str] = field(default_factory=list)
    """Unreferenced, but found so only now (or within the grace): removed by a later sweep."""

    @staticmethod
    def figures(sweep: Sweep | None) -> dict[str, int]:
        """The report fields of a sweep (zeros when none ran, as on a registry)."""
        if sweep is None:
            return {"removed_blobs": 0, "freed_bytes": 0, "marked_blobs": 0}
        return {
            "removed_blobs": len(sweep.removed),
            "freed_bytes": sweep.freed_bytes,
            "marked_blobs": len(sweep.marked),
        }


def references(
    store: Store,
    skip: set[tuple[str, str]] = frozenset(),
    count: Callable[[], None] = lambda: None,
    known: dict[tuple[str, str], bytes] | None = None,
    known_entries: dict[tuple[str, str], bytes] | None = None,
) -> set[str]:
    """Every digest a manifest, a staged part or a cache entry mentions (any 64 hex digits: a record's other digests
    only keep a blob more, never less). ``skip``: (name, version) and (kind, key) pairs being removed (a dry run
    does not remove them). ``known``: manifests already read (immutable, so not read again); the versions are
    listed afresh, so one published meanwhile is read. ``known_entries``: cache entries already read, by (kind,
    key): create-only too (one replaced after a refusal names blobs sent since, inside the grace)."""
    found: set[str] = set()
    for name in store.names():
        count()
        for version in store.versions(name):
            if (name, version) in skip:
                continue
            data = (known or {}).get((name, version))
            if data is None:
                count()
                data = store.read_manifest(name, version) or b""
            found.update(d.decode() for d in DIGEST.findall(data))
    for name, version in store.staged_releases():
        count()
        for part in store.staged(name, version).values():
            found.update(d.decode() for d in DIGEST.findall(part))
    for kind in KINDS:
        count()
        for key in _keys(store, kind):
            if (kind, key) not in skip:
                data = (known_entries or {}).get((kind, key))
                if data is None:
                    count()
                    data = store.read_entry(kind, key) or b""
                found.update(d.decode() for d in DIGEST.findall(data))
    return found


def _keys(store: Store, kind: str) -> list[str]:
    try:
        return store.entry_keys(kind)
    except Unsupported:  # a store without a remote cache holds no entries (a denied listing is no such store)
        return []


class SweepFigures(BaseModel):
    """What a gc's sweep of blobs did (compile gc --store and --remote-cache report it alike)."""

    removed_blobs: int
    freed_bytes: int
    marked_blobs: int
    """Unreferenced blobs left for a later gc (found so for the first time, or within the grace)."""
    blob_note: str | None = None
    requests: int
    seconds: float


def sweep_or_note(store: Store, *arguments: Any, **keywords: Any) -> tuple[Sweep | None, str | None]:
    """:func:`sweep_blobs` (of the same arguments), or on a store that cannot list its blobs (a registry) no sweep
    and what frees them."""
    try:
        return sweep_blobs(store, *arguments, **keywords), None
    except Unsupported:
        return None, "blobs are freed by the registry's own garbage collection (registry garbage-collect)"


def sweep_blobs(
    store: Store,
    skip: set[tuple[str, str]],
    grace_seconds: float,
    dry_run: bool,
    count: Callable[[], None] = lambda: None,
    known: dict[tuple[str, str], bytes] | None = None,
    known_entries: dict[tuple[str, str], bytes] | None = None,
) -> Sweep:
    """Mark unreferenced blobs, remove those marked longer than the grace ago (and written before it). The blobs are
    listed before the references are read: a manifest written after the listing is seen, a blob sent after it is
    not a candidate at all."""
    now = time.time()
    result = Sweep()
    with SweepGuard(store, dry_run, count, skip) as guard:
        blobs = store.blob_digests(POOL)
        count()
        referenced = references(store, skip, count, known, known_entries)
        refuse_hidden(store)
        referenced |= guard.read_leases()
        marks = {key: _mark_time(store, key, count) for key in _keys(store, MARKS)}
        for digest, (size, written) in sorted(blobs.items()):
            if digest in referenced:
                if digest in marks and not dry_run:
                    store.delete_entry(MARKS, digest)
                    count()
                continue
            marked_at = marks.get(digest)
            if marked_at is None and grace_seconds > 0:
                result.marked.append(digest)
                if not dry_run:
                    store.create_entry(MARKS, digest, json.dumps({"at": now}).encode(), [])
                    count()
                continue
            old = now - written >= grace_seconds and (marked_at is None or now - marked_at >= grace_seconds)
            if not old or (not dry_run and not guard.may_remove(digest)):
                result.marked.append(digest)
                continue
            _remove(store, digest, marked_at is not None, dry_run, count)
            result.removed.append(digest)
            result.freed_bytes += size
    return result


def _remove(store: Store, digest: str, marked: bool, dry_run: bool, count: Callable[[], None]) -> None:
    if dry_run:
        return
    store.delete_blob(POOL, digest)
    count()
    if marked:
        store.delete_entry(MARKS, digest)
        count()


def refuse_hidden_entries(store: Store, count: Callable[[], None] = lambda: None) -> None:
    """What a gc calls before it removes versions or entries: the staging area and the cache listed (what the sweep
    will read), and :func:`refuse_hidden`, so a refused gc has removed nothing."""
    for name, version in store.staged_releases():
        count()
        store.staged(name, version)
    for kind in (*KINDS, MARKS):
        count()
        _keys(store, kind)
    refuse_hidden(store)


def refuse_hidden(store: Store) -> None:
    """Exit 1 before anything is removed when a listing gc relies on skipped an entry (a channel, staged part or
    cache entry that is a link would keep what it names, and gc cannot tell what: it never follows one). A blob that
    is a link is only damage: no listing of blobs gc removes from shows it, so gc leaves it where it is."""
    hidden = [entry for entry in store.hidden() if not entry.startswith("blobs/")]
    if hidden:
        raise CheckFailed(
            f"store {store.uri}: {', '.join(hidden[:5])}{' …' if len(hidden) > 5 else ''} in place of a plain file "
            "or folder; gc removes nothing while a listing hides what may need keeping: put the file it stands "
            "for there (compile promote again for a channel) or remove it"
        )


def _mark_time(store: Store, key: str, count: Callable[[], None]) -> float:
    count()
    try:
        return float(parse_json(store.read_entry(MARKS, key) or b"{}", MAX_RECORD_BYTES).get("at", 0))
    except (ValueError, TypeError, AttributeError):
        return 0.0  # a damaged mark: as old as can be, so the blob is judged by its own age
