"""Hostile stores given to `compile gc` while publishers are at work (issue 39), through the real CLI: blobs a
killed publish left, with marks far older than any grace; leases live, expired and damaged; sweep records of
killed and running gcs; channels and other entries that are links, FIFOs or links leading out of the store. Some
cases race a retried publish (in this process, over stale marks) against the gc. Held to the contract's oracle
(harness.py) and to gc's own clauses:

- nothing is deleted that a release names: every manifest left names only blobs the store holds (the racing
  publish's release included), and every version a channel pointed at keeps its manifest;
- every blob a live lease names stays (an unreadable lease keeps the digests it holds: it never expires);
- gc refuses (exit 1) a store whose listings hide an entry it may need (a channel, staged part, cache entry or
  release that is a link or a FIFO), and a refused gc removes nothing; a blob that is a link is left alone;
- an expired lease and a killed gc's sweep record are removed by a gc that ran.

    PYTHONPATH=. python -m pytest -q tests/hostile/test_hostile_gc.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st

from compiler.cache.lease import LEASES, SWEEPS
from compiler.releases.publish import publish, read_builds
from compiler.stores import open_store
from compiler.stores.base import VerifyingReader
from tests.hostile import generators as g
from tests.hostile.harness import Case, Expect, Sandbox, run_cases
from tests.hostile.store_support import CHANNEL, NAME, codes, json_flag
from tests.support.cli import CliResult, run_cli

LEASE_KINDS = ("none", "live", "expired", "garbage", "nested", "no-expiry", "nan-expiry", "huge")
LINKS = ("none", "channel-in", "channel-out", "channel-fifo", "staged-link", "entry-link", "release-link", "blob-link")
SWEEP_KINDS = ("none", "killed", "running")
RACED = "2.0.0"
"""The version the racing publisher publishes (a retry of a killed publish whose blobs are in the store)."""
DAY = 86400
HUGE = (64 << 20) + 4096


@dataclass(frozen=True)
class GcRecipe:
    lease: str
    link: str
    sweep: str
    stale_marks: bool
    publisher_delay: float | None
    """Seconds after the case starts that a retried publish begins (None: no publisher)."""
    keep: int
    grace: str
    dry_run: bool
    json_output: bool


@pytest.fixture(scope="module")
def raced_build(tmp_path_factory) -> Path:
    """A build folder whose plans no release in the store template names (its batch profile ends one lower)."""
    root = tmp_path_factory.mktemp("hostile-gc-build")
    profiles = root / "profiles.yaml"
    profiles.write_text(g.DIGITS_PROFILES.read_text().replace("max: [64, 1, 8, 8]", "max: [61, 1, 8, 8]"))
    out = root / "build"
    args = ["--sku", "rtx-3090", "--precision", "fp16", "--out", out, "--no-cache"]
    result = run_cli("build", g.DIGITS_MODEL, "--profiles", profiles, *args, cwd=root)
    assert result.exit_code == 0, result.stderr
    return out


def _entry(store: Path, kind: str, data: bytes, key: str | None = None) -> Path:
    path = store / "cache" / kind / f"{key or os.urandom(32).hex()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _age(path: Path, seconds: float = DAY) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


def _strand_random(store: Path, count: int) -> list[str]:
    """Blobs a killed publisher sent (whole, verified, a day old) and no manifest names."""
    digests = []
    for _ in range(count):
        data = os.urandom(4096)
        digest = hashlib.sha256(data).hexdigest()
        path = store / "blobs" / "sha256" / digest
        path.write_bytes(data)
        _age(path)
        digests.append(digest)
    return digests


def _strand_build(store: Path, build: Path) -> list[str]:
    """What a publish of ``build`` killed before its manifest left: its blobs, a day old."""
    opened = open_store(str(store))
    release = read_builds(build, NAME, RACED, allow_failed=False)
    blobs = {b.ref.sha256: b for b in release.blobs + release.check_reports}.values()
    for blob in blobs:
        with VerifyingReader(blob.path, blob.ref.sha256, blob.ref.size_bytes) as source:
            opened.put_blob(NAME, blob.ref.sha256, source)
        _age(store / "blobs" / "sha256" / blob.ref.sha256)
    return sorted(b.ref.sha256 for b in blobs)


def _lease(store: Path, kind: str, digests: list[str]) -> bool:
    """Plant a lease of a publisher at work on ``digests``; whether gc must keep them."""
    now = time.time()
    record = {"name": NAME, "version": "3.0.0", "job": None, "blobs": digests, "at": now, "expires": now + 3600}
    if kind == "live":
        _entry(store, LEASES, json.dumps(record).encode())
    elif kind == "expired":
        _entry(store, LEASES, json.dumps({**record, "at": now - 3 * DAY, "expires": now - 2 * DAY}).encode())
    elif kind == "garbage":
        _entry(store, LEASES, b"\x00not json " + " ".join(digests).encode())
    elif kind == "nested":
        _entry(store, LEASES, b"[" * 200_000)
    elif kind == "no-expiry":
        _entry(store, LEASES, json.dumps({"blobs": digests}).encode())
    elif kind == "nan-expiry":
        _entry(store, LEASES, json.dumps({**record, "expires": float("nan")}).encode())
    elif kind == "huge":
        with open(_entry(store, LEASES, b""), "wb") as handle:
            handle.truncate(HUGE)
    return kind in ("live", "garbage", "no-expiry", "nan-expiry")


def _link(store: Path, kind: str, box: Sandbox) -> None:
    """Put an entry a listing skips where gc would read it."""
    channel = store / "channels" / NAME / CHANNEL
    if kind in ("channel-in", "channel-out"):
        place = (store / "kept" if kind == "channel-in" else box.outside) / CHANNEL
        place.parent.mkdir(exist_ok=True)
        channel.rename(place)
        channel.symlink_to(place)
    elif kind == "channel-fifo":
        channel.unlink()
        g.make_fifo(channel)
    elif kind == "staged-link":
        (box.outside / "part.json").write_text("{}")
        folder = store / "staging" / NAME / "4.0.0"
        folder.mkdir(parents=True)
        (folder / "rtx-3090.json").symlink_to(box.outside / "part.json")
    elif kind == "entry-link":
        (box.outside / "entry.json").write_text("{}")
        (store / "cache" / "engines").mkdir(parents=True, exist_ok=True)
        (store / "cache" / "engines" / f"{'e' * 64}.json").symlink_to(box.outside / "entry.json")
    elif kind == "release-link":
        (store / "releases" / "alias").symlink_to(store / "releases" / NAME)
    elif kind == "blob-link":
        first = sorted((store / "blobs" / "sha256").iterdir())[0]
        (store / "blobs" / "sha256" / ("f" * 64)).symlink_to(first.name)


def _named(store: Path) -> dict[str, set[str]]:
    """Each release's blobs, by ``version``, as its manifest names them."""
    named = {}
    for manifest in sorted((store / "releases" / NAME).glob("*/manifest.json")):
        data = json.loads(manifest.read_bytes())
        content = data["content"]
        digests = {e[part]["sha256"] for e in content["engines"] for part in ("plan", "layers") if e.get(part)}
        digests |= {ref["sha256"] for ref in data.get("check_reports", [])}
        if content.get("golden"):
            digests.add(content["golden"]["blob"]["sha256"])
        named[manifest.parent.name] = digests
    return named


