"""``compile ls --verify``: a store check that reads every manifest, channel and blob and lists what is damaged
(unreadable, or bytes that do not hash to their name), dangling (named by a manifest or channel but missing) and
unreferenced (a blob no manifest names: what a killed publisher leaves; harmless)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from compiler.core.errors import CompileError, InvalidInput
from compiler.core.release_files import release_blobs
from compiler.releases.manifest import read_channel, resolve
from compiler.stores import Store, open_store
from compiler.stores.base import Ref, blob_key, channel_key, holds, manifest_key


class Finding(BaseModel):
    kind: str
    """``damaged``, ``dangling`` or ``unreferenced``."""
    key: str
    """Where in the store (``releases/NAME/VERSION/manifest.json``, ``channels/NAME/CHANNEL``, ``blobs/sha256/D``)."""
    why: str


class StoreCheck(BaseModel):
    store: str
    name: str | None
    versions: int
    channels: int
    blobs: int
    """Blobs read whole and hashed."""
    bytes_read: int
    findings: list[Finding]
    unreferenced_listed: bool
    """False where unreferenced blobs cannot be told (one release of a shared pool; a registry lists no blobs)."""

    @property
    def passed(self) -> bool:
        return not any(f.kind != "unreferenced" for f in self.findings)


@dataclass
class _Tally:
    """What a store check has found so far: its findings, the blobs read (scope, digest, size recorded -> bytes
    read; a digest recorded with two sizes is read twice, as one of them is wrong) and every digest named."""

    findings: list[Finding] = field(default_factory=list)
    verified: dict[tuple[str, str, int], int] = field(default_factory=dict)
    referenced: set[str] = field(default_factory=set)


def verify_store(store: str | Store, name: str | None = None) -> StoreCheck:
    """Read and check everything the store holds (or everything of release ``name``)."""
    store = open_store(store)
    if name is not None and Ref.parse(name, tag_required=False).tag is not None:
        raise InvalidInput(f"ls --verify {name}: give a release NAME (every version of it is read), or none")
    names = [name] if name else store.names()
    tally = _Tally()
    versions = channels = 0
    for release in names:
        for version in store.versions(release):
            versions += 1
            manifest = _read(
                tally.findings,
                manifest_key(release, version),
                lambda r=release, v=version: resolve(store, Ref(r, v)).manifest,
            )
            if manifest is not None:
                _check_blobs(store, release, version, manifest, tally)
        channels += _check_channels(store, release, tally.findings)
    listed = None if name and not store.blobs_per_release else store.blobs(names[0] if name else "")
    if listed is not None:
        tally.findings += [
            Finding(
                kind="unreferenced",
                key=blob_key(d),
                why="no manifest names it (left by an interrupted publish, or by a release removed by hand)",
            )
            for d in listed
            if d not in tally.referenced
        ]
    return StoreCheck(
        store=store.uri,
        name=name,
        versions=versions,
        channels=channels,
        blobs=len(tally.verified),
        bytes_read=sum(tally.verified.values()),
        findings=tally.findings,
        unreferenced_listed=listed is not None,
    )


def _check_blobs(store: Store, release: str, version: str, manifest, tally: _Tally) -> None:
    """Every blob the version names (golden.npz too) read whole against its digest and size, once per store
    (per release where blobs are per release): dangling when missing, damaged when its bytes are other."""
    for label, ref in ((b.title, b.ref) for b in release_blobs(manifest)):
        tally.referenced.add(ref.sha256)
        seen = (release if store.blobs_per_release else "", ref.sha256, ref.size_bytes)
        if seen in tally.verified:
            continue
        tally.verified[seen] = 0
        key = blob_key(ref.sha256)
        state = _read(tally.findings, key, lambda r=release, b=ref: holds(store, r, b.sha256, b.size_bytes))
        if state is None and not any(f.key == key for f in tally.findings):
            tally.findings.append(
                Finding(kind="dangling", key=key, why=f"{release}@{version} names it ({label}); the store lacks it")
            )
        if state is not None:
            tally.verified[seen] = ref.size_bytes
        if state is False:
            tally.findings.append(
                Finding(
                    kind="damaged",
                    key=key,
                    why=f"not the {ref.size_bytes} bytes hashing to its name that {release}@{version} records for "
                    f"{label}; publish --repair from the build folder",
                )
            )


def _check_channels(store: Store, release: str, findings: list[Finding]) -> int:
    """Every channel of the release read, and dangling when it points at a version without a manifest; how many."""
    channels = store.channels(release)
    for channel in channels:
        record = _read(findings, channel_key(release, channel), lambda c=channel: read_channel(store, release, c))
        if record is not None and store.read_manifest(release, record[0].version) is None:
            findings.append(
                Finding(
                    kind="dangling",
                    key=channel_key(release, channel),
                    why=f"it points at {record[0].version}, which has no manifest",
                )
            )
    return len(channels)


def _read(findings: list[Finding], key: str, read):
    """What ``read`` gives, or None with a finding when it refuses the store's contents (damaged)."""
    try:
        return read()
    except CompileError as exc:
        if exc.exit_code == 3:  # the store itself is unreachable or denies: not a finding, the check stops
            raise
        findings.append(Finding(kind="damaged", key=key, why=str(exc)))
        return None
