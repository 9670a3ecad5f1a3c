"""Leases: what a publisher relies on, kept from ``compile gc`` for the whole publish, on every store gc sweeps.

A publisher writes its lease (``cache/leases/<id>.json``: the release, the digests of every blob it will rely on,
when it expires) before it looks at what the store holds, then looks whether a gc is sweeping
(``cache/sweeps/<id>.json``, written by gc before it lists anything). gc reads the leases after the references and
again before a removal when its last read began over ``RECHECK_SECONDS`` ago, keeps every blob a live lease names,
and removes nothing later than ``SWEEP_DEADLINE_SECONDS`` after its sweep record. So either gc's record was there
when the publisher looked (the publisher then looks at its blobs again ``SETTLE_SECONDS`` after its lease landed,
when every removal of a gc that missed the lease has landed, and sends what went), or gc wrote it later and reads
the lease. A lease stays after its manifest until it expires: a gc that read the references before the manifest
landed reads the lease, finds the manifest and keeps what it names (nothing, when that gc removes the version). A
publisher writes its manifest only while its lease has ``LEASE_TAIL_SECONDS`` left: one that outlived it takes a
new lease and looks again. gc removes expired leases and stale sweep records.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable

from compiler.core.errors import CompileError
from compiler.stores import Store
from compiler.stores.base import SHA256, check_name, check_version

LEASES = "leases"
SWEEPS = "sweeps"
DIGEST = re.compile(SHA256.pattern.encode())
LEASE_SECONDS = 3600.0
"""How long a lease protects its blobs from the time its publisher wrote it."""
LEASE_TAIL_SECONDS = 1200.0
"""A manifest is written only while its lease has this long left (else: a new lease, and a look again)."""
CLOCK_SKEW_SECONDS = 300.0
"""How far publishers' and gc's clocks may differ: a lease counts as live this long past its expiry."""
RECHECK_SECONDS = 0.5
"""gc reads the leases again before a removal once its last read began this long ago."""
SETTLE_SECONDS = 3.0
"""A publisher that found a gc sweeping looks at its blobs again this long after its lease landed: a removal gc
sends within RECHECK_SECONDS of a read that missed the lease has landed by then (it lands within 2.5 s)."""
SWEEP_DEADLINE_SECONDS = 600.0
"""gc removes nothing later than this after writing its sweep record (the rest waits for the next gc)."""


def _new_key() -> str:
    return os.urandom(32).hex()


def _number(data: bytes, field: str, default: float) -> float:
    try:
        value = float(json.loads(data).get(field, default))
    except (ValueError, TypeError, AttributeError, RecursionError):
        return default
    return value if not math.isnan(value) else default


class Lease:
    """A publisher's lease on the blobs it relies on (a no-op on a store gc does not sweep)."""

    def __init__(self, store: Store, name: str, version: str, digests: list[str], job: str | None = None) -> None:
        self.store, self.release = store, {"name": name, "version": version, "job": job}
        self.digests = sorted(set(digests))
        self.enabled = store.swept_by_gc  # a registry frees blobs itself, reading no lease
        self.key: str | None = None
        self.taken = 0.0
        self.sweep_seen = False
        self.settled = False

    def take(self) -> None:
        """Write a lease (a former one of this publish stays until it expires), then look for a sweeping gc."""
        if not self.enabled:
            return
        now, key = time.time(), _new_key()
        record = {**self.release, "blobs": self.digests, "at": now, "expires": now + LEASE_SECONDS}
        self.store.create_entry(LEASES, key, json.dumps(record).encode(), [])
        self.key, self.taken, self.settled = key, time.monotonic(), False
        self.sweep_seen = bool(live_sweeps(self.store))

    def must_look_again(self) -> bool:
        """Before the manifest: whether the publisher must look at its blobs again (and send what went), having
        taken a new lease when it outlived this one, or waited out a gc it found sweeping."""
        if not self.enabled:
            return False
        if time.monotonic() - self.taken > LEASE_SECONDS - LEASE_TAIL_SECONDS:
            self.take()
            return True
        if self.sweep_seen and not self.settled:
            time.sleep(max(0.0, self.taken + SETTLE_SECONDS - time.monotonic()))
            self.settled = True
            return True
        return False


