"""The store interface every backend implements, and the rules every backend shares.

A store holds content-addressed blobs, one immutable manifest per release version and movable channels. The
release logic (publish, resolve, pull, promote) lives above this interface and is written once; a backend only
moves bytes and keeps three promises: a blob is never visible half-written or unverified, a blob and a manifest
are each created at most once (never replaced), and a channel moves only from the state its mover read (compare
and swap).
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.plugins import store_forms

NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?")
"""Release names: lower case (OCI repository names must be), no slash, no leading dot."""
VERSION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?")
"""Versions: what an OCI tag allows, less the leading underscore and dot."""
CHANNEL = re.compile(r"[a-z](?:[a-z0-9_-]{0,30}[a-z0-9])?")
"""Channels start with a letter, so ``NAME@1.2`` can never mean a channel."""
SHA256 = re.compile(r"[0-9a-f]{64}")


def _checked(pattern: re.Pattern[str], value: str, role: str, rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value:
        raise InvalidInput(f"{role} {value!r}: use {rule}")
    return value


def check_name(name: str) -> str:
    return _checked(
        NAME, name, "release name", "1 to 64 of a-z 0-9 . _ - (starting and ending with a letter or digit, no '..')"
    )


def check_version(version: str) -> str:
    return _checked(
        VERSION,
        version,
        "version",
        "1 to 64 of A-Z a-z 0-9 . _ - (starting and ending with a letter or digit, no '..')",
    )


def check_channel(channel: str) -> str:
    return _checked(CHANNEL, channel, "channel", "1 to 32 of a-z 0-9 _ - starting with a letter")


def check_sha256(digest: str) -> str:
    return _checked(SHA256, digest, "digest", "64 lower-case hex digits (a sha256)")


class Unsupported(EnvironmentProblem):
    """This kind of store cannot do that at all (a registry lists no blobs): not a failure of the store at hand."""


@dataclass(frozen=True)
class Ref:
    """``NAME@VERSION``, ``NAME@CHANNEL`` or, where a command allows it, ``NAME``. Every channel name is also a
    valid version, so a tag is looked up as a version first, then as a channel."""

    name: str
    tag: str | None = None

    @classmethod
    def parse(cls, text: str, *, tag_required: bool = True) -> Ref:
        name, at, tag = text.partition("@")
        check_name(name)
        if not at:
            if tag_required:
                raise InvalidInput(f"{text!r}: give NAME@VERSION or NAME@CHANNEL (e.g. digits@1.0.0, digits@stable)")
            return cls(name)
        check_version(tag)
        return cls(name, tag)

    @property
    def may_be_channel(self) -> bool:
        return self.tag is not None and CHANNEL.fullmatch(self.tag) is not None

    def __str__(self) -> str:
        return f"{self.name}@{self.tag}" if self.tag else self.name


class Sink(Protocol):
    def write(self, data: bytes) -> object: ...


Token = str
"""What a channel's reader saw (an ETag, a content digest): the write that moves it must name it."""


