"""Hostile remote caches and options: a bad --remote-cache is one error line (exit 2) before any work; an index
that names a path, lies about a key, or points at bytes of another digest is refused in one warning line, the
result is made here and the entry replaced, and nothing outside the cache is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build


def _build(out: Path, cache: Path, remote: Path | str, *extra: str):
    return run_build(out, ("rtx-5090",), ("fp16",), "--cache-dir", cache, "--remote-cache", remote, "--json", *extra)


@pytest.mark.parametrize(
    "uri, fragment",
    [
        ("s3://", "bucket"),
        ("ftp://host/x", "unknown scheme"),
        ("oci://user:pw@host/x", "credentials do not go"),
        ("s3://bucket/../x", "prefix part"),
        ("oci://host:99999/x", "not a registry host"),
    ],
)
def test_a_bad_remote_cache_uri_is_one_error_line_before_any_work(tmp_path, uri, fragment):
    result = _build(tmp_path / "out", tmp_path / "cache", uri)
    assert_clean_error(result, 2, "remote cache (--remote-cache", fragment)
    assert not (tmp_path / "out").exists()


def test_an_unreachable_remote_cache_is_a_warning_and_the_build_goes_on(tmp_path):
    result = _build(tmp_path / "out", tmp_path / "cache", "oci+http://127.0.0.1:9/x")
    assert result.exit_code == 0, result.stderr
    (target,) = json.loads(result.stdout)["targets"]
    assert target["cache"] == {"source": "miss", "reason": "the remote cache did not answer"}
    assert "could not look up engines entry" in result.stderr and "Traceback" not in result.stderr


def _entry(remote: Path) -> tuple[Path, dict]:
    (index,) = (remote / "cache" / "engines").glob("*.json")
    return index, json.loads(index.read_text())


def _rewrite(index: Path, data: dict) -> None:
    index.chmod(0o644)
    index.write_text(json.dumps(data))


@pytest.mark.parametrize("damage", ["path", "other-key", "wrong-digest", "not-json", "huge-size", "missing-blob"])
def test_a_hostile_remote_entry_is_refused_rebuilt_and_replaced(tmp_path, damage):
    remote = tmp_path / "remote"
    first = _build(tmp_path / "a", tmp_path / "cache-a", remote)
    assert first.exit_code == 0, first.stderr
    index, data = _entry(remote)
    key = index.stem
    if damage == "path":
        data["files"]["../../../escaped"] = data["files"].pop("build.log")
    elif damage == "other-key":
        data["key"] = "0" * 64
    elif damage == "wrong-digest":
        data["files"]["engine.plan"]["sha256"] = data["files"]["layers.json"]["sha256"]
    elif damage == "huge-size":
        data["files"]["engine.plan"]["size"] = 1 << 60
    elif damage == "missing-blob":
        (remote / "blobs" / "sha256" / data["files"]["engine.plan"]["sha256"]).unlink()
    if damage == "not-json":
        index.chmod(0o644)
        index.write_bytes(b"\x00not an index")
    else:
        _rewrite(index, data)
    second = _build(tmp_path / "b", tmp_path / "cache-b", remote)
    assert second.exit_code == 0, second.stderr
    (target,) = json.loads(second.stdout)["targets"]
    assert target["cache"] == {"source": "miss", "reason": "the remote entry was damaged"}
    warnings = [line for line in second.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"engines entry {key[:12]} refused" in warnings[0], second.stderr
    assert not list(tmp_path.rglob("escaped"))
    # replaced: the next runner takes it whole
    third = _build(tmp_path / "c", tmp_path / "cache-c", remote)
    assert json.loads(third.stdout)["targets"][0]["cache"] == {"source": "remote", "reason": None}, third.stderr
    assert "warning" not in third.stderr


@pytest.mark.parametrize(
    "cache, fragment", [(5, "cache"), ("ftp://x/y", "unknown scheme"), ("s3://UPPER/x", "bucket name")]
)
def test_a_bad_cache_key_in_the_pipeline_is_one_error_line(tmp_path, cache, fragment):
    from tests.pipeline.test_release import _pipeline

    result = run_cli("release", _pipeline(tmp_path, cache=cache), "--work", tmp_path / "work")
    assert_clean_error(result, 2, fragment)
    assert not (tmp_path / "artifacts").exists()


@pytest.mark.parametrize("kind", ["inspections", "inspect-reports"])
@pytest.mark.parametrize("damage", ["fifo", "other-model", "not-json", "huge", "folder"])
def test_a_hostile_local_inspect_entry_is_ignored_and_made_again(digits_model, tmp_path, damage, kind):
    """The inspect cache's entry (TensorRT's view) or its memo (the whole report of an unchanged file) replaced by a
    FIFO (must not block), an entry of another model, not JSON, larger than any entry, or a folder: inspect makes
    it again (the view: a miss, parsed again; the memo: the view from its intact entry), and the entry is whole
    again after."""
    import os
    import shutil

    cache = tmp_path / "cache"
    first = run_cli("inspect", digits_model, "--cache-dir", cache, "--json")
    assert first.exit_code == 0, first.stderr
    if kind == "inspections":
        shutil.rmtree(cache / "inspect-reports")  # else the memo answers before the view's entry is read
    (entry,) = (cache / kind).iterdir()
    good = entry.read_bytes()
    entry.unlink()
    if damage == "fifo":
        os.mkfifo(entry)
    elif damage == "other-model":  # the view's entry names its model; the memo's, its key (the model by its stat)
        named = json.loads(first.stdout)["model"]["sha256"] if kind == "inspections" else entry.stem
        entry.write_bytes(good.replace(named.encode(), b"0" * 64))
    elif damage == "not-json":
        entry.write_bytes(b"{" * 1000)
    elif damage == "huge":
        entry.write_bytes(good + b" " * (64 << 20))
    else:
        entry.mkdir()
    again = run_cli("inspect", digits_model, "--cache-dir", cache, "--json", timeout=120)
    assert again.exit_code == 0 and "Traceback" not in again.stderr, again.stderr
    report = json.loads(again.stdout)
    assert report["cache"]["source"] == ("miss" if kind == "inspections" else "hit")
    assert report["tensorrt"]["partitions"] == json.loads(first.stdout)["tensorrt"]["partitions"]
    assert report["model"] == json.loads(first.stdout)["model"]
    if damage != "folder":  # a folder in its place is left alone: only the reuse is lost
        assert entry.is_file() and json.loads(entry.read_bytes())["key"] == entry.stem


def test_inspect_cache_dir_that_is_a_file_costs_only_the_reuse(digits_model, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    result = run_cli("inspect", digits_model, "--cache-dir", tmp_path / "file", "--json")
    assert result.exit_code == 0 and "Traceback" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["cache"]["source"] == "miss"
    assert (tmp_path / "file").read_text() == "not a folder"
