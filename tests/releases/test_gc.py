"""compile gc on every store backend: --keep 2 keeps the channel's version and the newest two and frees the rest's
bytes, every kept version still pulls verified; --dry-run removes nothing; gc running while 5 publishers race loses
none of them; the remote cache is trimmed by age."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler.stores import open_store
from tests.stores.conftest import _engine
from tests.stores.test_store import _publish
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build


@pytest.fixture(scope="module")
def fresh_builds(tmp_path_factory, digits_profiles) -> list[Path]:
    """Eight build folders, each with plans of its own bytes: TensorRT-RTX may build equal plans from equal inputs,
    so each folder's batch profile ends one batch lower."""
    root = tmp_path_factory.mktemp("gc-builds")
    folders = []
    for index in range(8):
        out = root / str(index)
        profiles = root / f"profiles-{index}.yaml"
        profiles.write_text(digits_profiles.read_text().replace("max: [64, 1, 8, 8]", f"max: [{64 - index}, 1, 8, 8]"))
        result = run_build(out, ("rtx-3090",), ("fp16",), "--no-cache", profiles=profiles)
        assert result.exit_code == 0, result.stderr
        folders.append(out)
    return folders


def _blob_there(tested, sha256: str) -> bool:
    return open_store(tested.uri).blob_size("digits", sha256) is not None


def _pulls_verified(tested, version: str, build: Path, tmp_path: Path) -> None:
    out = tmp_path / f"pulled-{version}.plan"
    result = tested.cli("pull", f"digits@{version}", "--sku", "rtx-3090", "--out", out, "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == _engine(build, "rtx-3090").sha256


def test_gc_keeps_the_channel_and_the_newest_two_and_frees_the_rest(store, fresh_builds, tmp_path):
    versions = [f"1.0.{i}" for i in range(5)]
    for version, build in zip(versions, fresh_builds, strict=False):
        assert _publish(store, build, version).exit_code == 0
        time.sleep(1.1)  # published.at has seconds: newest means newest
    assert store.cli("promote", "digits@1.0.1", "--channel", "stable").exit_code == 0
    plans = {v: _engine(b, "rtx-3090") for v, b in zip(versions, fresh_builds, strict=False)}

    dry = json.loads(store.cli("gc", "--keep", "2", "--grace-minutes", "0", "--dry-run", "--json").stdout)
    fates = {v["release"]: (v["kept"], v["why"]) for v in dry["versions"]}
    assert fates == {
        "digits@1.0.0": (False, "older than what is kept"),
        "digits@1.0.1": (True, "channel stable"),
        "digits@1.0.2": (False, "older than what is kept"),
        "digits@1.0.3": (True, "newest 2"),
        "digits@1.0.4": (True, "newest 2"),
    }
    assert json.loads(store.cli("ls", "digits", "--json").stdout)["versions"].__len__() == 5  # nothing went

    done = store.cli("gc", "--keep", "2", "--grace-minutes", "0", "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["removed_versions"] == 2
    left = [v["version"] for v in json.loads(store.cli("ls", "digits", "--json").stdout)["versions"]]
    assert left == ["1.0.1", "1.0.3", "1.0.4"]
    if store.kind == "oci":
        assert report["blob_note"] and "garbage collection" in report["blob_note"]
    else:
        kept_plans = {plans[v].sha256 for v in left}
        gone = {plans[v].sha256: plans[v].size_bytes for v in ("1.0.0", "1.0.2")}
        assert len(set(plans[v].sha256 for v in versions)) == 5 and not kept_plans & gone.keys()
        assert report["freed_bytes"] == dry["freed_bytes"] >= sum(gone.values())
        assert not any(_blob_there(store, sha) for sha in gone)
        assert all(_blob_there(store, plans[v].sha256) for v in left)
    for version in left:
        _pulls_verified(store, version, fresh_builds[versions.index(version)], tmp_path)


def test_gc_during_five_racing_publishers_loses_none_of_them(store, fresh_builds, tmp_path):
    for index, build in enumerate(fresh_builds[:3]):
        assert _publish(store, build, f"0.{index}").exit_code == 0
    time.sleep(7)  # the old versions are older than the grace (6 s)
    stop = threading.Event()
    runs = []

    def collect() -> None:
        while not stop.is_set():
            runs.append(store.cli("gc", "--keep", "5", "--grace-minutes", "0.1", "--json"))

    collector = threading.Thread(target=collect)
    collector.start()
    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda i: _publish(store, fresh_builds[3 + i], f"2.{i}"), range(5)))
    time.sleep(7)
    stop.set()
    collector.join()
    final = store.cli("gc", "--keep", "5", "--grace-minutes", "0.1", "--json")
    assert all(r.exit_code == 0 for r in results), [r.stderr for r in results]
    assert all(r.exit_code == 0 for r in [*runs, final]), [r.stderr for r in runs if r.exit_code]
    left = [v["version"] for v in json.loads(store.cli("ls", "digits", "--json").stdout)["versions"]]
    assert left == [f"2.{i}" for i in range(5)]
    for i in range(5):
        _pulls_verified(store, f"2.{i}", fresh_builds[3 + i], tmp_path)