class Store(ABC):
    """A place releases are published to and pulled from. ``name`` arguments are release names: a backend that
    scopes blobs by repository (OCI) keeps each release's blobs under its name; the others share one pool."""

    uri: str
    """Where the store is, as the user may see it (never with credentials)."""

    @abstractmethod
    def blob_size(self, name: str, sha256: str) -> int | None:
        """The stored blob's size, or None when the store lacks it."""

    @abstractmethod
    def put_blob(self, name: str, sha256: str, source: VerifyingReader) -> bool:
        """Store the bytes ``source`` reads under their digest, visible only once whole and verified
        (``source.require_verified()``), and create-only: True when this call created the blob, False when a blob
        of that digest was already there, which is never replaced. ``source`` raises :class:`CheckFailed` when
        the bytes are not ``source.size`` bytes hashing to ``sha256``; the blob must then not appear."""

    @abstractmethod
    def get_blob(self, name: str, sha256: str, sink: Sink, size: int | None = None) -> bool:
        """Write the blob's bytes to ``sink`` in order; False when there is no such blob. ``size``: the size the
        caller expects, past which the backend need not read (the sink refuses more)."""

    @abstractmethod
    def create_manifest(self, name: str, version: str, data: bytes) -> bytes | None:
        """Write a version's manifest if it does not exist: None when this call created it, else the bytes of
        the manifest that was there (or that won a race)."""

    @abstractmethod
    def read_manifest(self, name: str, version: str) -> bytes | None: ...

    @abstractmethod
    def names(self) -> list[str]:
        """Release names, sorted."""

    @abstractmethod
    def versions(self, name: str) -> list[str]:
        """The versions of ``name`` that have a manifest, sorted."""

    @abstractmethod
    def channels(self, name: str) -> list[str]: ...

    @abstractmethod
    def read_channel(self, name: str, channel: str) -> tuple[bytes, Token] | None: ...

    @abstractmethod
    def write_channel(self, name: str, channel: str, data: bytes, expected: Token | None) -> bool:
        """Move a channel if it is still what was read (``expected``; None: if it does not exist yet). False
        when someone moved it meanwhile: read again and retry."""

    @abstractmethod
    def attach(self, name: str, version: str, kind: str, data: bytes) -> bytes | None:
        """Keep ``data`` (a signature, provenance or model signature: :data:`ATTACHMENTS`) beside a published
        version's manifest, create-only: None when this call wrote it, else what is there already (a first
        signature is never replaced)."""

    @abstractmethod
    def attachment(self, name: str, version: str, kind: str) -> bytes | None:
        """What :meth:`attach` kept beside the version's manifest, None when nothing; never more than
        MAX_ATTACHMENT_BYTES + 1 bytes (the caller refuses more)."""

    def artifact(self, name: str, version: str) -> tuple[str, str] | None:
        """Where a version is an artifact of its own that signatures elsewhere name (an OCI image manifest):
        its reference and sha256; None for the stores where the release is only its manifest."""
        return None

    blobs_per_release = False
    """Whether each release keeps blobs of its own (OCI repositories) rather than one shared pool."""

    swept_by_gc = False
    """Whether ``compile gc`` removes this store's unreferenced blobs itself (a registry's own garbage collection
    does it there), so publishers take leases on the blobs they rely on (:mod:`compiler.cache.lease`)."""

    def hidden(self) -> list[str]:
        """The entries listings so far skipped because they are not plain files or folders (a symbolic link, a
        FIFO), as ``key (what it is)``: gc removes nothing while a listing hides what may need keeping."""
        return []

    def blobs(self, name: str) -> list[str] | None:
        """The digests of every blob the store holds (the shared pool; ``name``'s own where blobs are per
        release), sorted; None where the backend cannot list blobs (the registry API has no such call)."""
        return None

    def remove_damaged_blob(self, name: str, sha256: str, size: int) -> bool:
        """Take the blob named ``sha256`` away if its bytes are not ``size`` bytes hashing to it, so a verified
        copy can be created in its place (blobs are create-only). Safe against a racing repair: a good blob put
        there meanwhile is never removed (kept, or put back). True when a damaged blob was removed."""
        raise EnvironmentProblem(
            f"store {self.uri}: a damaged blob cannot be replaced in this store; ask who owns "
            "it to remove blob sha256:" + check_sha256(sha256)
        )

    def stage(self, name: str, version: str, job: str, data: bytes) -> bytes | None:
        """Record one CI job's part of a release before it is published, create-only like a manifest: None when
        this call wrote it, else the part an earlier attempt of the job wrote."""
        raise self._no_staging()

    def staged(self, name: str, version: str) -> dict[str, bytes]:
        """Every job's staged part of ``name@version``, by job."""
        raise self._no_staging()

    def staged_releases(self) -> list[tuple[str, str]]:
        """(name, version) of every release with staged parts (a sharded release not finalized yet)."""
        return []

    def mark_yanked(self, name: str, version: str, data: bytes) -> bytes | None:
        """Record that a version is withdrawn (beside its manifest, which stays), create-only: None when this call
        wrote it, else the record that was there."""
        raise self._unsupported("compile yank")

    def read_yank(self, name: str, version: str) -> bytes | None:
        return None

    # --- shared cache entries and removal (compiler.cache: the remote cache, gc) ----------------------------

    def create_entry(self, kind: str, key: str, data: bytes, blobs: list[tuple[str, int]]) -> bytes | None:
        """Record a cache entry (``data``, a small JSON index naming ``blobs``, sent first under ``kind``)
        create-only, like a manifest: None when this call wrote it, else the entry that was there."""
        raise self._unsupported("a remote cache")

    def read_entry(self, kind: str, key: str) -> bytes | None:
        raise self._unsupported("a remote cache")

    def entry_keys(self, kind: str) -> list[str]:
        """The keys of ``kind``'s entries, sorted."""
        raise self._unsupported("a remote cache")

    def delete_entry(self, kind: str, key: str) -> None:
        """Remove an entry (a damaged one, or one gc drops); absent is fine."""
        raise self._unsupported("a remote cache")

    def delete_manifest(self, name: str, version: str) -> None:
        """Remove a version for gc: its signature and provenance, its manifest, then its yank mark (last, so a
        yanked version never shows unyanked while its manifest is there); absent parts are fine."""
        raise self._unsupported("compile gc")

    def delete_blob(self, name: str, sha256: str) -> None:
        """Remove a blob (damaged, or referenced by nothing gc keeps); absent is fine."""
        raise self._unsupported("compile gc")

    def blob_digests(self, name: str) -> dict[str, tuple[int, float]]:
        """Every blob of ``name``'s pool: digest -> (size, seconds since the epoch it was written)."""
        raise self._unsupported("compile gc")

    def _unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"store {self.uri}: {what} is not available on this kind of store; use {store_forms()}")

    def _no_staging(self) -> EnvironmentProblem:
        return EnvironmentProblem(
            f"store {self.uri}: sharded releases (--only-sku, --finalize) need a local "
            "folder or S3 store; release in one job here"
        )


