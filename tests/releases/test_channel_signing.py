"""Signed channel moves: a channel promoted with a key carries the signed move, and a verifying consumer refuses a
channel that is unsigned, forged (pointed at another version by whoever can write to the store) or rolled back to
an older signed move than this host has seen; on every store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compiler.releases.channels import promote
from compiler.releases.signing import load_signer
from compiler.stores import open_store
from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def published(store, builds, keys, tmp_path, monkeypatch):
    """digits 1.0.0 and 2.0.0 signed; this host's cache (where it notes the channel moves it saw) its own."""
    monkeypatch.setenv("COMPILE_CACHE_DIR", str(tmp_path / "host-cache"))
    for version in ("1.0.0", "2.0.0"):
        done = store.cli("publish", builds["a"], "--name", "digits", "--version", version, "--sign-key", keys["p256"])
        assert done.exit_code == 0, done.stderr
    return store


def _pull(store, tmp_path: Path, keys, cache: str | None = None, allow_unsigned: bool = False):
    env = {**store.env, "COMPILE_CACHE_DIR": cache or os.environ["COMPILE_CACHE_DIR"]}
    if allow_unsigned:
        env["COMPILE_ALLOW_UNSIGNED_CHANNELS"] = "1"
    out = tmp_path / f"stable-{os.urandom(3).hex()}.plan"
    args = ("pull", "digits@stable", "--sku", "rtx-4090", "--out", out, "--verify-key", keys["p256.pub"])
    return run_cli(*args, "--store", store.uri, env=env)


def test_a_signed_channel_verifies_and_an_unsigned_one_is_refused_to_a_verifying_consumer(published, keys, tmp_path):
    store = published
    assert promote(store.uri, "digits@1.0.0", "stable").status == "moved"
    assert_clean_error(_pull(store, tmp_path, keys), 1, "not signed", "digits@1.0.0")
    assert _pull(store, tmp_path, keys, allow_unsigned=True).exit_code == 0  # the transition's escape hatch
    assert store.cli("pull", "digits@stable", "--sku", "rtx-4090", "--out", tmp_path / "x.plan").exit_code == 0
    signer = load_signer(keys["p256"])
    assert promote(store.uri, "digits@1.0.0", "stable", signer=signer).status == "signed"
    assert _pull(store, tmp_path, keys).exit_code == 0
    verified = store.cli("verify", "digits@stable", "--key", keys["p256.pub"])
    assert verified.exit_code == 0, verified.stderr
    assert promote(store.uri, "digits@1.0.0", "stable", signer=signer).status == "unchanged"


def test_a_channel_pointed_elsewhere_under_its_signature_is_forged(published, keys, tmp_path):
    store = published
    promote(store.uri, "digits@1.0.0", "stable", signer=load_signer(keys["p256"]))
    opened = open_store(store.uri)
    data, token = opened.read_channel("digits", "stable")
    assert opened.write_channel("digits", "stable", data.replace(b'"version": "1.0.0"', b'"version": "2.0.0"'), token)
    assert_clean_error(_pull(store, tmp_path, keys), 1, "forged channel")


def test_a_channel_put_back_to_an_older_signed_move_is_a_rollback_to_a_host_that_saw_the_newer(
    published, keys, tmp_path
):
    store = published
    signer = load_signer(keys["p256"])
    promote(store.uri, "digits@1.0.0", "stable", signer=signer)
    opened = open_store(store.uri)
    older = opened.read_channel("digits", "stable")[0]
    promote(store.uri, "digits@2.0.0", "stable", signer=signer)
    assert _pull(store, tmp_path, keys).exit_code == 0  # this host sees move 2
    assert opened.write_channel("digits", "stable", older, opened.read_channel("digits", "stable")[1])
    assert_clean_error(_pull(store, tmp_path, keys), 1, "rolled back", "move 2")
    fresh = _pull(store, tmp_path, keys, cache=str(tmp_path / "fresh-host"))
    assert fresh.exit_code == 0  # the documented limit: a host that never saw move 2 trusts the signed move 1


def test_a_channel_whose_signature_was_removed_is_refused_by_a_host_that_saw_it_signed(published, keys, tmp_path):
    store = published
    promote(store.uri, "digits@2.0.0", "stable", signer=load_signer(keys["p256"]))
    assert _pull(store, tmp_path, keys).exit_code == 0
    opened = open_store(store.uri)
    data, token = opened.read_channel("digits", "stable")
    record = json.loads(data)
    record["signature"], record["version"] = None, "1.0.0"
    assert opened.write_channel("digits", "stable", json.dumps(record).encode(), token)
    assert_clean_error(_pull(store, tmp_path, keys, allow_unsigned=True), 1, "signature was removed")
