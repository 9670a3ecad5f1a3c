"""Browsing a store: release names, each one's versions and channels, one version's manifest."""

from __future__ import annotations

import re

from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.records import ReleaseManifest, YankRecord
from compiler.releases.manifest import parse_manifest, read_channel, resolve, what_there_is, yanked
from compiler.stores import Store, open_store
from compiler.stores.base import Ref


class ReleaseSummary(BaseModel):
    name: str
    versions: list[str]
    channels: dict[str, str]
    latest: str | None = None
    """The highest version not yanked (1.10 above 1.9); None when every version is."""


class VersionSummary(BaseModel):
    version: str
    engines: int
    size_bytes: int
    published_at: str
    check: str
    """passed, failed or not run."""
    yanked: str | None = None
    """Why the version was withdrawn (``compile yank``), if it was."""


class Listing(BaseModel):
    store: str
    releases: list[ReleaseSummary] = []
    name: str | None = None
    versions: list[VersionSummary] = []
    channels: dict[str, str] = {}
    manifest: ReleaseManifest | None = None
    yanked: YankRecord | None = None
    skipped: list[str] = []
    """Entries the listing did not follow because they are not plain files or folders (a channel or release that
    is a link, a FIFO): named, never silently left out; gc refuses to run while they are there."""


def list_store(store: str | Store, ref: str | Ref | None = None) -> Listing:
    """Everything (names, versions, channels), one release's versions, or one version's manifest; with the entries
    the listing did not follow (:attr:`Listing.skipped`)."""
    if ref is not None and not isinstance(ref, Ref):
        ref = Ref.parse(ref, tag_required=False)
    store = open_store(store)
    listing = _listing(store, ref)
    skipped = [entry for entry in store.hidden() if not entry.startswith("blobs/")]
    return listing.model_copy(update={"skipped": skipped}) if skipped else listing


def _summary(store: Store, name: str) -> ReleaseSummary:
    versions = store.versions(name)
    return ReleaseSummary(name=name, versions=versions, channels=_channels(store, name), latest=latest(store, name))


def latest(store: Store, name: str, before: str | None = None) -> str | None:
    """The newest version of ``name`` that is not yanked (older than ``before``, when given)."""
    versions = store.versions(name)
    if before is not None:
        versions = [v for v in versions if version_order(v) < version_order(before)]
    newest_first = sorted(versions, key=version_order, reverse=True)
    return next((v for v in newest_first if store.read_yank(name, v) is None), None)  # one look, unless yanked


def version_order(version: str) -> list[tuple[int, int | str]]:
    """Numbers compared as numbers (``1.10.0`` after ``1.9.0``), the rest as text; a number sorts before text."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", version) if part]


def _listing(store: Store, ref: Ref | None) -> Listing:
    if ref is None:
        return Listing(
            store=store.uri,
            releases=[_summary(store, name) for name in store.names()],
        )
    if ref.tag is not None:
        resolved = resolve(store, ref)
        return Listing(
            store=store.uri, name=ref.name, manifest=resolved.manifest, yanked=yanked(store, ref.name, resolved.version)
        )
    versions = []
    for version in store.versions(ref.name):
        data = store.read_manifest(ref.name, version)
        if data is None:  # a folder a killed publisher left without its manifest
            continue
        manifest = parse_manifest(data, store, ref.name, version)
        check = manifest.content.check
        withdrawn = yanked(store, ref.name, version)
        versions.append(
            VersionSummary(
                version=version,
                engines=len(manifest.content.engines),
                size_bytes=sum(e.plan.size_bytes for e in manifest.content.engines),
                published_at=manifest.published.at,
                check="not run" if check is None else "passed" if check.passed else "failed",
                yanked=withdrawn.reason if withdrawn else None,
            )
        )
    if not versions:
        raise InvalidInput(f"{ref.name}: no such release in {store.uri}; {what_there_is(store, ref.name)}")
    return Listing(store=store.uri, name=ref.name, versions=versions, channels=_channels(store, ref.name))


def _channels(store: Store, name: str) -> dict[str, str]:
    channels = {}
    for channel in store.channels(name):
        record = read_channel(store, name, channel)
        if record is not None:
            channels[channel] = record[0].version
    return channels