class VerifyingReader:
    """A file read once, hashed as it goes, against the size and sha256 it must have. Every stream is checked,
    an empty one included: the read that reaches the expected size (the first read, for 0 bytes) also looks one
    byte further and raises :class:`CheckFailed` if there is more, or if the bytes do not hash to the digest; a
    read that ends early raises too. So a reader never hands out a byte past the expected size, and a backend
    that stops on the error (a multipart upload aborts, a temporary file is removed) never stores bytes under a
    digest they do not have. A backend makes a blob visible only once :attr:`verified` is true."""

    def __init__(
        self,
        path: Path,
        sha256: str,
        size: int,
        recorded: str = "its engine.json records: the file changed after the build; build again",
    ) -> None:
        self._recorded = recorded
        self.path, self.sha256, self.size = path, sha256, size
        self._handle = open(path, "rb")  # noqa: SIM115 - closed by close(), as the uploads that read it expect
        self._hash = hashlib.sha256()
        self.read_bytes = 0
        self.verified = False

    def read(self, amount: int = -1) -> bytes:
        if self.verified:
            return b""
        remaining = self.size - self.read_bytes
        if amount is None or amount < 0 or amount > remaining:
            amount = remaining
        data = self._handle.read(amount) if amount else b""
        self.read_bytes += len(data)
        self._hash.update(data)
        if len(data) < amount:
            raise self._changed(f"it is shorter than recorded ({self.size} bytes)")
        if self.read_bytes == self.size:
            self._finish()
        return data

    def _finish(self) -> None:
        """At the expected size: nothing may follow, and the bytes must hash to the digest."""
        if self._handle.read(1):
            raise self._changed(f"it is longer than recorded ({self.size} bytes)")
        if self._hash.hexdigest() != self.sha256:
            raise self._changed(f"its bytes hash to {self._hash.hexdigest()}")
        self.verified = True

    def read_all(self) -> bytes:
        """The whole stream, verified (for small blobs sent in one request)."""
        parts = [self.read()]
        self.require_verified()
        return b"".join(parts)

    def require_verified(self) -> None:
        """Raise unless the whole stream was read and verified: call before a blob becomes visible."""
        if not self.verified:
            self.read()
        if not self.verified:
            raise self._changed("it was not read whole")

    def _changed(self, what: str) -> CheckFailed:
        return CheckFailed(f"{self.path}: {what}, not to the sha256 {self.sha256} {self._recorded}")

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> VerifyingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Discard:
    """A sink that keeps nothing: for a blob read only to be hashed."""

    def write(self, data: bytes) -> int:
        return len(data)


