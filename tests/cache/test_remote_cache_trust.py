"""What the remote cache may believe (issue 39): an index that lies about a size condemns the entry, never a blob,
so a cache sharing its place with a release store leaves every release pullable and verified (folder and S3); an
entry's plan must be of this target by its own header; a read-only runner takes entries and writes nothing; the
build table names where an engine came from."""

from __future__ import annotations

import json
import os
import struct
import uuid
from pathlib import Path

import pytest

from tests.cache.test_remote_cache import _runner
from tests.pipeline.test_release import _pipeline
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build

AWS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


@pytest.fixture(params=["folder", "s3"])
def shared_place(request, tmp_path, monkeypatch) -> tuple[str, dict[str, str]]:
    """One place that is both the release store and the remote cache, and the environment that reaches it (also
    set in this process, where the test edits the cache's indexes through the store API)."""
    if request.param == "folder":
        return str(tmp_path / "shared"), dict(os.environ)
    s3 = request.getfixturevalue("s3")
    bucket = f"shared-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=bucket)
    env = s3.env()
    for name in AWS:
        monkeypatch.setenv(name, env[name])
    return f"s3://{bucket}/place", env


def _edit_entries(uri: str, kind: str, name: str, edit) -> list[str]:
    """Rewrite every ``kind`` entry's index so that file ``name``'s record is ``edit(record)``, as anyone who can
    write the cache can: their keys."""
    from compiler.stores import open_store

    store = open_store(uri)
    keys = store.entry_keys(kind)
    for key in keys:
        index = json.loads(store.read_entry(kind, key))
        index["files"][name] = edit(index["files"][name])
        store.delete_entry(kind, key)
        files = [(f["sha256"], f["size"]) for f in index["files"].values()]
        assert store.create_entry(kind, key, json.dumps(index).encode(), files) is None
    return keys


def _release(pipeline: Path, work: Path, env: dict[str, str], place: str) -> dict:
    result = run_cli("release", pipeline, "--work", work, "--json", "--store", place, "--remote-cache", place, env=env)
    assert result.exit_code == 0, result.stderr
    return {**json.loads(result.stdout), "_stderr": result.stderr}


def _assert_pullable_verified(place: str, env: dict[str, str], versions: dict[str, bool], tmp_path: Path) -> None:
    """Every version's plan (and golden inputs, where ``versions`` says it has them) pulls, verified, and the
    store's own check finds nothing wrong."""
    for version, golden in versions.items():
        out = tmp_path / f"pulled-{version}" / "digits.plan"
        out.parent.mkdir()
        args = ["--golden"] if golden else []
        pulled = run_cli(
            "pull",
            f"digits@{version}",
            "--sku",
            "rtx-5090",
            "--store",
            place,
            "--out",
            out,
            "--no-cache",
            *args,
            env=env,
        )
        assert pulled.exit_code == 0, pulled.stderr
        assert out.with_name("golden.npz").is_file() == golden
    verified = run_cli("ls", "--store", place, "--verify", env=env)
    assert verified.exit_code == 0, verified.stdout + verified.stderr


