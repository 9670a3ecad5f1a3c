"""``compile ls --verify``: a store check that reads every manifest, channel and blob and lists what is damaged
(unreadable, or bytes that do not hash to their name), dangling (named by a manifest or channel but missing) and
unreferenced (a blob no manifest names: what a killed publisher leaves; harmless)."""

from __future__ import annotations

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


def verify_store(store: str | Store, name: str | None = None) -> StoreCheck:
    """Read and check everything the store holds (or everything of release ``name``)."""
    store = open_store(store)
    if name is not None and Ref.parse(name, tag_required=False).tag is not None:
        raise InvalidInput(f"ls --verify {name}: give a release NAME (every version of it is read), or none")
    names = [name] if name else store.names()
    findings: list[Finding] = []
    verified: dict[tuple[str, str, int], int] = {}  # (scope, digest, size recorded) -> bytes read
    referenced: set[str] = set()
    versions = channels = 0
    for release in names:
        for version in store.versions(release):
            versions += 1
            manifest = _read(
                findings,
                manifest_key(release, version),
                lambda r=release, v=version: resolve(store, Ref(r, v)).manifest,
            )
            if manifest is None:
                continue
            for label, ref in (
                (b.title, b.ref) for b in release_blobs(manifest)
            ):  # golden.npz too: all a release names
                referenced.add(ref.sha256)
                scope = release if store.blobs_per_release else ""
                seen = (scope, ref.sha256, ref.size_bytes)  # a digest recorded with two sizes: one is wrong
                if seen in verified:
                    continue
                verified[seen] = 0
                state = _read(
                    findings,
                    blob_key(ref.sha256),
                    lambda r=release, b=ref: holds(store, r, b.sha256, b.size_bytes),
                )
                if state is None and not any(f.key == blob_key(ref.sha256) for f in findings):
                    findings.append(
                        Finding(
                            kind="dangling",
                            key=blob_key(ref.sha256),
                            why=f"{release}@{version} names it ({label}); the store lacks it",
                        )
                    )
                if state is not None:
                    verified[seen] = ref.size_bytes
                if state is False:
                    findings.append(
                        Finding(
                            kind="damaged",
                            key=blob_key(ref.sha256),
                            why=f"not the {ref.size_bytes} bytes hashing to its name that "
                            f"{release}@{version} records for {label}; publish --repair from the "
                            "build folder",
                        )
                    )
        for channel in store.channels(release):
            channels += 1
            record = _read(
                findings, channel_key(release, channel), lambda r=release, c=channel: read_channel(store, r, c)
            )
            if record is not None and store.read_manifest(release, record[0].version) is None:
                findings.append(
                    Finding(
                        kind="dangling",
                        key=channel_key(release, channel),
                        why=f"it points at {record[0].version}, which has no manifest",
                    )
                )
    listed = None if name and not store.blobs_per_release else store.blobs(names[0] if name else "")
    if listed is not None:
        findings += [
            Finding(
                kind="unreferenced",
                key=blob_key(d),
                why="no manifest names it (left by an interrupted publish, or by a release removed by hand)",
            )
            for d in listed
            if d not in referenced
        ]
    return StoreCheck(
        store=store.uri,
        name=name,
        versions=versions,
        channels=channels,
        blobs=len(verified),
        bytes_read=sum(verified.values()),
        findings=findings,
        unreferenced_listed=listed is not None,
    )


def _read(findings: list[Finding], key: str, read):
    """What ``read`` gives, or None with a finding when it refuses the store's contents (damaged)."""
    try:
        return read()
    except CompileError as exc:
        if exc.exit_code == 3:  # the store itself is unreachable or denies: not a finding, the check stops
            raise
        findings.append(Finding(kind="damaged", key=key, why=str(exc)))
        return None
