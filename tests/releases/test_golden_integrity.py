"""The golden inputs are a blob of the release like its plans (issues 42 and 39 class 14): on every store,
``compile verify`` and ``compile ls --verify`` read golden.npz and fail (exit 1) naming it when it is damaged or
missing, and ``ls --verify`` on a store made only with documented commands (check --data, publish --sign-key,
promote, yank, a remote cache in the same place) reports nothing, not the golden blob as left by an interrupted
publish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.core.records import CheckReport
from compiler.stores import open_store
from tests.support.cli import assert_clean_error
from tests.support.digits import TINY_DATA, TINY_MODEL, TINY_PROFILES, run_build
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def checked_build(built_digits) -> Path:
    return built_digits(("rtx-4090",), ("fp32",), data=TINY_DATA, model=TINY_MODEL, profiles=TINY_PROFILES)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _golden_sha256(build: Path) -> str:
    return CheckReport.model_validate_json((build / "check.json").read_bytes()).golden.blob.sha256


def _remove(store, sha256: str) -> None:
    """Take a blob away behind the store's back."""
    if store.kind == "local":
        (Path(store.uri) / "blobs" / "sha256" / sha256).unlink()
    elif store.kind == "oci":
        store.tamper(sha256, b"")  # so the fixture puts the bytes back for later tests (the registry shares them)
        store.registry.blob_file(sha256).unlink()
    else:
        opened = open_store(store.uri)
        opened.client.delete_object(Bucket=opened.bucket, Key=f"{opened.prefix}blobs/sha256/{sha256}")


def test_a_store_made_by_documented_commands_checks_clean_with_its_golden_inputs(store, checked_build, keys, tmp_path):
    published = store.cli("publish", checked_build, "--name", "digits", "--version", "1.0.0", "--sign-key",
                          keys["ed25519"])  # fmt: skip
    assert published.exit_code == 0, published.stderr
    assert store.cli("promote", "digits@1.0.0", "--channel", "stable").exit_code == 0
    assert store.cli("yank", "digits@1.0.0", "--reason", "a test").exit_code == 0
    rebuilt = run_build(tmp_path / "cached", ("rtx-3090",), ("fp32",), "--remote-cache", store.uri, "--no-cache",
                        model=TINY_MODEL, profiles=TINY_PROFILES, env=store.env)  # fmt: skip
    assert rebuilt.exit_code == 0, rebuilt.stderr
    result = store.cli("ls", "--verify", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["findings"] == [], report["findings"]
    assert report["blobs"] == 4  # the plan, layers.json, check.json and golden.npz, each read


@pytest.mark.parametrize("harm", ["damaged", "missing"])
def test_damaged_or_missing_golden_inputs_fail_verify_and_ls_verify_naming_them(
    store, checked_build, keys, harm, tmp_path
):
    published = store.cli("publish", checked_build, "--name", "digits", "--version", "1.0.0", "--sign-key",
                          keys["ed25519"])  # fmt: skip
    assert published.exit_code == 0, published.stderr
    golden = _golden_sha256(checked_build)
    if harm == "damaged":
        store.tamper(golden, b"PK\x03\x04 not the golden inputs")
    else:
        _remove(store, golden)
    verified = store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"])
    assert_clean_error(verified, 1, "golden.npz", golden)
    listed = store.cli("ls", "--verify", "--json")
    assert listed.exit_code == 1, listed.stderr
    findings = json.loads(listed.stdout)["findings"]
    assert [(f["key"], "golden.npz" in f["why"]) for f in findings] == [(f"blobs/sha256/{golden}", True)], findings
    assert findings[0]["kind"] == ("damaged" if harm == "damaged" else "dangling")


def test_publish_repair_replaces_damaged_golden_inputs_and_gc_keeps_them(store, checked_build, keys):
    """``publish --repair`` reads the golden blob back like the plans (an OCI registry cannot have it replaced: it
    says so), and ``gc`` of the other versions leaves it with the version kept."""
    for version in ("1.0.0", "1.0.1"):
        published = store.cli("publish", checked_build, "--name", "digits", "--version", version, "--sign-key",
                              keys["ed25519"])  # fmt: skip
        assert published.exit_code == 0, published.stderr
    golden = _golden_sha256(checked_build)
    store.tamper(golden, b"PK\x03\x04 not the golden inputs")
    repaired = store.cli("publish", checked_build, "--name", "digits", "--version", "1.0.1", "--repair", "--json")
    if store.kind == "oci":
        assert_clean_error(repaired, 3, "cannot be replaced", golden)
        return
    assert repaired.exit_code == 0, repaired.stderr
    assert (json.loads(repaired.stdout)["status"], json.loads(repaired.stdout)["uploaded_blobs"]) == ("repaired", 1)
    for _ in range(2):  # the first gc marks what is unreferenced, the second removes it
        swept = store.cli("gc", "--keep", "1", "--grace-minutes", "0")
        assert swept.exit_code == 0, swept.stderr
    verified = store.cli("verify", "digits@1.0.1", "--key", keys["ed25519.pub"])
    assert verified.exit_code == 0, verified.stderr
