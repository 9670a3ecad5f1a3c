"""The remote cache: the local cache's entries shared through a store (folder, S3, OCI), so a fresh CI runner takes
what another runner made instead of calibrating and building it again.

An entry is content-addressed by the local cache's own key (a calibration's, a prepared model's, an engine's, a
check's): a small index naming each file by sha256 and size, and the files as the store's blobs. Every file is
verified against the index on the way in; an entry that fails (a blob missing, bytes that do not hash to their
digest, an index that lies about a size, records that contradict the key) is refused in one warning line, its
index removed, and replaced by the caller's rebuild.

A blob is never removed on the index's word: the index is what may lie, and the place may be a release store too.
A blob is proven damaged only when it was read whole and its bytes do not hash to its name; it is then replaced
when this process sends the rebuilt entry (:meth:`RemoteCache.send`: the store's ``remove_damaged_blob`` with the
size and digest of bytes in hand, which keeps a blob that holds them). Entries are written create-only: racing
runners cannot overwrite one another. ``$COMPILE_REMOTE_CACHE_MODE=read-only`` makes a runner (a pull request's)
take entries and never write or remove anything (docs/ci-cache.md, "Who may write the cache").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from compiler.core.errors import CheckFailed, CompileError, InvalidInput
from compiler.core.files import file_sha256
from compiler.core.reuse import Digests, Material
from compiler.stores.base import SHA256, HashingSink, VerifyingReader

ENV = "COMPILE_REMOTE_CACHE"
MODE_ENV = "COMPILE_REMOTE_CACHE_MODE"
MODES = ("read-write", "read-only")
INDEX_FORMAT = 1
MAX_INDEX_BYTES = 1 << 20
FETCH_THREADS = 8
"""An entry's files are fetched at once: each is a request's round trip, and an entry has up to five."""
KIND_FILES = {
    "engines": ("engine.plan", "engine.json", "layers.json", "build.log"),
    "calibrations": ("model.onnx", "model.onnx.data", "calibration.cache", "report.json", "calibration.json"),
    "prepared": ("fp16.onnx",),
    "checks": ("check.json", "golden.npz"),
    "inspections": ("inspect.json",),
}
"""The files an entry of each kind may hold: an index naming any other is refused (no path ever comes from it)."""


class FileEntry(BaseModel):
    sha256: str = Field(pattern=SHA256.pattern)
    size: int = Field(ge=0)


class EntryIndex(BaseModel):
    """The index of one remote entry."""

    format_version: int = INDEX_FORMAT
    kind: str
    key: str
    files: dict[str, FileEntry]
    created: float
    material: dict[str, object] = {}
    """What the key was made of, for ``--explain`` against entries this runner does not have."""


class Damaged(CheckFailed):
    """A remote entry that failed verification (its warning line is the message)."""


def _mode() -> str:
    """$COMPILE_REMOTE_CACHE_MODE: ``read-write`` (the default) or ``read-only``."""
    mode = os.environ.get(MODE_ENV, "").strip() or MODES[0]
    if mode not in MODES:
        raise InvalidInput(f"${MODE_ENV}={mode[:40]!r}: use {' or '.join(MODES)} (or leave it unset: read-write)")
    return mode


def configured(uri: str | None) -> str | None:
    """The remote cache asked for: ``uri`` (an option or the pipeline's ``cache:``), else $COMPILE_REMOTE_CACHE."""
    chosen = uri if uri is not None else os.environ.get(ENV) or None
    return chosen.strip() or None if chosen is not None else None


def check_remote_uri(uri: str | None) -> None:
    """Refuse the remote cache's URI (``uri``, else $COMPILE_REMOTE_CACHE) as opening it would (a scheme no store
    has, credentials in it: exit 2), without creating a folder or sending a request."""
    chosen = configured(uri)
    if chosen is not None and "://" in chosen and not chosen.startswith("file://"):
        _remote_store(chosen, create=False)  # the URI's syntax and backend (nothing is sent)


def _remote_store(uri: str, create: bool):
    """The store behind the remote cache, its errors said as the remote cache's, not --store's."""
    from compiler.stores import open_store

    try:
        return open_store(uri, create=create)
    except CompileError as exc:
        raise type(exc)(f"remote cache (--remote-cache, ${ENV} or the pipeline's cache:): {exc}") from None


@lru_cache(maxsize=8)
def open_remote(uri: str) -> RemoteCache:
    """One RemoteCache per URI in a process (its store's connections are kept)."""
    return RemoteCache(uri)


class RemoteCache:
    def __init__(self, uri: str) -> None:
        self.read_only = _mode() == "read-only"
        self.store = _remote_store(uri, create=not self.read_only)
        self.uri = self.store.uri
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._proven_damaged: set[tuple[str, str]] = set()
        """(pool, sha256) of blobs this process read whole and found not to hash to their name."""

    def fetch(self, kind: str, key: str, folder: Path) -> EntryIndex | None:
        """Download ``kind``'s entry ``key`` into ``folder`` (made, empty), its files at once, every one verified:
        its index, or None when the remote has none. A damaged entry's index is removed from the remote (its caller
        rebuilds and sends it again) and raises :class:`Damaged`; folder's files are then the caller's to drop."""
        raw = self.store.read_entry(kind, key)
        if raw is None:
            return None
        index = self._index(kind, key, raw)
        folder.mkdir(parents=True, exist_ok=True)
        files = list(index.files.items())
        with ThreadPoolExecutor(min(FETCH_THREADS, len(files)) or 1, thread_name_prefix="compile-fetch") as pool:
            problems = list(pool.map(lambda item: self._download(kind, key, folder / item[0], item[1]), files))
        for problem in filter(None, problems):
            raise self.damaged(kind, key, problem)
        return index

    def _download(self, kind: str, key: str, path: Path, entry: FileEntry) -> str | None:
        """One file of an entry, verified: None when whole, else why not. Only a blob read whole whose bytes do not
        hash to its name is remembered as damaged; one merely longer or shorter than the index says condemns the
        index, not the blob."""
        pool = f"cache/{kind}"
        with open(path, "xb") as handle:
            sink = HashingSink(handle, entry.size, entry.sha256, f"remote cache {kind}/{key[:12]}: {path.name}")
            try:
                found = self.store.get_blob(pool, entry.sha256, sink, entry.size)
            except CheckFailed:  # the blob goes on past the size the index records: the index is what is wrong
                return f"{path.name}: its index records {entry.size} bytes, the blob {entry.sha256[:12]} holds more"
        if not found:
            return f"{path.name} (blob {entry.sha256[:12]}) is missing"
        if sink.hexdigest() != entry.sha256:
            with self._lock:
                self._proven_damaged.add((pool, entry.sha256))
            return f"{path.name} does not hash to the sha256 its index records"
        if sink.size != entry.size:
            return f"{path.name}: its index records {entry.size} bytes, the blob {entry.sha256[:12]} holds {sink.size}"
        return None

    def _index(self, kind: str, key: str, raw: bytes) -> EntryIndex:
        try:
            if len(raw) > MAX_INDEX_BYTES:
                raise ValueError("larger than an index")
            index = EntryIndex.model_validate_json(raw)
        except (ValidationError, ValueError) as exc:
            raise self.damaged(kind, key, f"its index is not one ({str(exc).splitlines()[0][:120]})") from None
        if index.kind != kind or index.key != key:
            raise self.damaged(kind, key, f"its index is for {index.kind}/{index.key[:12]}")
        unknown = sorted(set(index.files) - set(KIND_FILES[kind]))
        if unknown:
            raise self.damaged(kind, key, f"its index names a file no {kind} entry has ({unknown[0][:40]!r})")
        return index

    def damaged(self, kind: str, key: str, why: str) -> Damaged:
        """Warn once and drop the entry's index (a read-only runner leaves it), never a blob: the rebuild's
        :meth:`send` replaces the blobs proven damaged."""
        then = "made here (read-only: left in the cache)" if self.read_only else "made again and replaced"
        line = self.warn(f"remote cache {self.uri}: {kind} entry {key[:12]} refused ({why}); {then}")
        if not self.read_only:
            with contextlib.suppress(CompileError):  # a store that refuses removal: the entry stays refused each time
                self.store.delete_entry(kind, key)
        return Damaged(line)

    def send(
        self, kind: str, key: str, folder: Path, names: list[str], material: Material = None, digests: Digests = None
    ) -> bool:
        """Send the entry of ``names`` in ``folder`` (blobs first, each verified as it is read, then the index,
        create-only): True when this call created it (never, read-only). ``digests``: sha256 already known (a
        plan's)."""
        if self.read_only:
            return False
        files = {}
        for name in names:
            path = folder / name
            sha = (digests or {}).get(name) or file_sha256(path)
            size = path.stat().st_size
            self._put(f"cache/{kind}", path, sha, size)
            files[name] = FileEntry(sha256=sha, size=size)
        index = EntryIndex(kind=kind, key=key, files=files, created=time.time(), material=material or {})
        return (
            self.store.create_entry(
                kind, key, index.model_dump_json().encode(), [(f.sha256, f.size) for f in files.values()]
            )
            is None
        )

    def _put(self, pool: str, path: Path, sha: str, size: int) -> None:
        """The blob of ``path`` (``size`` bytes hashing to ``sha``) in the pool. One there of another size cannot
        hash to ``sha``, and one this process read whole did not: either is taken away first by the store's
        ``remove_damaged_blob``, which reads it whole against these very bytes' size and digest and keeps it if it
        holds them (a racing repair's). Nothing that hashes to its name is ever removed."""
        stored = self.store.blob_size(pool, sha)
        if stored == size and (pool, sha) not in self._proven_damaged:
            return
        if stored is not None:
            self.store.remove_damaged_blob(pool, sha, size)
        with VerifyingReader(path, sha, size) as reader:
            self.store.put_blob(pool, sha, reader)
        with self._lock:
            self._proven_damaged.discard((pool, sha))

    def send_quietly(self, kind: str, key: str, folder: Path, names: list[str], **kwargs: object) -> str | None:
        """:meth:`send`, a failure said as a warning (what was made is whole; only the next runner makes it again)."""
        try:
            self.send(kind, key, folder, names, **kwargs)  # type: ignore[arg-type]
        except (CompileError, OSError) as exc:
            return self.warn(f"remote cache {self.uri}: could not send {kind} entry {key[:12]}: {exc}")
        return None

    def materials(self, kind: str, limit: int = 200) -> list[tuple[str, dict[str, object]]]:
        """What the keys of up to ``limit`` of the remote's entries were made of, for ``--explain`` (an entry that
        cannot be read is left out: this only explains)."""
        found = []
        try:
            for key in self.store.entry_keys(kind)[:limit]:
                raw = self.store.read_entry(kind, key)
                if raw is not None and len(raw) <= MAX_INDEX_BYTES:
                    with contextlib.suppress(ValidationError, ValueError):
                        found.append((f"remote {key[:12]}", EntryIndex.model_validate_json(raw).material))
        except CompileError:
            pass
        return found

    def warn(self, line: str) -> str:
        with self._lock:
            self.warnings.append(line)
        return line

    def unreachable(self, kind: str, key: str, exc: CompileError) -> str:
        """A remote that cannot answer (down, denied): a miss said as a warning, never a failed run."""
        return self.warn(f"remote cache {self.uri}: could not look up {kind} entry {key[:12]}: {exc}")
