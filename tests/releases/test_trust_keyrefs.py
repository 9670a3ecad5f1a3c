"""Issue 31's key references and keyless mode. An HSM key (SoftHSM2 through PKCS#11, securesystemslib's HSM signer)
signs releases on the folder store, SeaweedFS and the registry, and the public half the publish prints verifies
them. Cloud KMS keys cannot be reached here: a malformed reference is exit 2 and an unreachable one exit 3, with no
credential in the line. Keyless Sigstore signing needs an OIDC identity, Fulcio and Rekor, none of which run here:
what does run is tested (no ambient credential, key-signed or malformed bundles, bad option combinations)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compiler.stores import open_store
from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys
from tests.support.softhsm import PIN, URI, softhsm_token

CI_IDENTITY = (
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "SIGSTORE_ID_TOKEN",
    "GITLAB_CI",
    "BUILDKITE",
    "CIRCLECI",
)


@pytest.fixture(scope="module")
def hsm(tmp_path_factory) -> dict[str, str]:
    return softhsm_token(tmp_path_factory.mktemp("softhsm"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _env(*drop: str, **add: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in drop and k not in CI_IDENTITY}, **add}


def _publish(uri, build: Path, version: str, env: dict[str, str], *extra: str | Path):
    return run_cli("publish", build, "--store", uri, "--name", "digits", "--version", version, *extra, env=env)


def test_an_hsm_key_signs_and_its_printed_public_key_verifies(store, builds, hsm, keys, tmp_path):
    env = {**store.env, **hsm}
    signed = _publish(store.uri, builds["a"], "1.0.0", env, "--sign-key", URI, "--json")
    assert signed.exit_code == 0, signed.stderr
    published = json.loads(signed.stdout)
    assert published["signature"] == "written" and PIN not in signed.stdout + signed.stderr
    public = tmp_path / "release.pub"
    public.write_text(published["public_key"])
    verified = store.cli("verify", "digits@1.0.0", "--key", public, "--json")
    assert verified.exit_code == 0, verified.stderr
    assert json.loads(verified.stdout)["provenance_signed"] is True
    assert_clean_error(store.cli("verify", "digits@1.0.0", "--key", keys["p256.pub"]), 1, "bad signature")

    by_env = _publish(store.uri, builds["b"], "1.1.0", {**env, "COMPILE_SIGN_KEY": URI})
    assert by_env.exit_code == 0, by_env.stderr
    assert "the signing key's public half" in by_env.stdout and published["public_key"].splitlines()[1] in by_env.stdout
    out = tmp_path / "out"
    out.mkdir()
    pulled = store.cli("pull", "digits@1.1.0", "--sku", "rtx-3090", "--out", out / "d.plan", "--verify-key", public)
    assert pulled.exit_code == 0, pulled.stderr


@pytest.mark.parametrize(
    ("change", "code", "fragments"),
    [
        ({"COMPILE_HSM_PIN": "9999"}, 3, ["cannot sign with it", "$COMPILE_HSM_PIN"]),
        ({"COMPILE_HSM_PIN": None}, 2, ["$COMPILE_HSM_PIN is not set"]),
        ({"PYKCS11LIB": None}, 3, ["$PYKCS11LIB must name"]),
        ({"PYKCS11LIB": "/nonexistent/libpkcs11.so"}, 3, ["$PYKCS11LIB must name", "no such file"]),
        ({"@key": "hsm:2?label=nosuchtoken"}, 3, ["cannot read the public key", "No PKCS#11 token"]),
        ({"@key": "hsm:7?label=release"}, 3, ["cannot read the public key"]),
        ({"@key": "hsm:3?label=release"}, 2, ["ecdsa-sha2-nistp384", "only EC P-256"]),
        ({"@key": "hsm:two"}, 2, ["not a hsm key reference", "hsm:2?label=release"]),
    ],
)
def test_an_hsm_that_cannot_sign_is_one_line_before_anything_is_published(
    builds, hsm, tmp_path, change, code, fragments
):
    env = {**_env(), **hsm}
    key = change.pop("@key", URI)
    for name, value in change.items():
        env.pop(name) if value is None else env.__setitem__(name, value)
    result = _publish(tmp_path / "store", builds["a"], "1.0.0", env, "--sign-key", key)
    assert_clean_error(result, code, f"--sign-key {key}", *fragments)
    assert PIN not in result.stderr and "9999" not in result.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "reference",
    [
        "awskms:",
        "awskms:///alias/release",
        "awskms:arn:aws:kms:eu-west-1:12:key/x",
        "awskms:alias/re lease",
        "gcpkms:projects/p/keys/k",
        "gcpkms:projects/my-proj/locations/global/keyRings/r/cryptoKeys/k",
        "azurekms:https://vault.example/keys/k",
        "azurekms://v.vault.azure.net/secrets/k",
        "hsm:2?pin-value=1234",
        "sigstore:staging",
        "awskms:" + "a" * 5000,
    ],
)
def test_a_malformed_kms_reference_is_bad_input(builds, tmp_path, reference):
    result = _publish(tmp_path / "store", builds["a"], "1.0.0", _env(), "--sign-key", reference)
    assert_clean_error(
        result,
        2,
        "--sign-key",
        "key reference" if not reference.startswith("sigstore") else "keyless signing is just 'sigstore:'",
    )
    assert "1234" not in result.stderr or "pin-value" in reference
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "reference",
    [
        "awskms:alias/release",
        "awskms:arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "gcpkms:projects/my-proj/locations/global/keyRings/release/cryptoKeys/signing/cryptoKeyVersions/1",
        "azurekms://release-vault.vault.azure.net/keys/signing",
    ],
)
def test_an_unreachable_kms_is_an_environment_problem_that_prints_no_credential(builds, tmp_path, reference):
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    env = _env(
        AWS_ENDPOINT_URL_KMS="http://127.0.0.1:9",
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_DEFAULT_REGION="eu-west-1",
        AZURE_CLIENT_SECRET=secret,
    )
    result = _publish(tmp_path / "store", builds["a"], "1.0.0", env, "--sign-key", reference)
    assert_clean_error(result, 3, f"--sign-key {reference}")
    assert secret not in result.stderr
    assert not (tmp_path / "store").exists()


def test_keyless_signing_without_an_ambient_credential_is_refused_before_any_work(builds, tmp_path):
    for env in (_env(), _env("COMPILE_SIGN_KEY", COMPILE_SIGN_KEY="sigstore:")):
        args = ("--sign-key", "sigstore:") if "COMPILE_SIGN_KEY" not in env else ()
        result = _publish(tmp_path / "store", builds["a"], "1.0.0", env, *args)
        assert_clean_error(result, 3, "sigstore: no ambient OIDC credential", "id-token: write")
        assert not (tmp_path / "store").exists()


def _keyless_looking_bundle(mangle: bool) -> bytes:
    """A bundle shaped as sigstore writes a keyless one (a certificate, a log entry), whose contents are junk."""
    envelope = {
        "payload": "e30=",
        "payloadType": "application/vnd.in-toto+json",
        "signatures": [{"sig": "AAAA", "keyid": ""}],
    }
    material = {"certificate": {"rawBytes": "MIIB" if mangle else "bm90IGEgY2VydGlmaWNhdGU="}, "tlogEntries": []}
    return json.dumps(
        {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": material,
            "dsseEnvelope": envelope,
        }
    ).encode()


def test_verify_by_identity_refuses_key_signed_and_malformed_bundles_and_bad_options(builds, keys, tmp_path):
    store = tmp_path / "store"
    assert _publish(store, builds["a"], "1.0.0", _env(), "--sign-key", keys["ed25519"]).exit_code == 0
    assert _publish(store, builds["a"], "2.0.0", _env()).exit_code == 0
    open_store(str(store)).attach("digits", "2.0.0", "signature", _keyless_looking_bundle(True))
    identity = (
        "--identity",
        "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main",
        "--issuer",
        "https://token.actions.githubusercontent.com",
    )

    def verify(version: str, *args: str | Path):
        return run_cli("verify", f"digits@{version}", "--store", store, *args, env=_env())

    assert_clean_error(verify("1.0.0", *identity), 1, "is key-signed", "--key PUB.pem")
    assert_clean_error(verify("2.0.0", *identity), 1, "is not a keyless Sigstore bundle")
    assert_clean_error(verify("2.0.0", "--key", keys["ed25519.pub"]), 1, "is signed keyless", "--identity")
    assert_clean_error(verify("1.0.0", *identity, "--key", keys["ed25519.pub"]), 2, "give one way")
    assert_clean_error(verify("1.0.0", *identity[:2]), 2, "--issuer is missing")
    assert_clean_error(verify("1.0.0", *identity[2:]), 2, "--identity is missing")
    assert_clean_error(verify("1.0.0"), 2, "give --key PUB.pem, or --identity and --issuer")
    assert_clean_error(verify("1.0.0", identity[0], identity[1], "--issuer", "http://plain"), 2, "--issuer")
    assert_clean_error(verify("1.0.0", "--identity", "", *identity[2:]), 2, "--identity")
