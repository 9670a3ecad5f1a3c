"""The layout the local folder and S3 share, written once over a few key-value primitives.

blobs/sha256/<digest>                       content-addressed plans and records
releases/<name>/<version>/manifest.json     one immutable manifest per release version
releases/<name>/<version>/signature.json    its signature (a Sigstore bundle), when signed
releases/<name>/<version>/provenance.json   its SLSA provenance (signed: a Sigstore bundle)
releases/<name>/<version>/model-signature.json  its OpenSSF model_signing bundle, when signed with an EC key
channels/<name>/<channel>                   the version a channel points at, and its history
"""

from __future__ import annotations

from abc import abstractmethod

from compiler.stores.base import (
    ATTACHMENTS,
    CHANNEL,
    NAME,
    SHA256,
    VERSION,
    Sink,
    Store,
    Token,
    VerifyingReader,
    attachment_key,
    blob_key,
    channel_key,
    check_channel,
    check_name,
    entry_key,
    manifest_key,
    staging_key,
    yank_key,
)


class KeyedStore(Store):
    """A store over keys: a backend says how to size, put, stream, create, swap and list one key."""

    swept_by_gc = True

    @abstractmethod
    def _size(self, key: str) -> int | None: ...

    @abstractmethod
    def _put(self, key: str, source: VerifyingReader) -> bool:
        """Write ``key`` from ``source`` only if absent, visible only once whole and verified (True); False when
        the key exists: a blob is never replaced, even by bytes of its digest."""

    @abstractmethod
    def _stream(self, key: str, sink: Sink, size: int | None = None) -> bool:
        """Write ``key``'s bytes to ``sink`` in order, reading no further than one byte past ``size`` when given;
        False when there is no such key."""

    @abstractmethod
    def _read(self, key: str) -> tuple[bytes, Token] | None: ...

    @abstractmethod
    def _create(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if absent (True); False when it exists."""

    @abstractmethod
    def _swap(self, key: str, data: bytes, expected: Token | None) -> bool: ...

    @abstractmethod
    def _remove_damaged(self, key: str, sha256: str, size: int) -> bool:
        """Remove ``key`` if it is not ``size`` bytes hashing to ``sha256`` (see :meth:`remove_damaged_blob`)."""

    @abstractmethod
    def _children(self, prefix: str) -> list[str]:
        """The names one level below ``prefix`` (which ends with ``/``)."""

    def _delete(self, key: str) -> None:
        """Remove ``key`` (absent is fine)."""
        raise self._unsupported("removing from the store")

    def _listing(self, prefix: str) -> dict[str, tuple[int, float]]:
        """The keys one level below ``prefix`` with their size and modification time."""
        raise self._unsupported("compile gc")

    def blob_size(self, name: str, sha256: str) -> int | None:
        return self._size(blob_key(sha256))

    def put_blob(self, name: str, sha256: str, source: VerifyingReader) -> bool:
        return self._put(blob_key(sha256), source)

    def get_blob(self, name: str, sha256: str, sink: Sink, size: int | None = None) -> bool:
        return self._stream(blob_key(sha256), sink, size)

    def blobs(self, name: str) -> list[str]:
        return sorted(d for d in self._children("blobs/sha256/") if SHA256.fullmatch(d))

    def remove_damaged_blob(self, name: str, sha256: str, size: int) -> bool:
        return self._remove_damaged(blob_key(sha256), sha256, size)

    def _create_or_read(self, key: str, data: bytes) -> bytes | None:
        """None when this call created ``key``, else what is there."""
        while not self._create(key, data):
            found = self._read(key)
            if found is not None:  # else removed between the two looks (by hand): try again
                return found[0]
        return None

    def create_manifest(self, name: str, version: str, data: bytes) -> bytes | None:
        return self._create_or_read(manifest_key(name, version), data)

    def read_manifest(self, name: str, version: str) -> bytes | None:
        found = self._read(manifest_key(name, version))
        return None if found is None else found[0]

    def attach(self, name: str, version: str, kind: str, data: bytes) -> bytes | None:
        return self._create_or_read(attachment_key(name, version, kind), data)

    def attachment(self, name: str, version: str, kind: str) -> bytes | None:
        found = self._read(attachment_key(name, version, kind))
        return None if found is None else found[0]

    def names(self) -> list[str]:
        return sorted(n for n in self._children("releases/") if NAME.fullmatch(n) and ".." not in n)

    def versions(self, name: str) -> list[str]:
        return sorted(
            v for v in self._children(f"releases/{check_name(name)}/") if VERSION.fullmatch(v) and ".." not in v
        )

    def channels(self, name: str) -> list[str]:
        return sorted(c for c in self._children(f"channels/{check_name(name)}/") if CHANNEL.fullmatch(c))

    def read_channel(self, name: str, channel: str) -> tuple[bytes, Token] | None:
        return self._read(channel_key(name, check_channel(channel)))

    def write_channel(self, name: str, channel: str, data: bytes, expected: Token | None) -> bool:
        return self._swap(channel_key(name, channel), data, expected)

    def stage(self, name: str, version: str, job: str, data: bytes) -> bytes | None:
        return self._create_or_read(staging_key(name, version, job), data)

    def staged(self, name: str, version: str) -> dict[str, bytes]:
        parts = {}
        for entry in self._children(staging_key(name, version)):
            job = entry.removesuffix(".json")
            if entry.endswith(".json") and NAME.fullmatch(job) and ".." not in job:
                found = self._read(staging_key(name, version, job))
                if found is not None:
                    parts[job] = found[0]
        return parts

    def create_entry(self, kind: str, key: str, data: bytes, blobs: list[tuple[str, int]]) -> bytes | None:
        return self._create_or_read(entry_key(kind, key), data)

    def read_entry(self, kind: str, key: str) -> bytes | None:
        found = self._read(entry_key(kind, key))
        return None if found is None else found[0]

    def entry_keys(self, kind: str) -> list[str]:
        folder = entry_key(kind, "0" * 64).rpartition("/")[0]
        return sorted(
            e.removesuffix(".json")
            for e in self._children(folder + "/")
            if e.endswith(".json") and SHA256.fullmatch(e.removesuffix(".json"))
        )

    def delete_entry(self, kind: str, key: str) -> None:
        self._delete(entry_key(kind, key))

    def delete_manifest(self, name: str, version: str) -> None:
        for kind in ATTACHMENTS:
            self._delete(attachment_key(name, version, kind))
        self._delete(manifest_key(name, version))
        self._delete(yank_key(name, version))

    def delete_blob(self, name: str, sha256: str) -> None:
        self._delete(blob_key(sha256))

    def blob_digests(self, name: str) -> dict[str, tuple[int, float]]:
        return {digest: facts for digest, facts in self._listing("blobs/sha256/").items() if SHA256.fullmatch(digest)}

    def mark_yanked(self, name: str, version: str, data: bytes) -> bytes | None:
        return self._create_or_read(yank_key(name, version), data)

    def read_yank(self, name: str, version: str) -> bytes | None:
        found = self._read(yank_key(name, version))
        return None if found is None else found[0]

    def staged_releases(self) -> list[tuple[str, str]]:
        return [
            (name, version)
            for name in self._children("staging/")
            if NAME.fullmatch(name) and ".." not in name
            for version in self._children(f"staging/{name}/")
            if VERSION.fullmatch(version) and ".." not in version
        ]