def live_sweeps(store: Store) -> list[str]:
    """The sweep records of gcs that may still remove blobs (a killed gc's older ones are ignored)."""
    oldest = time.time() - SWEEP_DEADLINE_SECONDS - 2 * CLOCK_SKEW_SECONDS
    return [key for key in store.entry_keys(SWEEPS) if _number(store.read_entry(SWEEPS, key) or b"", "at", 0) > oldest]


class SweepGuard:
    """gc's side: its sweep record, the leases it has read (a lease once seen keeps its blobs for the whole run),
    and the deadline past which it removes nothing. A lease whose record landed (its manifest, or its staged part)
    keeps what that record names, unless gc removes that version in this run (``skip``)."""

    def __init__(
        self, store: Store, dry_run: bool, count: Callable[[], None], skip: set[tuple[str, str]] = frozenset()
    ) -> None:
        self.store, self.dry_run, self.count, self.skip = store, dry_run, count, skip
        self.key = None if dry_run or not store.swept_by_gc else _new_key()
        self.started = time.monotonic()
        self.leased: set[str] = set()
        self.seen: set[str] = set()
        self.last_read = -math.inf

    def __enter__(self) -> SweepGuard:
        if self.key is not None:
            self._tidy_sweeps()
            self.store.create_entry(SWEEPS, self.key, json.dumps({"at": time.time(), "pid": os.getpid()}).encode(), [])
            self.count()
            self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.key is not None:
            self.store.delete_entry(SWEEPS, self.key)
            self.count()

    def read_leases(self) -> set[str]:
        """Every digest a live lease names (or its landed record), added to those seen before (leases are
        create-only: one seen is not read again); expired leases removed."""
        self.last_read = time.monotonic()
        now = time.time()
        self.count()
        for key in self.store.entry_keys(LEASES):
            if key in self.seen:
                continue
            self.seen.add(key)
            self.count()
            data = self.store.read_entry(LEASES, key) or b""
            if now > _number(data, "expires", math.inf) + CLOCK_SKEW_SECONDS:
                if not self.dry_run:
                    self.store.delete_entry(LEASES, key)
                    self.count()
                continue
            landed = self._landed(data)
            self.leased.update(d.decode() for d in DIGEST.findall(data if landed is None else landed))
        return self.leased

    def _landed(self, data: bytes) -> bytes | None:
        """The record the lease's publish wrote (empty when gc removes that version now), None when there is none
        yet, or the lease cannot be read (then its own digests count)."""
        try:
            record = json.loads(data)
            name, version, job = check_name(record["name"]), check_version(record["version"]), record.get("job")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, CompileError):
            return None
        if (name, version) in self.skip:
            return b""
        self.count()
        if job is None:
            return self.store.read_manifest(name, version)
        return self.store.staged(name, version).get(job) if isinstance(job, str) else None

    def may_remove(self, digest: str) -> bool:
        """Whether ``digest`` may be removed now: within the deadline, and no lease read within RECHECK_SECONDS
        names it."""
        if time.monotonic() - self.started > SWEEP_DEADLINE_SECONDS:
            return False
        if time.monotonic() - self.last_read > RECHECK_SECONDS:
            self.read_leases()
        return digest not in self.leased

    def _tidy_sweeps(self) -> None:
        """Remove the sweep records killed gcs left (older than any gc may remove for)."""
        live = set(live_sweeps(self.store))
        self.count()
        for key in self.store.entry_keys(SWEEPS):
            if key not in live:
                self.store.delete_entry(SWEEPS, key)
                self.count()
