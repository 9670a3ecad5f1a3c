"""gc beside a publisher that relies on blobs already there (issue 39, critical 1 and 5), on the folder store and
on S3 (a real SeaweedFS): blobs a killed publish left, marked by a gc long ago, are protected by the retried
publish's lease even when a gc runs between its look at the store and its manifest; a publish that outlives its
lease looks again and sends what went; a channel that is a link stops gc before it removes anything. The race
itself runs ``GC_RACE_REPETITIONS`` times (default 3; 50 for the soak)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from compiler.cache import lease
from compiler.cache.sweep import MARKS
from compiler.releases.publish import publish, read_builds
from compiler.releases.store_gc import gc_store
from compiler.stores import open_store
from compiler.stores.base import Store, VerifyingReader
from tests.support.cli import run_cli

SWEPT = pytest.mark.parametrize("store", ["local", "s3"], indirect=True)
GRACE_MINUTES = 0.02
"""1.2 s: the blobs a killed publish left are older than the grace after a short sleep, on S3 too (whose objects'
times cannot be set)."""


def _strand(uri: str, build: Path, version: str) -> list[str]:
    """What a publisher killed after sending its blobs and before its manifest leaves (its lease long expired):
    the blobs, and no release. Their digests."""
    store = open_store(uri, create=True)
    release = read_builds(build, "digits", version, allow_failed=False)
    for blob in {b.ref.sha256: b for b in release.blobs + release.check_reports}.values():
        with VerifyingReader(blob.path, blob.ref.sha256, blob.ref.size_bytes) as source:
            store.put_blob("digits", blob.ref.sha256, source)
    return sorted({b.ref.sha256 for b in release.blobs + release.check_reports})


def _stale_marks(uri: str, digests: list[str]) -> None:
    """A gc marked the stranded blobs, far longer ago than any grace."""
    store = open_store(uri)
    for digest in digests:
        store.delete_entry(MARKS, digest)
        store.create_entry(MARKS, digest, json.dumps({"at": 1.0}).encode(), [])


def _dangling(uri: str, version: str) -> list[str]:
    """The blobs ``digits@version``'s manifest names that the store lacks."""
    store = open_store(uri)
    manifest = json.loads(store.read_manifest("digits", version))
    named = {e["plan"]["sha256"] for e in manifest["content"]["engines"]}
    return sorted(d for d in named if store.blob_size("digits", d) is None)


def _gc_before_manifest(store: Store, runs: list) -> None:
    """Fault injection on the real store: a whole gc runs between the publisher's look at its blobs and its
    manifest (where the stale marks let it remove them)."""
    write = store.create_manifest

    def gc_then_write(name: str, version: str, data: bytes):
        runs.append(gc_store(store.uri, keep=5, grace_minutes=GRACE_MINUTES))
        return write(name, version, data)

    store.create_manifest = gc_then_write


@SWEPT
def test_a_gc_between_the_look_and_the_manifest_spares_what_the_publish_relies_on(store, builds):
    digests = _strand(store.uri, builds["a"], "1.0.1")
    _stale_marks(store.uri, digests)
    time.sleep(GRACE_MINUTES * 60 + 0.5)
    opened, runs = open_store(store.uri), []
    _gc_before_manifest(opened, runs)
    result = publish(builds["a"], opened, "digits", "1.0.1")
    assert (result.status, result.uploaded_blobs) == ("published", 0)  # it relied on every stranded blob
    assert runs and runs[0].removed_blobs == 0, runs
    assert _dangling(store.uri, "1.0.1") == []
    verified = store.cli("ls", "digits", "--verify")
    assert verified.exit_code == 0 and "nothing damaged, dangling" in verified.stdout, verified.stdout + verified.stderr
    assert not open_store(store.uri).entry_keys(MARKS)  # the gc that saw the lease dropped the stale marks


@SWEPT
def test_a_publish_that_outlives_its_lease_looks_again_and_sends_what_went(store, builds, monkeypatch):
    digests = _strand(store.uri, builds["a"], "1.0.2")
    _stale_marks(store.uri, digests)
    time.sleep(GRACE_MINUTES * 60 + 0.5)
    monkeypatch.setattr(lease, "LEASE_SECONDS", 3.0)
    monkeypatch.setattr(lease, "LEASE_TAIL_SECONDS", 1.0)
    monkeypatch.setattr(lease, "CLOCK_SKEW_SECONDS", 0.0)
    opened, runs = open_store(store.uri), []
    size = opened.blob_size

    def slow_look(name: str, sha256: str):
        """The publisher stalls past its lease while it looks (a stopped process); a gc then runs."""
        found = size(name, sha256)
        if sha256 == digests[-1] and not runs:
            time.sleep(3.5)
            runs.append(gc_store(store.uri, keep=5, grace_minutes=GRACE_MINUTES))
        return found

    opened.blob_size = slow_look
    result = publish(builds["a"], opened, "digits", "1.0.2")
    assert runs[0].removed_blobs == len(digests), runs  # the expired lease protected nothing
    assert result.uploaded_blobs == len(digests)  # sent again after the publisher noticed
    assert _dangling(store.uri, "1.0.2") == []
    assert store.cli("ls", "digits", "--verify").exit_code == 0


