"""`compile gc --store`: a store that stays tidy. Versions no channel needs, beyond the newest N of each release
and older than the days kept, lose their manifests; then the blobs nothing references any more are swept
(:mod:`compiler.cache.sweep`, safe beside publishers at work)."""

from __future__ import annotations

import time
from calendar import timegm

from pydantic import BaseModel

from compiler.cache.sweep import Sweep, SweepFigures, refuse_hidden_entries, sweep_or_note
from compiler.core.errors import CompileError, InvalidInput
from compiler.releases.manifest import parse_manifest, read_channel
from compiler.stores import Store, open_store

ROLLBACK_DEPTH = 2
"""Versions a channel pointed at before its current one that gc keeps, so `compile promote` can roll back."""


class VersionFate(BaseModel):
    release: str
    kept: bool
    why: str
    """channel stable, rollback of stable, newest 2, younger than 7 days, within the grace, unreadable; or the
    reason it goes (older than what is kept)."""
    size_bytes: int = 0


class GcReport(SweepFigures):
    store: str
    dry_run: bool
    versions: list[VersionFate]
    removed_versions: int


def check_retention(keep: int | None, keep_days: float | None, grace_minutes: float) -> None:
    if keep is None and keep_days is None:
        raise InvalidInput(
            "give --keep N and/or --keep-days D: gc removes every version that neither they nor a channel keeps"
        )
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= 1_000_000):
        raise InvalidInput(f"--keep {keep}: give a whole number of versions from 0 to 1000000")
    for flag, value in (("--keep-days", keep_days), ("--grace-minutes", grace_minutes)):
        if value is not None and not 0 <= value <= 36500:
            raise InvalidInput(f"{flag} {value}: give a number from 0 to 36500")


def _published_at(text: str) -> float:
    try:
        return float(timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return time.time()  # an unreadable time: as new as can be, so it is kept


def gc_store(
    store: str | Store,
    *,
    keep: int | None = None,
    keep_days: float | None = None,
    grace_minutes: float = 60,
    dry_run: bool = False,
) -> GcReport:
    """Remove what no channel, ``keep`` (newest N per release) or ``keep_days`` keeps and is older than the grace."""
    check_retention(keep, keep_days, grace_minutes)
    started, now = time.monotonic(), time.time()
    store = open_store(store)
    requests = [0]

    def count() -> None:
        requests[0] += 1

    fates: list[VersionFate] = []
    doomed: set[tuple[str, str]] = set()
    known: dict[tuple[str, str], bytes] = {}
    """Manifests read once: the sweep lists versions again (to see new ones) but reads no manifest twice."""
    count()
    for name in store.names():
        fates_of, doomed_of = _versions_of(store, name, keep, keep_days, grace_minutes * 60, now, count, known)
        fates += fates_of
        doomed |= doomed_of
    refuse_hidden_entries(store, count)  # a channel that is a link keeps a version gc cannot see
    if not dry_run:
        for name, version in sorted(doomed):
            store.delete_manifest(name, version)
            count()
    # the removed versions are skipped even when the store still lists them for a moment (S3 listings lag)
    sweep, note = sweep_or_note(store, doomed, grace_minutes * 60, dry_run, count=count, known=known)
    return GcReport(
        store=store.uri,
        dry_run=dry_run,
        versions=fates,
        removed_versions=len(doomed),
        **Sweep.figures(sweep),
        blob_note=note,
        requests=requests[0],
        seconds=round(time.monotonic() - started, 3),
    )


def _versions_of(
    store: Store,
    name: str,
    keep: int | None,
    keep_days: float | None,
    grace: float,
    now: float,
    count,
    known: dict[tuple[str, str], bytes],
) -> tuple[list[VersionFate], set[tuple[str, str]]]:
    """What happens to each version of one release, and the (name, version) pairs to remove."""
    kept: dict[str, str] = {}
    count()
    for channel in store.channels(name):
        count()
        record = read_channel(store, name, channel)
        if record is None:
            continue
        kept.setdefault(record[0].version, f"channel {channel}")
        earlier = [move.version for move in reversed(record[0].history) if move.version != record[0].version]
        for version in list(dict.fromkeys(earlier))[:ROLLBACK_DEPTH]:
            kept.setdefault(version, f"rollback of {channel}")
    count()
    published: list[tuple[float, str, int]] = []
    for version in store.versions(name):
        count()
        try:
            data = store.read_manifest(name, version) or b""
            known[(name, version)] = data
            manifest = parse_manifest(data, store, name, version)
        except CompileError:
            kept.setdefault(version, "unreadable manifest (kept; see compile ls)")
            continue
        size = sum(e.plan.size_bytes for e in manifest.content.engines)
        published.append((_published_at(manifest.published.at), version, size))
    published.sort(reverse=True)
    for index, (at, version, _) in enumerate(published):
        if keep is not None and index < keep:
            kept.setdefault(version, f"newest {keep}")
        elif keep_days is not None and now - at < keep_days * 86400:
            kept.setdefault(version, f"younger than {keep_days:g} days")
        elif now - at < grace:
            kept.setdefault(version, "within the grace period")
    fates = [
        VersionFate(
            release=f"{name}@{version}",
            kept=version in kept,
            size_bytes=size,
            why=kept.get(version, "older than what is kept"),
        )
        for _, version, size in published
    ]
    fates += [
        VersionFate(release=f"{name}@{v}", kept=True, why=why)
        for v, why in kept.items()
        if v not in {p[1] for p in published} and why.startswith("unreadable")
    ]
    return fates, {(name, version) for _, version, _ in published if version not in kept}