def _blobs(store: Path) -> set[str]:
    return {p.name for p in (store / "blobs" / "sha256").iterdir() if not p.name.startswith(".")}


class _Publisher(threading.Thread):
    """A retried publish of ``build`` racing the case's gc."""

    def __init__(self, build: Path, store: Path, delay: float) -> None:
        super().__init__(daemon=True)
        self.build, self.store, self.delay = build, store, delay
        self.outcome: str | None = None

    def run(self) -> None:
        time.sleep(self.delay)
        try:
            self.outcome = publish(self.build, str(self.store), NAME, RACED).status
        except Exception as exc:  # reported by the oracle
            self.outcome = f"raised {exc!r}"


def _oracle(recipe: GcRecipe, store: Path, before: dict, protected: list[str], publisher: _Publisher | None):
    def after(result: CliResult) -> list[str]:
        problems = []
        if publisher is not None:
            publisher.join(120)
            if publisher.outcome != "published":
                problems.append(f"the racing publish ended {publisher.outcome}")
        held, named = _blobs(store), _named(store)
        for version, digests in named.items():
            if digests - held:
                problems.append(f"{NAME}@{version} dangling: names {sorted(digests - held)[:2]} the store lacks")
        gone = sorted(before["channel_targets"] - named.keys())
        if gone:
            problems.append(f"versions a channel pointed at were removed: {gone}")
        if set(protected) - held:
            problems.append(f"blobs a live lease names were removed: {sorted(set(protected) - held)[:2]}")
        if result.exit_code != 0:
            lost = sorted((before["blobs"] - held) | {f"manifest {v}" for v in before["versions"] - named.keys()})
            if lost:
                problems.append(f"a refused gc removed {lost[:3]}")
        elif not recipe.dry_run:
            left = [k for k in before["stale_records"] if k.exists()]
            if left:
                problems.append(f"an expired lease or a killed gc's sweep record stayed: {left[:2]}")
        return problems

    return after