def _race_once(uri: str, build: Path, version: str, delay: float) -> tuple[list[str], int]:
    """One retried publish, ``delay`` seconds into gcs running back to back over stale marks (so it meets them at
    every stage of a run): the dangling blobs, and the gc runs."""
    digests = _strand(uri, build, version)
    _stale_marks(uri, digests)
    time.sleep(GRACE_MINUTES * 60 + 0.3)
    stop, runs, failures = threading.Event(), [], []

    def collect() -> None:
        while not stop.is_set():
            try:
                runs.append(gc_store(uri, keep=1, grace_minutes=GRACE_MINUTES))
            except Exception as exc:  # reported by the test
                failures.append(repr(exc))

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        time.sleep(delay)
        publish(build, uri, "digits", version)
    finally:
        stop.set()
        collector.join()
    assert not failures, failures
    return _dangling(uri, version), len(runs)


@SWEPT
def test_gc_racing_a_retried_publish_over_stale_marks_leaves_no_dangling_release(store, builds):
    repetitions = int(os.environ.get("GC_RACE_REPETITIONS", "3"))
    dangling, runs = {}, 0
    for index in range(repetitions):
        version = f"5.{index}"
        found, count = _race_once(store.uri, builds["a"], version, 0.1 + (index % 8) * 0.15)
        runs += count
        if found:
            dangling[version] = found
        open_store(store.uri).delete_manifest("digits", version)  # its blobs unreferenced again for the next
    print(f"{store.kind}: {repetitions} races, {runs} gc runs, {len(dangling)} dangling")
    assert dangling == {}, dangling


def _linked_channel_store(tmp_path: Path, builds) -> Path:
    root = tmp_path / "store"
    for version in ("1.0.0", "1.0.1"):
        assert run_cli("publish", builds["a"], "--name", "digits", "--version", version, "--store", root).exit_code == 0
    assert run_cli("promote", "digits@1.0.0", "--channel", "stable", "--store", root).exit_code == 0
    return root


@pytest.mark.parametrize("target", ["inside", "outside"])
def test_a_channel_that_is_a_link_stops_gc_before_it_removes_anything(tmp_path, builds, target):
    root = _linked_channel_store(tmp_path, builds)
    channel = root / "channels" / "digits" / "stable"
    place = (root / "kept" if target == "inside" else tmp_path / "elsewhere") / "stable"
    place.parent.mkdir()
    channel.rename(place)
    channel.symlink_to(place)
    pulled = run_cli("pull", "digits@stable", "--sku", "rtx-3090", "--out", tmp_path / "p.plan", "--store", root)
    assert pulled.exit_code != 0  # a link is never followed by a pull
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    done = run_cli("gc", "--store", root, "--keep", "0", "--grace-minutes", "0")
    assert done.exit_code == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error:") and "channels/digits/stable" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing removed
    assert open_store(str(root)).read_manifest("digits", "1.0.0") is not None


def test_a_channel_that_is_a_link_is_named_by_ls_not_left_out(tmp_path, builds):
    """ls does not follow the link (no listing does) but says so: a warning line naming it, and ``skipped`` in the
    JSON, so nobody reads a store whose channel points somewhere unknown as a store without that channel."""
    root = _linked_channel_store(tmp_path, builds)
    channel = root / "channels" / "digits" / "stable"
    place = tmp_path / "elsewhere" / "stable"
    place.parent.mkdir()
    channel.rename(place)
    channel.symlink_to(place)
    shown = run_cli("ls", "--store", root)
    assert shown.exit_code == 0 and "Traceback" not in shown.stderr
    assert [line for line in shown.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: store {root}: channels/digits/stable (a symbolic link) was not listed (not a plain file or "
        "folder); move it out of the store or put the record itself there (compile gc refuses to run while it is there)"
    ]
    listed = run_cli("ls", "digits", "--store", root, "--json")
    assert json.loads(listed.stdout)["skipped"] == ["channels/digits/stable (a symbolic link)"]
    assert json.loads(listed.stdout)["channels"] == {}