def _named_blobs(value: object) -> set[str]:
    """Every digest a manifest names as a blob (the values of its ``sha256`` fields)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if isinstance(value.get("sha256"), str):
            found.add(value["sha256"])
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found |= _named_blobs(item)
    return found


def _release_blobs(place: str, env: dict[str, str], version: str) -> dict[str, object]:
    """The blobs ``digits@version`` names, each with what would change if it were removed and put back (a folder's
    inode and mtime; an S3 object's ETag and LastModified)."""
    from compiler.stores import open_store

    listing = run_cli("ls", f"digits@{version}", "--store", place, "--json", env=env)
    digests = _named_blobs(json.loads(listing.stdout)["manifest"]["content"])
    store = open_store(place)
    present = sorted(d for d in digests if store.blob_size("", d) is not None)
    if not place.startswith("s3://"):
        return {
            d: (lambda s: (s.st_ino, s.st_mtime_ns))(os.stat(Path(place) / "blobs" / "sha256" / d)) for d in present
        }
    head = store.client.head_object
    return {
        d: (lambda h: (h["ETag"], h["LastModified"]))(head(Bucket=store.bucket, Key=f"{store.prefix}blobs/sha256/{d}"))
        for d in present
    }


def _golden_digest(uri: str) -> str:
    from compiler.stores import open_store

    store = open_store(uri)
    (key,) = store.entry_keys("checks")
    return json.loads(store.read_entry("checks", key))["files"]["golden.npz"]["sha256"]


LIES = {
    # the inspection's index names the release's golden.npz (as its inspect.json) with a size of 3
    "golden-named-size-3": (
        "inspections",
        "inspect.json",
        lambda place, f: {"sha256": _golden_digest(place), "size": 3},
    ),
    # the engine's index says its plan (the release's plan) is one byte shorter than it is
    "plan-size-off-by-one": ("engines", "engine.plan", lambda place, f: {**f, "size": f["size"] - 1}),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_a_lying_index_on_a_shared_cache_and_store_leaves_every_release_pullable_verified(shared_place, tmp_path, lie):
    place, env = shared_place
    kind, name, edit = LIES[lie]
    pipeline = _pipeline(tmp_path, targets={"rtx-5090": ["fp16"]}, calibration=None)
    _release(pipeline, tmp_path / "a", _runner(tmp_path, "a", env), place)
    released = _release_blobs(place, env, "1.0.0")
    keys = _edit_entries(place, kind, name, lambda record: edit(place, record))
    # runner B, an empty local cache, releases the next version through the same place, checked without golden
    # inputs (so nothing of its own puts back a golden blob the lie removed)
    again = _pipeline(
        tmp_path,
        targets={"rtx-5090": ["fp16"]},
        calibration=None,
        check={},
        release={"name": "digits", "version": "1.0.1"},
    )
    b = _release(again, tmp_path / "b", _runner(tmp_path, "b", env), place)
    assert _release_blobs(place, env, "1.0.0") == released  # none removed, none put back
    _assert_pullable_verified(place, env, {"1.0.0": True, "1.0.1": False}, tmp_path)
    (warning,) = b["warnings"]
    assert any(f"{kind} entry {key[:12]} refused ({name}: its index records" in warning for key in keys), warning


def _build(model, profiles, sku: str, out: Path, cache: Path, remote: Path, *extra: str, env=None):
    return run_build(
        out,
        (sku,),
        ("fp16",),
        "--cache-dir",
        cache,
        "--remote-cache",
        remote,
        *extra,
        model=model,
        profiles=profiles,
        env=env,
    )


def _mask(plan: Path) -> int:
    return struct.unpack_from("<Q", plan.read_bytes(), 32)[0]


def test_a_remote_entry_holding_another_gpus_plan_is_refused_and_built_here(digits_model, digits_profiles, tmp_path):
    """The rtx-4090 entry given the rtx-3090 (SM86) plan, its engine.json's sha256 and size edited to match: the
    plan's own header says SM86, so the rtx-4090 build refuses it and builds an SM89 plan."""
    from compiler.stores import open_store

    remote = tmp_path / "remote"
    for sku in ("rtx-3090", "rtx-4090"):
        made = _build(digits_model, digits_profiles, sku, tmp_path / "a", tmp_path / "cache-a", remote)
        assert made.exit_code == 0, made.stderr
    store = open_store(str(remote))
    entries = {}
    for key in store.entry_keys("engines"):
        index = json.loads(store.read_entry("engines", key))
        record = json.loads((remote / "blobs" / "sha256" / index["files"]["engine.json"]["sha256"]).read_bytes())
        entries[record["sku"]] = key, index, record
    key, index, record = entries["rtx-4090"]
    sm86 = entries["rtx-3090"][1]["files"]["engine.plan"]
    forged = json.dumps({**record, "sha256": sm86["sha256"], "size_bytes": sm86["size"]}).encode()
    forged_path = tmp_path / "engine.json"
    forged_path.write_bytes(forged)
    from compiler.core.files import file_sha256
    from compiler.stores.base import VerifyingReader

    digest = file_sha256(forged_path)
    with VerifyingReader(forged_path, digest, len(forged)) as reader:
        store.put_blob("cache/engines", digest, reader)
    index["files"]["engine.plan"] = sm86
    index["files"]["engine.json"] = {"sha256": digest, "size": len(forged)}
    store.delete_entry("engines", key)
    store.create_entry(
        "engines", key, json.dumps(index).encode(), [(f["sha256"], f["size"]) for f in index["files"].values()]
    )

    result = _build(digits_model, digits_profiles, "rtx-4090", tmp_path / "b", tmp_path / "cache-b", remote, "--json")
    assert result.exit_code == 0, result.stderr
    (target,) = json.loads(result.stdout)["targets"]
    assert target["cache"] == {"source": "miss", "reason": "the remote entry was damaged"}
    assert "its engine.plan is not for this target: plan targets compute capabilities ['8.6']" in result.stderr
    assert _mask(tmp_path / "b" / "rtx-4090" / "fp16" / "engine.plan") == 0x8  # SM89, built here
    assert (remote / "blobs" / "sha256" / sm86["sha256"]).is_file()  # the rtx-3090 entry's plan is untouched


def test_the_build_table_says_remote_for_an_engine_taken_from_the_remote(digits_model, digits_profiles, tmp_path):
    remote = tmp_path / "remote"
    first = _build(digits_model, digits_profiles, "rtx-5090", tmp_path / "a", tmp_path / "cache-a", remote)
    assert first.exit_code == 0, first.stderr
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    table = _build(digits_model, digits_profiles, "rtx-5090", tmp_path / "b", tmp_path / "cache-b", remote, env=env)
    assert table.exit_code == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if "rtx-5090" in line and "fp16" in line]
    assert " remote " in row and " hit " not in row, table.stdout
    assert json.loads((tmp_path / "b" / "build.json").read_text())["targets"][0]["cache"]["source"] == "remote"


def test_a_read_only_runner_takes_entries_and_writes_nothing(digits_model, digits_profiles, tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    read_only = {**os.environ, "COMPILE_REMOTE_CACHE_MODE": "read-only"}
    fresh = _build(digits_model, digits_profiles, "rtx-5090", tmp_path / "a", tmp_path / "ca", remote, env=read_only)
    assert fresh.exit_code == 0, fresh.stderr
    assert list(remote.iterdir()) == [], "a read-only runner wrote to the remote cache"
    written = _build(digits_model, digits_profiles, "rtx-5090", tmp_path / "b", tmp_path / "cb", remote)
    assert written.exit_code == 0, written.stderr
    taken = _build(
        digits_model, digits_profiles, "rtx-5090", tmp_path / "c", tmp_path / "cc", remote, "--json", env=read_only
    )
    assert json.loads(taken.stdout)["targets"][0]["cache"] == {"source": "remote", "reason": None}, taken.stderr
    # a damaged entry is refused and built here, and left where it is: a read-only runner removes nothing
    (key,) = _edit_entries(str(remote), "engines", "build.log", lambda f: {**f, "size": f["size"] + 1})
    before = sorted(str(p.relative_to(remote)) for p in remote.rglob("*"))
    refused = _build(
        digits_model, digits_profiles, "rtx-5090", tmp_path / "d", tmp_path / "cd", remote, "--json", env=read_only
    )
    assert refused.exit_code == 0, refused.stderr
    assert json.loads(refused.stdout)["targets"][0]["cache"]["reason"] == "the remote entry was damaged"
    assert f"engines entry {key[:12]} refused" in refused.stderr and "read-only: left in the cache" in refused.stderr
    assert sorted(str(p.relative_to(remote)) for p in remote.rglob("*")) == before


def test_an_unknown_remote_cache_mode_is_one_error_line(digits_model, digits_profiles, tmp_path):
    env = {**os.environ, "COMPILE_REMOTE_CACHE_MODE": "write-only"}
    result = _build(digits_model, digits_profiles, "rtx-5090", tmp_path / "a", tmp_path / "ca", tmp_path / "r", env=env)
    assert_clean_error(result, 2, "$COMPILE_REMOTE_CACHE_MODE='write-only'", "read-only")
    assert not (tmp_path / "a").exists()
