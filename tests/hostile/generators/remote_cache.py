"""Hostile remote-cache entries and indexes (issue 39): what anyone who can write a cache shared with a release store
can make of it. A recipe edits one entry of a copy of a real place (a folder holding both the release digits@1.0.0
and the cache entries its build and check sent): an index that lies about a size or names another blob, a plan of
another GPU or TensorRT-RTX version with engine.json forged to match, a blob truncated or extended under its name,
an index or engine.json that is not JSON at all."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from compiler.stores.base import VerifyingReader
from compiler.stores.local import LocalStore

ENTRIES = ("engine", "prepared", "check")
"""The entries a case may damage: the rtx-4090 fp16 engine, the FP16 model it was built from, the check verdict."""
KINDS = {"engine": "engines", "prepared": "prepared", "check": "checks"}
FILES = {
    "engine": ("engine.plan", "engine.json", "layers.json", "build.log"),
    "prepared": ("fp16.onnx",),
    "check": ("check.json", "golden.npz"),
}
CACHE_ONLY = {"engine": ("engine.json", "build.log"), "prepared": ("fp16.onnx",), "check": ("check.json",)}
"""Files whose blobs no release names, so a case may damage the blob itself (a release's own blobs are the
oracle's: damaging them would test the attacker, not us)."""
MUTATIONS = ("size", "digest", "other-gpu", "other-version", "truncate", "extend", "garbage-index", "garbage-record")


@dataclass(frozen=True)
class Seeded:
    """The real place a case copies, and what its entries are."""

    place: Path
    keys: dict[str, str]
    """Entry -> its key (``engine`` the rtx-4090 one; ``engine-3090`` the rtx-3090 one)."""
    release_blobs: tuple[tuple[str, int], ...]
    """(sha256, size) of every blob digits@1.0.0 names."""


@dataclass(frozen=True)
class EntryDamage:
    entry: str
    mutation: str
    file: str
    number: int
    junk: bytes

    def apply(self, place: Path, seeded: Seeded) -> None:
        """Make the damage in ``place`` (a copy of ``seeded.place``) through the folder store, as a writer would."""
        store = LocalStore(place)
        kind, key = KINDS[self.entry], seeded.keys[self.entry]
        if self.mutation == "garbage-index":
            _rewrite_index(store, kind, key, self._garbage())
            return
        index = json.loads(store.read_entry(kind, key))
        files = index["files"]
        if self.mutation == "size":
            true = files[self.file]["size"]
            lie = true + self.number if self.number < 0 else self.number  # a negative number: that far short
            files[self.file]["size"] = lie if lie != true else true + 1
        elif self.mutation == "digest":
            pool = sorted({sha for sha, _ in seeded.release_blobs} | {f["sha256"] for f in files.values()})
            sha = pool[self.number % len(pool)]
            files[self.file] = {"sha256": sha, "size": store.blob_size("", sha) or 0}
        elif self.mutation in ("other-gpu", "other-version"):
            plan = _other_plan(store, seeded, self.mutation, place)
            files["engine.plan"] = {"sha256": plan[0], "size": plan[1]}
            record = json.loads(_blob(store, files["engine.json"]["sha256"]))
            forged = json.dumps({**record, "sha256": plan[0], "size_bytes": plan[1]}).encode()
            files["engine.json"] = _put(store, forged, place)
        elif self.mutation in ("truncate", "extend"):
            name = CACHE_ONLY[self.entry][self.number % len(CACHE_ONLY[self.entry])]
            path = place / "blobs" / "sha256" / files[name]["sha256"]
            data = path.read_bytes()
            path.chmod(0o644)
            path.write_bytes(data[: len(data) * 3 // 4] if self.mutation == "truncate" else data + self.junk + b"x")
        else:  # garbage-record: the entry's record (its model, for a prepared one) replaced by junk, its index to match
            name = {"engine": "engine.json", "check": "check.json", "prepared": "fp16.onnx"}[self.entry]
            files[name] = _put(store, self._garbage(), place)
        _rewrite_index(store, kind, key, json.dumps(index).encode())

    def _garbage(self) -> bytes:
        """Not an index: junk bytes, nesting deeper than any parser's stack, a JSON of the wrong shape, or more
        than an index may weigh."""
        return [
            self.junk,
            b"[" * 100_000,
            json.dumps({"format_version": 1, "kind": [], "key": None, "files": "x", "created": "y"}).encode(),
            b" " * (1 << 20) + b"{}",
        ][self.number % 4]


def _blob(store: LocalStore, sha: str) -> bytes:
    return (store.root / "blobs" / "sha256" / sha).read_bytes()


def _put(store: LocalStore, data: bytes, place: Path) -> dict[str, object]:
    """``data`` as a blob of its own digest (create-only, as the store writes it): its index record."""
    sha = hashlib.sha256(data).hexdigest()
    staged = place.parent / f"{sha}.staged"
    staged.write_bytes(data)
    with VerifyingReader(staged, sha, len(data)) as reader:
        store.put_blob("cache/engines", sha, reader)
    staged.unlink()
    return {"sha256": sha, "size": len(data)}


def _other_plan(store: LocalStore, seeded: Seeded, mutation: str, place: Path) -> tuple[str, int]:
    """The rtx-3090 (SM86) plan, or the rtx-4090 plan with another TensorRT-RTX version in its header."""
    if mutation == "other-gpu":
        index = json.loads(store.read_entry("engines", seeded.keys["engine-3090"]))
        plan = index["files"]["engine.plan"]
        return plan["sha256"], plan["size"]
    index = json.loads(store.read_entry("engines", seeded.keys["engine"]))
    data = bytearray(_blob(store, index["files"]["engine.plan"]["sha256"]))
    data[24] = (data[24] + 1) % 256
    record = _put(store, bytes(data), place)
    return str(record["sha256"]), int(record["size"])  # type: ignore[call-overload]


def _rewrite_index(store: LocalStore, kind: str, key: str, data: bytes) -> None:
    store.delete_entry(kind, key)
    store.create_entry(kind, key, data, [])


def _damage(entry: str, mutation: str, number: int, junk: bytes, pick: int) -> EntryDamage:
    if entry != "engine" and mutation in ("other-gpu", "other-version"):
        mutation = "size"
    files = FILES[entry]
    return EntryDamage(entry, mutation, files[pick % len(files)], number, junk)


entry_damages = st.builds(
    _damage,
    st.sampled_from(ENTRIES),
    st.sampled_from(MUTATIONS),
    st.one_of(st.integers(-2, 1 << 21), st.just(1 << 60)),
    st.binary(max_size=64),
    st.integers(0, 7),
)
"""Generated damage to one entry of a cache that shares its place with a release store."""
