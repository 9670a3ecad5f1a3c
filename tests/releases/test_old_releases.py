"""Releases made before the golden inputs became an OCI layer keep working (issue 42): the store of
tests/fixtures/old_release (made by tests/fixtures/make_old_release.py with the code of commit dec1b12: legacy
``vnd.trt-compile.*`` media types and annotations, no golden layer, signed under the old predicate URI) pulls,
verifies and exports with this code, and republishing its unchanged build folder is ``unchanged``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.registry import start_registry

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "old_release"


@pytest.fixture(params=["folder", "registry"])
def old_store(request, tmp_path):
    """The fixture's store, copied (nothing the tests do reaches the checkout): the folder store, or the registry
    storage tree served by a real docker-registry."""
    if request.param == "folder":
        shutil.copytree(OLD / "store", tmp_path / "store")
        yield str(tmp_path / "store")
        return
    shutil.copytree(OLD / "registry", tmp_path / "registry" / "data")
    registry = start_registry(tmp_path / "registry")
    try:
        yield f"oci+http://{registry.host}/ml"
    finally:
        registry.stop()


def test_an_old_release_pulls_verifies_exports_and_republishes_unchanged(old_store, tmp_path):
    public = OLD / "release.pub"
    # its channel was moved unsigned (channels are signed since): a verifying consumer takes it only while
    # $COMPILE_ALLOW_UNSIGNED_CHANNELS=1 says so, and names the version to pin otherwise
    refused = run_cli("verify", "digits@stable", "--store", old_store, "--key", public)
    assert refused.exit_code == 1 and "not signed" in refused.stderr and "digits@1.0.0" in refused.stderr
    transition = {**os.environ, "COMPILE_ALLOW_UNSIGNED_CHANNELS": "1"}
    verified = run_cli("verify", "digits@stable", "--store", old_store, "--key", public, "--json", env=transition)
    assert verified.exit_code == 0, verified.stderr
    assert json.loads(verified.stdout)["blobs"] == 6  # 2 plans, 2 layers.json, check.json, golden.npz
    out = tmp_path / "serve"
    out.mkdir()
    pulled = run_cli("pull", "digits@stable", "--store", old_store, "--sku", "rtx-3090", "--out", out / "e.plan",
                     "--golden", "--verify-key", public, env=transition)  # fmt: skip
    assert pulled.exit_code == 0, pulled.stderr
    assert (out / "e.plan").read_bytes() == (OLD / "engines" / "rtx-3090" / "fp32" / "engine.plan").read_bytes()
    assert (out / "golden.npz").read_bytes() == (OLD / "engines" / "golden.npz").read_bytes()
    exported = run_cli("export", "rtx", "digits@1.0.0", "--store", old_store, "--out", out, "--verify-key", public,
                       "--json")  # fmt: skip
    assert exported.exit_code == 0, exported.stderr
    assert sorted(json.loads(exported.stdout)["files"]) == [
        "golden.npz",
        "sm86/digits_ctx.onnx",
        "sm86/rtx-3090-fp32.engine",
        "sm89/digits_ctx.onnx",
        "sm89/rtx-4090-fp32.engine",
    ]
    build = tmp_path / "build"
    shutil.copytree(OLD / "engines", build)  # the model build.json names is on no machine: no model signature
    again = run_cli("publish", build, "--store", old_store, "--name", "digits", "--version", "1.0.0", "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "unchanged"
    listed = run_cli("ls", "--verify", "--store", old_store)
    assert listed.exit_code == 0 and "nothing damaged, dangling" in listed.stdout, listed.stdout + listed.stderr