def test_gc_refuses_hostile_options(tmp_path):
    uri = str(tmp_path / "store")
    assert_clean_error(run_cli("gc", "--store", uri), 2, "give --keep N and/or --keep-days D")
    assert_clean_error(run_cli("gc", "--store", uri, "--keep", "-1"), 2, "--keep -1")
    assert_clean_error(run_cli("gc", "--store", uri, "--keep-days", "nan"), 2, "--keep-days")
    assert_clean_error(run_cli("gc", "--store", uri, "--keep", "1", "--grace-minutes", "-5"), 2, "--grace-minutes")
    assert_clean_error(run_cli("gc", "--keep", "1"), 2, "give --store URI")
    assert_clean_error(run_cli("gc", "--store", uri, "--remote-cache", uri, "--keep", "1"), 2, "one of them")
    assert_clean_error(run_cli("gc", "--remote-cache", uri, "--max-size", "lots"), 2, "--max-size 'lots'")
    assert_clean_error(run_cli("gc", "--remote-cache", uri, "--keep", "2"), 2, "--keep counts release versions")


def test_gc_of_the_remote_cache_keeps_days_and_a_size(tmp_path):
    remote = tmp_path / "remote"
    for precision in ("fp16", "fp32"):
        result = run_build(
            tmp_path / precision,
            ("rtx-5090",),
            (precision,),
            "--cache-dir",
            tmp_path / "cache",
            "--remote-cache",
            remote,
        )
        assert result.exit_code == 0, result.stderr
    kept = json.loads(run_cli("gc", "--remote-cache", remote, "--keep-days", "1", "--json").stdout)
    assert (kept["removed_entries"], kept["removed_blobs"]) == ([], 0)
    capped = run_cli("gc", "--remote-cache", remote, "--max-size", "1", "--grace-minutes", "0", "--json")
    report = json.loads(capped.stdout)
    assert capped.exit_code == 0 and report["kept_bytes"] <= 1 and report["freed_bytes"] > 0, capped.stderr
    assert not list((remote / "blobs").rglob("*[0-9a-f]"))
    rebuilt = run_build(
        tmp_path / "again",
        ("rtx-5090",),
        ("fp16",),
        "--cache-dir",
        tmp_path / "cache-b",
        "--remote-cache",
        remote,
        "--json",
    )
    assert json.loads(rebuilt.stdout)["targets"][0]["cache"]["source"] == "miss"


def test_a_channel_keeps_its_rollback_history_and_keep_days_keeps_the_young(fresh_builds, tmp_path):
    uri = str(tmp_path / "store")
    for index, build in enumerate(fresh_builds[:5]):
        assert run_cli("publish", build, "--name", "digits", "--version", f"3.{index}", "--store", uri).exit_code == 0
    for version in ("3.0", "3.1", "3.2", "3.3"):
        assert run_cli("promote", f"digits@{version}", "--channel", "stable", "--store", uri).exit_code == 0
    old = json.loads(run_cli("gc", "--store", uri, "--keep", "0", "--grace-minutes", "0", "--dry-run", "--json").stdout)
    assert {v["release"]: v["why"] for v in old["versions"] if v["kept"]} == {
        "digits@3.3": "channel stable",
        "digits@3.2": "rollback of stable",
        "digits@3.1": "rollback of stable",
    }
    young = json.loads(run_cli("gc", "--store", uri, "--keep-days", "1", "--grace-minutes", "0", "--json").stdout)
    assert young["removed_versions"] == 0 and all(v["kept"] for v in young["versions"])
    assert "younger than 1 days" in {v["why"] for v in young["versions"]}
