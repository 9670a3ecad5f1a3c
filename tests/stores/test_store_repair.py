"""Issue 29's store check and repair, and the names that must not shadow each other, on every backend:

- `compile ls --verify` reads every manifest, channel and blob and lists what is damaged, dangling and
  unreferenced (exit 1 for the first two);
- `compile publish --repair` replaces a damaged blob from the build folder (local, S3) and says where it cannot
  (an OCI registry verifies digests itself: damage is below its API);
- a version named like a channel, or a channel like a version, is refused (exit 4);
- stray objects named like folders list a release once (S3).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from compiler.core.errors import EnvironmentProblem
from compiler.stores import open_store
from tests.stores.conftest import StoreUnderTest, _engine
from tests.support.cli import CliResult, assert_clean_error, run_cli


def _publish(store: StoreUnderTest, build: Path, version: str, *extra: str) -> CliResult:
    return store.cli("publish", build, "--name", "digits", "--version", version, *extra)


def _pull(store: StoreUnderTest, tmp_path: Path, ref: str = "digits@1.0.0", sku: str = "rtx-4090") -> CliResult:
    out = tmp_path / "pulled" / f"{sku}.plan"
    out.parent.mkdir(exist_ok=True)
    return store.cli("pull", ref, "--sku", sku, "--out", out, "--no-cache")


def _verify(store: StoreUnderTest, *args: str) -> tuple[CliResult, dict]:
    result = store.cli("ls", *args, "--verify", "--json")
    return result, json.loads(result.stdout) if result.stdout.strip() else {}


def test_ls_verify_lists_damaged_and_passes_a_sound_store(store, builds, tmp_path):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    assert store.cli("promote", "digits@1.0.0", "--channel", "stable").exit_code == 0
    result, report = _verify(store)
    assert result.exit_code == 0, result.stderr
    assert (report["versions"], report["channels"], report["blobs"]) == (1, 1, 3)
    assert report["findings"] == []
    assert report["unreferenced_listed"] == (store.kind != "oci")
    plan = _engine(builds["a"], "rtx-4090").sha256
    store.tamper(plan, b"not a plan")
    result, report = _verify(store, "digits")
    assert_clean_error(result, 1, "1 damaged or dangling", plan)
    assert [(f["kind"], f["key"]) for f in report["findings"]] == [("damaged", f"blobs/sha256/{plan}")]


def test_ls_verify_lists_dangling_and_unreferenced_blobs(store, builds, tmp_path):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    if store.kind == "oci":  # a registry lists no blobs, and refuses a tag whose blobs it lacks: neither can be
        result, report = _verify(store)
        assert result.exit_code == 0 and report["unreferenced_listed"] is False
        return
    plan = _engine(builds["a"], "rtx-3090").sha256
    stray = "0" * 64
    if store.kind == "local":
        (Path(store.uri) / "blobs" / "sha256" / plan).unlink()
    else:
        open_store(store.uri).client.delete_object(Bucket=store.uri[5:].split("/")[0], Key=f"team/blobs/sha256/{plan}")
    if store.kind == "local":
        (Path(store.uri) / "blobs" / "sha256" / stray).write_bytes(b"left by a killed publisher")
    else:
        store.tamper(stray, b"left by a killed publisher")
    result, report = _verify(store)
    assert_clean_error(result, 1, "1 damaged or dangling")
    assert sorted((f["kind"], f["key"]) for f in report["findings"]) == [
        ("dangling", f"blobs/sha256/{plan}"),
        ("unreferenced", f"blobs/sha256/{stray}"),
    ]


def test_publish_repair_replaces_a_damaged_blob(store, builds, tmp_path):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    plan = _engine(builds["a"], "rtx-4090").sha256
    store.tamper(plan, b"damaged")
    assert_clean_error(_pull(store, tmp_path), 1, "--repair")
    unchanged = _publish(store, builds["a"], "1.0.0", "--json")
    assert json.loads(unchanged.stdout)["status"] == "unchanged"  # without --repair: nothing is read back
    repaired = _publish(store, builds["a"], "1.0.0", "--repair", "--json")
    if store.kind == "oci":
        assert_clean_error(repaired, 3, "cannot be replaced", plan)
        return
    assert repaired.exit_code == 0, repaired.stderr
    result = json.loads(repaired.stdout)
    assert (result["status"], result["uploaded_blobs"]) == ("repaired", 1)
    assert _pull(store, tmp_path).exit_code == 0
    assert (tmp_path / "pulled" / "rtx-4090.plan").read_bytes() == (
        builds["a"] / "rtx-4090" / "fp16" / "engine.plan"
    ).read_bytes()
    assert _verify(store)[0].exit_code == 0
    again = _publish(store, builds["a"], "1.0.0", "--repair", "--json")
    assert json.loads(again.stdout)["status"] == "unchanged"  # nothing left to repair


def test_a_repair_never_removes_a_good_blob(store, builds):
    """The store's removal judges the bytes it takes away: a sound blob (a racing repair's) stays."""
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    record = _engine(builds["a"], "rtx-4090")
    opened = open_store(store.uri)
    if store.kind == "oci":
        with pytest.raises(EnvironmentProblem, match="cannot be replaced"):
            opened.remove_damaged_blob("digits", record.sha256, record.size_bytes)
        return
    assert opened.remove_damaged_blob("digits", record.sha256, record.size_bytes) is False
    assert opened.blob_size("digits", record.sha256) == record.size_bytes


def test_a_version_named_like_a_channel_and_a_channel_like_a_version_are_refused(store, builds):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    assert store.cli("promote", "digits@1.0.0", "--channel", "stable").exit_code == 0
    assert_clean_error(_publish(store, builds["b"], "stable"), 4, "channel stable", "hide")
    assert store.manifest("digits", "stable") is None
    assert _publish(store, builds["b"], "beta").exit_code == 0
    assert_clean_error(store.cli("promote", "digits@1.0.0", "--channel", "beta"), 4, "version beta")
    assert open_store(store.uri).read_channel("digits", "beta") is None


def test_stray_folder_like_objects_list_a_release_once(s3, builds, monkeypatch):
    """S3 has no folders: an object "releases/digits" beside the prefix "releases/digits/" is one name."""
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    s3.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/team"
    assert (
        run_cli(
            "publish", builds["a"], "--name", "digits", "--version", "1.0.0", "--store", uri, env=s3.env()
        ).exit_code
        == 0
    )
    for key in ("releases/digits", "releases/digits/", "releases/digits/1.0.0", "releases/digits/1.0.0/"):
        s3.client().put_object(Bucket=bucket, Key=f"team/{key}", Body=b"")
    listing = json.loads(run_cli("ls", "--json", "--store", uri, env=s3.env()).stdout)
    assert [(r["name"], r["versions"]) for r in listing["releases"]] == [("digits", ["1.0.0"])]
