"""Keys given by value and what a store's bundles may hold (issue 39: critical 3, major 6, minor 12, 13, 15), through
the real CLI:

- key material pasted where a key's place goes (a pipeline's signing.key, --sign-key, $COMPILE_SIGN_KEY,
  --verify-key, --key) is never echoed: the error calls it a key value;
- ``env://VAR`` works for --sign-key as for the pipeline's signing.key, and an empty $COMPILE_SIGN_KEY is refused
  as an empty $COMPILE_VERIFY_KEY is;
- a signature.json or provenance.json nested a million deep fails verify, a verified pull and compile provenance
  (exit 1), not with an internal error;
- ``release --dry-run`` refuses what the real run refuses: a remote cache of no store's scheme or with
  credentials in it, calibration.exclude naming no node.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import REPO, assert_clean_error, run_cli
from tests.support.keys import write_keys

NAME, SKU = "digits", "rtx-3090"
NESTED = b"[" * 1_000_000


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def material_forms(pem: Path) -> dict[str, str]:
    """One private key as someone may paste it: the PEM, its base64 body on one line, hex of the DER."""
    text = pem.read_text()
    body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
    return {"pem": text, "base64": body, "hex": base64.b64decode(body).hex()}


def leaked(secret: str, output: str, run: int = 8) -> str | None:
    """A piece of ``secret`` of ``run`` characters that ``output`` holds, if any."""
    flat = "".join(secret.split())
    return next((flat[i : i + run] for i in range(len(flat) - run + 1) if flat[i : i + run] in output), None)


def pipeline(folder: Path, extra: str = "", precision: str = "fp16") -> Path:
    path = folder / "pipeline.yaml"
    path.write_text(
        "release: {name: digits, version: 1.0.0}\n"
        f"model: {REPO}/compiler/examples/digits_cnn.onnx\n"
        f"profiles: {REPO}/profiles/digits.yaml\n"
        f"targets: {{rtx-4090: [{precision}]}}\n" + extra
    )
    return path


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COMPILE_SIGN_KEY", "COMPILE_VERIFY_KEY")}
    return {**env, **values}


@pytest.mark.parametrize("form", ["base64", "hex", "pem"])
@pytest.mark.parametrize("where", ["signing.key", "--sign-key", "COMPILE_SIGN_KEY", "--verify-key", "--key"])
def test_key_material_is_called_a_key_value_and_never_printed(form, where, keys, tmp_path, request):
    secret = material_forms(keys["p256"])[form]
    if where == "signing.key" and form == "pem":
        secret = secret.replace("\n", "\\n")  # as a YAML double-quoted scalar
    env = _env(COMPILE_SIGN_KEY=secret) if where == "COMPILE_SIGN_KEY" else _env()
    if where == "signing.key":
        result = run_cli("release", pipeline(tmp_path, f'signing: {{key: "{secret}"}}\n'), "--dry-run", env=env)
    elif where in ("--sign-key", "COMPILE_SIGN_KEY"):
        args = ("--sign-key", secret) if where == "--sign-key" else ()
        result = run_cli("publish", tmp_path / "build", "--name", NAME, "--version", "1.0.0", *args, env=env)
    else:
        store = request.getfixturevalue("signed_store")
        out = ["--sku", SKU, "--out", tmp_path / "x.plan"] if where == "--verify-key" else []
        command = "verify" if where == "--key" else "pull"
        result = run_cli(command, f"{NAME}@1.0.0", "--store", store, where, secret, *out, env=env)
    assert result.exit_code == 2, result.stderr
    assert leaked(secret, result.stdout + result.stderr) is None, result.stderr
    assert "a key value" in result.stderr or "key material" in result.stderr, result.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "x.plan").exists()


def test_an_empty_sign_key_variable_is_refused_not_an_unsigned_release(tmp_path):
    result = run_cli("release", pipeline(tmp_path), "--dry-run", env=_env(COMPILE_SIGN_KEY=""))
    assert_clean_error(result, 2, "$COMPILE_SIGN_KEY is set but empty")


def test_sign_key_takes_env_references_as_the_pipeline_does(keys, tmp_path):
    env = _env(RELEASE_KEY=keys["p256"].read_text(), COMPILE_SIGN_KEY="env://RELEASE_KEY")
    assert run_cli("release", pipeline(tmp_path), "--dry-run", env=env).exit_code == 0
    result = run_cli(
        "publish", tmp_path / "build", "--name", NAME, "--version", "1.0.0", "--sign-key", "env://UNSET_KEY", env=_env()
    )
    assert_clean_error(result, 2, "--sign-key env://UNSET_KEY", "$UNSET_KEY is not set")
    assert not (tmp_path / "artifacts").exists()


@pytest.fixture(scope="module")
def signed_store(tmp_path_factory, built_digits, keys) -> Path:
    root = tmp_path_factory.mktemp("signed")
    build = built_digits((SKU,), ("fp16",))
    store = root / "store"
    done = run_cli("publish", build, "--name", NAME, "--version", "1.0.0", "--store", store, "--sign-key", keys["p256"])
    assert done.exit_code == 0, done.stderr
    return store


def test_verify_key_takes_env_references(signed_store, keys):
    env = _env(RELEASE_PUB=keys["p256.pub"].read_text())
    result = run_cli("verify", f"{NAME}@1.0.0", "--store", signed_store, "--key", "env://RELEASE_PUB", env=env)
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("kind", ["signature", "provenance"])
def test_a_bundle_nested_a_million_deep_fails_its_check(kind, signed_store, keys, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(signed_store, store)
    path = store / "releases" / NAME / "1.0.0" / f"{kind}.json"
    path.chmod(0o644)
    path.write_bytes(NESTED)
    verdict = run_cli("verify", f"{NAME}@1.0.0", "--store", store, "--key", keys["p256.pub"], timeout=60)
    assert_clean_error(verdict, 1, f"{NAME}@1.0.0")
    if kind == "signature":
        out = tmp_path / "digits.plan"
        pulled = run_cli(
            "pull", f"{NAME}@1.0.0", "--store", store, "--sku", SKU, "--out", out, "--verify-key", keys["p256.pub"]
        )
        assert_clean_error(pulled, 1, f"{NAME}@1.0.0")
        assert not out.exists()
    else:
        shown = run_cli("provenance", f"{NAME}@1.0.0", "--store", store, timeout=60)
        assert_clean_error(shown, 1, "provenance", "nested deeper")


@pytest.mark.parametrize(
    ("extra", "precision", "fragment"),
    [
        ("cache: ftp://x\n", "fp16", "unknown scheme"),
        ('cache: "oci://u:hunter2hunter2@h/r"\n', "fp16", "credentials do not go in the URI"),
        (
            f"calibration: {{data: {REPO}/compiler/examples/digits.npz, exclude: [no_such_node]}}\n",
            "int8",
            "no_such_node",
        ),
    ],
    ids=["cache-scheme", "cache-credentials", "exclude-no-node"],
)
def test_a_dry_run_refuses_what_the_release_refuses(extra, precision, fragment, tmp_path):
    result = run_cli("release", pipeline(tmp_path, extra, precision), "--dry-run", env=_env())
    assert_clean_error(result, 2, fragment)
    assert "hunter2" not in result.stderr + result.stdout
