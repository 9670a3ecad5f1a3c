"""Hostile inputs to signing and verification (issue 31), through the real CLI on a local store:

- key files that are not what they must be (not PEM, a public key to sign or a private key to verify, RSA, EC
  P-384, encrypted, huge, empty, a FIFO, a folder, a device, missing) given to `publish --sign-key`, `verify --key`
  and `pull --verify-key`: exit 2, one error line naming the key, before the store is touched (a publish creates
  no store);
- a signature or provenance in the store that is damaged, planted or of another release (garbage, empty, huge, a
  FIFO, a link out, JSON that is no bundle, a bundle with a flipped signature byte, another version's signature):
  verify and a verified pull exit 1 naming what is wrong (2 for a link leading out of the store, refused as the
  store refuses any), write nothing, and change no byte of the store.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.hostile.harness import snapshot, snapshot_changes
from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys

NAME, SKU = "digits", "rtx-3090"


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    paths = write_keys(folder)
    paths["huge"] = folder / "huge.pem"
    with open(paths["huge"], "wb") as handle:
        handle.truncate(1 << 30)  # sparse: a GiB that costs no disk
    paths["empty"] = folder / "empty.pem"
    paths["empty"].write_bytes(b"")
    paths["fifo"] = folder / "fifo.pem"
    os.mkfifo(paths["fifo"])
    paths["folder"] = folder / "folder.pem"
    paths["folder"].mkdir()
    paths["device"] = Path("/dev/zero")
    paths["missing"] = folder / "missing.pem"
    return paths


@pytest.fixture(scope="module")
def template(tmp_path_factory, built_digits, keys) -> Path:
    """A store with 1.0.0 and 1.0.1 signed by the Ed25519 key, and 2.0.0 unsigned."""
    root = tmp_path_factory.mktemp("trust")
    build = built_digits((SKU,), ("fp16",))
    store = root / "store"
    for version, sign in (("1.0.0", True), ("1.0.1", True), ("2.0.0", False)):
        args = ["--sign-key", keys["ed25519"]] if sign else []
        done = run_cli("publish", build, "--name", NAME, "--version", version, "--store", store, *args)
        assert done.exit_code == 0, done.stderr
    (root / "build-path").write_text(str(build))
    return root


KEY_CASES = ("not-pem", "rsa", "p384", "encrypted", "huge", "empty", "fifo", "folder", "device", "missing")


@pytest.mark.parametrize("bad", [*KEY_CASES, "ed25519.pub"])
def test_a_bad_signing_key_is_refused_before_the_store_is_touched(bad, keys, template, tmp_path):
    store = tmp_path / "store"
    build = Path((template / "build-path").read_text())
    result = run_cli(
        "publish", build, "--name", NAME, "--version", "3.0.0", "--store", store, "--sign-key", keys[bad], timeout=60
    )
    assert_clean_error(result, 2, "--sign-key", _named(keys, bad))
    assert not store.exists()


def _named(keys: dict[str, Path], bad: str) -> str:
    """How the error names a key: a file that exists by its path; a path that does not, as a key value (the
    value may be key material)."""
    return "(a key value, not shown)" if bad == "missing" else str(keys[bad])


@pytest.mark.parametrize("bad", [*KEY_CASES, "ed25519"])
@pytest.mark.parametrize("command", ["verify", "pull"])
def test_a_bad_verification_key_is_refused_and_nothing_is_written(bad, command, keys, template, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    option = "--key" if command == "verify" else "--verify-key"
    args = ["--out", out / "digits.plan", "--sku", SKU] if command == "pull" else []
    result = run_cli(command, f"{NAME}@1.0.0", "--store", template / "store", option, keys[bad], *args, timeout=60)
    assert_clean_error(result, 2, option, _named(keys, bad))
    assert list(out.iterdir()) == []


def _flip_signature(data: bytes) -> bytes:
    bundle = json.loads(data)
    signature = bundle["dsseEnvelope"]["signatures"][0]
    raw = bytearray(base64.b64decode(signature["sig"]))
    raw[-1] ^= 1
    signature["sig"] = base64.b64encode(bytes(raw)).decode()
    return json.dumps(bundle).encode()


def _plant(store: Path, kind: str, how: str, outside: Path) -> None:
    path = store / "releases" / NAME / "1.0.0" / f"{kind}.json"
    original = path.read_bytes()
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link-out":
        (outside / "planted.json").write_bytes(original)
        path.symlink_to(outside / "planted.json")
    elif how == "huge":
        with open(path, "wb") as handle:
            handle.truncate(5 << 20)
    else:
        other = (store / "releases" / NAME / "1.0.1" / f"{kind}.json").read_bytes()
        path.write_bytes(
            {
                "garbage": b"\x00\xff{not json",
                "empty": b"",
                "not-a-bundle": b'{"mediaType": "x"}',
                "flipped": _flip_signature(original) if kind == "signature" else b"{}",
                "other-version": other,
            }[how]
        )


SIGNATURE_CASES = ("garbage", "empty", "not-a-bundle", "flipped", "other-version", "huge", "fifo", "link-out")
"""(how the signature is damaged): verify and a verified pull exit 1."""
PROVENANCE_CASES = ("garbage", "empty", "not-a-bundle", "other-version", "huge")


@pytest.mark.parametrize(
    ("kind", "how"), [*(("signature", h) for h in SIGNATURE_CASES), *(("provenance", h) for h in PROVENANCE_CASES)]
)
def test_a_damaged_or_planted_attachment_fails_verification(kind, how, keys, template, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(template / "store", store, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    _plant(store, kind, how, outside)
    before = snapshot(tmp_path, [])
    code = 2 if how == "link-out" else 1  # the store refuses a link leading out of it as it does for a manifest
    verdict = run_cli("verify", f"{NAME}@1.0.0", "--store", store, "--key", keys["ed25519.pub"], timeout=60)
    assert_clean_error(verdict, code, f"{kind}.json" if how in ("fifo", "link-out") else f"{NAME}@1.0.0")
    out = tmp_path / "out"
    out.mkdir()
    pulled = run_cli(
        "pull",
        f"{NAME}@1.0.0",
        "--store",
        store,
        "--sku",
        SKU,
        "--out",
        out / "digits.plan",
        "--verify-key",
        keys["ed25519.pub"],
        timeout=60,
    )
    if kind == "signature":  # a pull checks the signature; the provenance is verify's
        assert_clean_error(pulled, code)
        assert list(out.iterdir()) == []
    else:
        assert pulled.exit_code == 0, pulled.stderr
    out.rename(tmp_path / "pulled")
    assert snapshot_changes(before, snapshot(tmp_path, [tmp_path / "pulled"])) == []


@pytest.mark.parametrize(
    "reference",
    [
        "awskms:alias/x\nerror: forged",
        "hsm:2?label=\x1b[31mred",
        "gcpkms:" + "p" * 100_000,
        "azurekms://",
        "hsm:2?label=release&pin=1234",
        "sigstore:\u202eevil",
        "awskms:arn:aws:kms:eu-west-1:1:key/\u2028x",
    ],
)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_hostile_key_reference_is_one_clean_line_before_the_store_is_touched(reference, how, template, tmp_path):
    store = tmp_path / "store"
    build = Path((template / "build-path").read_text())
    env = {k: v for k, v in os.environ.items() if k != "COMPILE_SIGN_KEY"}
    if how == "environment":
        env["COMPILE_SIGN_KEY"] = reference
    args = ("--sign-key", reference) if how == "option" else ()
    result = run_cli(
        "publish", build, "--name", NAME, "--version", "3.0.0", "--store", store, *args, env=env, timeout=60
    )
    assert_clean_error(result, 2, "--sign-key")  # the variable is the option's default
    assert "\x1b" not in result.stderr and "1234" not in result.stderr and len(result.stderr) < 2000
    assert not store.exists()


@pytest.mark.parametrize(
    ("identity", "issuer", "fragment"),
    [
        ("ci\nerror: forged", "https://token.actions.githubusercontent.com", "--identity"),
        ("x" * 5000, "https://token.actions.githubusercontent.com", "--identity"),
        (
            "https://github.com/o/r/.github/workflows/r.yml@refs/heads/main",
            "token.actions.githubusercontent.com",
            "--issuer",
        ),
        ("https://github.com/o/r/.github/workflows/r.yml@refs/heads/main", "https://a b", "--issuer"),
    ],
)
def test_a_hostile_keyless_identity_is_bad_input_before_any_request(identity, issuer, fragment, template):
    result = run_cli(
        "verify", f"{NAME}@1.0.0", "--store", template / "store", "--identity", identity, "--issuer", issuer, timeout=60
    )
    assert_clean_error(result, 2, fragment)
    assert "forged" not in result.stderr
