"""Several trusted keys at once, for a key rotation: a file of concatenated PEM public keys (as a CA bundle holds
certificates) given to `verify --key`, `pull --verify-key` or $COMPILE_VERIFY_KEY verifies a release signed by any
one of them, and only those."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def store(tmp_path_factory, keys, built_digits) -> Path:
    """digits@1.0.0 signed with the old key (Ed25519), 2.0.0 with the new one (EC P-256)."""
    root = tmp_path_factory.mktemp("rotation")
    for version, key in (("1.0.0", "ed25519"), ("2.0.0", "p256")):
        done = run_cli("publish", built_digits(), "--name", "digits", "--version", version, "--store",
                       root / "store", "--sign-key", keys[key])  # fmt: skip
        assert done.exit_code == 0, done.stderr
    return root / "store"


def _trust(tmp_path: Path, *public: Path) -> Path:
    path = tmp_path / "trusted.pub"
    path.write_bytes(b"".join(p.read_bytes() for p in public))
    return path


def test_both_keys_of_a_rotation_verify_their_releases(store, keys, tmp_path):
    trusted = _trust(tmp_path, keys["ed25519.pub"], keys["p256.pub"])
    for version in ("1.0.0", "2.0.0"):
        verified = run_cli("verify", f"digits@{version}", "--store", store, "--key", trusted)
        assert verified.exit_code == 0, verified.stderr
        out = tmp_path / f"{version}.plan"
        env = {**os.environ, "COMPILE_VERIFY_KEY": str(trusted)}
        pulled = run_cli("pull", f"digits@{version}", "--sku", "rtx-4090", "--store", store, "--out", out, env=env)
        assert pulled.exit_code == 0 and out.is_file(), pulled.stderr


def test_a_release_signed_by_a_key_no_longer_trusted_is_refused(store, keys, tmp_path):
    trusted = _trust(tmp_path, keys["p256.pub"], keys["p256.pub"])  # the old key retired
    assert_clean_error(run_cli("verify", "digits@1.0.0", "--store", store, "--key", trusted), 1, "any of the keys")
    out = tmp_path / "old.plan"
    pulled = run_cli(
        "pull", "digits@1.0.0", "--sku", "rtx-4090", "--store", store, "--out", out, "--verify-key", trusted
    )
    assert_clean_error(pulled, 1, "bad signature")
    assert not out.exists()


def test_a_trust_file_with_a_bad_key_names_which_and_too_many_keys_are_refused(store, keys, tmp_path):
    rsa = tmp_path / "with-rsa.pub"
    rsa.write_bytes(keys["p256.pub"].read_bytes() + keys["rsa.pub"].read_bytes())
    assert_clean_error(run_cli("verify", "digits@2.0.0", "--store", store, "--key", rsa), 2, "key 2 of 2", "RSA")
    many = _trust(tmp_path, *([keys["p256.pub"]] * 17))
    assert_clean_error(run_cli("verify", "digits@2.0.0", "--store", store, "--key", many), 2, "at most 16")