def _setup(raced_build: Path, store_template: Path):
    def setup(recipe: GcRecipe, box: Sandbox) -> Case:
        box.out.mkdir(exist_ok=True)
        store = box.out / "store"
        shutil.copytree(store_template, store, symlinks=True)
        channel_targets = {json.loads((store / "channels" / NAME / CHANNEL).read_bytes())["version"]}
        stranded = _strand_random(store, 3)
        raced = _strand_build(store, raced_build) if recipe.publisher_delay is not None else []
        if recipe.stale_marks:
            for digest in stranded + raced:
                _entry(store, "marks", json.dumps({"at": 1.0}).encode(), digest)
        earlier = set((store / "cache" / LEASES).glob("*.json"))  # the template's publishes' (landed)
        protected = stranded if _lease(store, recipe.lease, stranded) else []
        planted = set((store / "cache" / LEASES).glob("*.json")) - earlier
        stale_records = sorted(planted) if recipe.lease == "expired" else []
        if recipe.sweep != "none":
            at = 1.0 if recipe.sweep == "killed" else time.time()
            record = _entry(store, SWEEPS, json.dumps({"at": at, "pid": 1}).encode())
            stale_records += [record] if recipe.sweep == "killed" else []
        _link(store, recipe.link, box)
        before = {
            "channel_targets": channel_targets,
            "blobs": _blobs(store),
            "versions": set(_named(store)),
            "stale_records": stale_records,
        }
        publisher = None
        if recipe.publisher_delay is not None:
            publisher = _Publisher(raced_build, store, recipe.publisher_delay)
            publisher.start()
        args = ["gc", "--store", store, "--keep", str(recipe.keep), "--grace-minutes", recipe.grace]
        args += ["--dry-run"] if recipe.dry_run else []
        expected = codes(0) if recipe.link in ("none", "blob-link") else codes(1)
        return Case(
            [*args, *json_flag(recipe.json_output)],
            Expect(expected, f"lease {recipe.lease}, link {recipe.link}", ("store", "channels", "staging")),
            recipe.json_output,
            reports_failures=False,
            after=_oracle(recipe, store, before, protected, publisher),
        )

    return setup


def _recipe(**given) -> GcRecipe:
    fields = {
        "lease": "none",
        "link": "none",
        "sweep": "none",
        "stale_marks": True,
        "publisher_delay": None,
        "keep": 0,
        "grace": "60",
        "dry_run": False,
        "json_output": False,
    }
    return GcRecipe(**{**fields, **given})


MUST = [
    *(_recipe(lease=kind, json_output=i % 2 == 0) for i, kind in enumerate(LEASE_KINDS)),
    *(_recipe(link=kind, json_output=i % 2 == 1) for i, kind in enumerate(LINKS[1:])),
    *(_recipe(sweep=kind) for kind in SWEEP_KINDS[1:]),
    *(_recipe(publisher_delay=delay, grace=grace) for delay, grace in ((0.0, "60"), (0.8, "0"), (1.4, "0.01"))),
    _recipe(publisher_delay=1.0, link="channel-in", lease="live"),
    _recipe(lease="live", dry_run=True, grace="0", json_output=True),
]
"""Every lease, link and sweep kind once, and the retried publish racing gc at three moments and graces."""


def test_gc_beside_publishers(request, hostile_base, store_template, raced_build):
    strategy = st.builds(
        GcRecipe,
        st.sampled_from(LEASE_KINDS),
        st.sampled_from(LINKS),
        st.sampled_from(SWEEP_KINDS),
        st.booleans(),
        st.one_of(st.none(), st.sampled_from([0.0, 0.6, 1.2, 1.8])),
        st.integers(0, 3),
        st.sampled_from(["0", "0.01", "60"]),
        st.booleans(),
        st.booleans(),
    )
    run_cases(request.node.name, "gc-races", strategy, _setup(raced_build, store_template), hostile_base, MUST)