def holds(store: Store, name: str, sha256: str, size: int) -> bool | None:
    """Whether the store's blob ``sha256`` is ``size`` bytes hashing to it, read whole (and no further than one
    byte past ``size``); None when there is no such blob. A blob that is a link, a FIFO or longer is damaged."""
    sink = HashingSink(Discard(), size, sha256)
    try:
        if not store.get_blob(name, sha256, sink, size):
            return None
    except CheckFailed:
        return False
    return sink.matches()


class HashingSink:
    """Bytes written to a file and hashed on the way. Given the expected ``size`` (and ``sha256``), it refuses
    the first write that would go past that size, before writing any of it, so a store that serves more bytes
    than the manifest records is never copied whole (the backend's read stops on the error); :meth:`verify`
    then checks the size and digest of what came, empty included."""

    def __init__(self, handle, size: int | None = None, sha256: str | None = None, describe: str = "the blob") -> None:
        self._handle = handle
        self._hash = hashlib.sha256()
        self.size = 0
        self.expected_size, self.expected_sha256, self.describe = size, sha256, describe

    def write(self, data: bytes) -> int:
        if self.expected_size is not None and self.size + len(data) > self.expected_size:
            raise CheckFailed(
                f"{self.describe} is corrupt: it is longer than the {self.expected_size} bytes "
                "recorded for it (reading stopped there)"
            )
        self._hash.update(data)
        self.size += len(data)
        return self._handle.write(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def matches(self) -> bool:
        """Whether what was written is exactly the expected size and digest."""
        return self.size == self.expected_size and self.hexdigest() == self.expected_sha256


def blob_key(sha256: str) -> str:
    return f"blobs/sha256/{check_sha256(sha256)}"


def manifest_key(name: str, version: str) -> str:
    return f"releases/{check_name(name)}/{check_version(version)}/manifest.json"


ATTACHMENTS = (
    "signature",
    "provenance",
    "model-signature",
    *(f"model-signature-rtx-{precision}" for precision in ("fp32", "fp16", "int8", "fp8")),
)
"""What a release may carry beside its manifest (docs/provenance.md): our signature, the SLSA provenance, and
the OpenSSF model_signing signatures of the pulled release and of each precision's ``export rtx`` folder
(compiler.releases.model_signature)."""
MAX_ATTACHMENT_BYTES = 4 << 20
"""A signature bundle is a few KiB and a provenance of 1,000 engines a few hundred: more is not ours."""


def attachment_key(name: str, version: str, kind: str) -> str:
    if kind not in ATTACHMENTS:
        raise ValueError(f"no attachment kind {kind!r}")  # a programming error, never user input
    return f"releases/{check_name(name)}/{check_version(version)}/{kind}.json"


def staging_key(name: str, version: str, job: str = "") -> str:
    return f"staging/{check_name(name)}/{check_version(version)}/" + (f"{check_name(job)}.json" if job else "")


KIND = re.compile(r"[a-z]{1,16}")
"""Kinds of cache entries (engines, calibrations, prepared, checks)."""


def check_kind(kind: str) -> str:
    return _checked(KIND, kind, "cache kind", "1 to 16 of a-z")


def entry_key(kind: str, key: str) -> str:
    return f"cache/{check_kind(kind)}/{check_sha256(key)}.json"


def yank_key(name: str, version: str) -> str:
    return f"yanks/{check_name(name)}/{check_version(version)}.json"


def channel_key(name: str, channel: str) -> str:
    return f"channels/{check_name(name)}/{check_channel(channel)}"
