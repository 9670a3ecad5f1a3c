"""OpenSSF model signing: a release published with an EC key carries a model_signing signature of its pulled folder
(`pull_all`, what `compile pull --all` writes) and of each precision's `compile export rtx` folder, and the
`model_signing` CLI (model-signing 1.1.1, a tool nobody here
wrote) verifies that folder with the public key, on every store; a changed or added file fails it; Ed25519 keeps
signing our releases and says model_signing needs EC."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.core.errors import InvalidInput
from compiler.releases.pull_all import pull_all
from tests.support.cli import run_cli
from tests.support.keys import write_keys

MODEL_SIGNING = str(Path(sys.executable).with_name("model_signing"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _verify(folder: Path, public: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MODEL_SIGNING, "verify", "key", "--signature", folder / "model.sig", "--public_key", public, folder],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_model_signing_verifies_a_pulled_release_signed_with_an_ec_key(store, builds, keys, tmp_path):
    done = store.cli(
        "publish", builds["a"], "--name", "digits", "--version", "1.0.0", "--sign-key", keys["p256"], "--json"
    )
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["model_signature"] == "written"
    folder = tmp_path / "pulled" / "digits-1.0.0"  # parents are made
    result = pull_all(store.uri, "digits@1.0.0", out=folder, use_cache=False)
    assert result.model_signature
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([f.name for f in result.files] + ["model.sig"])
    assert any(n.endswith(".plan") for n in names)
    verified = _verify(folder, keys["p256.pub"])
    assert verified.returncode == 0 and "Verification succeeded" in verified.stdout, verified.stdout + verified.stderr
    assert _verify(folder, keys["ed25519.pub"]).returncode != 0  # another key is refused

    plan = next(folder.glob("*.plan"))
    plan.write_bytes(plan.read_bytes()[:-1] + b"\0")
    tampered = _verify(folder, keys["p256.pub"])
    assert tampered.returncode != 0 and "Hash mismatch" in tampered.stdout + tampered.stderr
    pull_all(store.uri, "digits@1.0.0", out=folder, use_cache=False)  # a re-pull restores the file
    assert _verify(folder, keys["p256.pub"]).returncode == 0


def test_model_signing_verifies_the_folder_export_rtx_writes(store, builds, keys, tmp_path):
    done = store.cli(
        "publish", builds["a"], "--name", "digits", "--version", "1.0.0", "--sign-key", keys["p256"], "--json"
    )
    assert done.exit_code == 0, done.stderr
    exported = store.cli("export", "rtx", "digits@1.0.0", "--out", tmp_path / "app", "--json")
    assert exported.exit_code == 0, exported.stderr
    result = json.loads(exported.stdout)
    assert result["model_signature"] == "written"
    folder = tmp_path / "app" / "digits"
    found = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert found == sorted([*result["files"], "rtx.json", "model.sig"])
    verified = _verify(folder, keys["p256.pub"])
    assert verified.returncode == 0 and "Verification succeeded" in verified.stdout, verified.stdout + verified.stderr

    renamed = store.cli("export", "rtx", "digits@1.0.0", "--out", tmp_path / "other", "--model-name", "digits_v1",
                        "--json")  # fmt: skip
    assert renamed.exit_code == 0, renamed.stderr
    assert json.loads(renamed.stdout)["model_signature"].startswith("not written: --model-name changes the files")
    assert not (tmp_path / "other" / "digits_v1" / "model.sig").exists()
    index = folder / "rtx.json"
    index.write_bytes(index.read_bytes().replace(b'"version"', b'"Version"'))
    tampered = _verify(folder, keys["p256.pub"])
    assert tampered.returncode != 0 and "Hash mismatch" in tampered.stdout + tampered.stderr


def test_a_folder_with_other_files_is_refused_and_left_as_it_was(store, builds, keys, tmp_path):
    assert store.cli("publish", builds["a"], "--name", "digits", "--version", "2.0.0").exit_code == 0
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInput, match=r"notes\.txt"):
        pull_all(store.uri, "digits@2.0.0", out=folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_an_ed25519_release_has_no_model_signature_and_says_why(store, builds, keys, tmp_path):
    done = store.cli(
        "publish", builds["a"], "--name", "digits", "--version", "3.0.0", "--sign-key", keys["ed25519"], "--json"
    )
    assert done.exit_code == 0, done.stderr
    assert "model_signing needs an EC" in json.loads(done.stdout)["model_signature"]
    verified = run_cli("verify", "digits@3.0.0", "--store", store.uri, "--key", keys["ed25519.pub"], env=store.env)
    assert verified.exit_code == 0, verified.stderr
    result = pull_all(store.uri, "digits@3.0.0", out=tmp_path / "pulled", use_cache=False)
    assert not result.model_signature and not (tmp_path / "pulled" / "model.sig").exists()


def test_pull_all_on_the_command_line_writes_the_folder_model_signing_verifies(built_digits, keys, tmp_path):
    store = tmp_path / "store"
    done = run_cli("publish", built_digits(), "--name", "digits", "--version", "1.0.0", "--store", store,
                   "--sign-key", keys["p256"])  # fmt: skip
    assert done.exit_code == 0, done.stderr
    folder = tmp_path / "serve" / "digits-1.0.0"
    pulled = run_cli("pull", "--all", "digits@1.0.0", "--store", store, "--out", folder, "--verify-key",
                     keys["p256.pub"], "--json")  # fmt: skip
    assert pulled.exit_code == 0, pulled.stderr
    assert json.loads(pulled.stdout)["model_signature"] is True
    assert _verify(folder, keys["p256.pub"]).returncode == 0
    for extra in (["--sku", "rtx-4090"], ["--precision", "fp16"], []):
        args = ["pull", "digits@1.0.0", "--store", store, "--out", tmp_path / "other", *extra]
        refused = run_cli(*args, *(["--all"] if extra != [] else []))
        assert refused.exit_code == 2 and refused.stderr.startswith("error:"), (extra, refused.stderr)
