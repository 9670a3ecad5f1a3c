"""Issue 34: golden inputs in every release: ``compile check --data`` keeps a few samples and the FP32 model's
outputs for them (golden.npz), publish stores them as a content-addressed blob of the release, and
``compile pull --golden`` / ``pull_golden`` fetch and verify them (digest, size, and the arrays the manifest
lists). The reference outputs are recomputed here with onnxruntime to show they are the model's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compiler.core.records import GOLDEN_MAX_BYTES
from compiler.releases import resolve
from compiler.releases.golden import pull_golden
from compiler.releases.publish import publish
from tests.support.cli import run_cli


@pytest.fixture(scope="module")
def checked_build(built_digits, digits_data) -> Path:
    return built_digits(("rtx-4090",), ("fp32",), data=digits_data)


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_golden_inputs_are_published_pulled_and_verified(
    checked_build, tmp_path, digits_model, digits_data, store_kind, request
):
    import onnxruntime

    record = json.loads((checked_build / "check.json").read_text())["golden"]
    assert record["samples"] == 4 and record["inputs"][0]["name"] == "image"
    store, env = str(tmp_path / "store"), None
    if store_kind == "s3":
        import uuid

        server = request.getfixturevalue("s3")
        bucket = f"t-{uuid.uuid4().hex[:16]}"
        server.client().create_bucket(Bucket=bucket)
        store, env = f"s3://{bucket}/team", server.env()
    published = run_cli("publish", checked_build, "--store", store, "--name", "digits", "--version", "1.0.0", env=env)
    assert published.exit_code == 0, published.stderr
    golden = resolve(store, "digits@1.0.0").manifest.content.golden if store_kind == "local" else None
    if golden is not None:
        assert golden.blob.sha256 == record["blob"]["sha256"] and golden.blob.size_bytes <= GOLDEN_MAX_BYTES
    out = tmp_path / "serve" / "digits.plan"
    out.parent.mkdir()
    pulled = run_cli(
        "pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", out, "--golden", "--json", env=env
    )
    assert pulled.exit_code == 0, pulled.stderr
    assert json.loads(pulled.stdout)["golden"]["sha256"] == record["blob"]["sha256"]
    with np.load(out.with_name("golden.npz"), allow_pickle=False) as arrays:
        images, logits = arrays["input_0"], arrays["output_0"]
    with np.load(digits_data, allow_pickle=False) as data:
        assert np.array_equal(images, data["image"][:4].astype(images.dtype))
    session = onnxruntime.InferenceSession(str(digits_model), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(logits, session.run(None, {"image": images})[0], rtol=1e-5, atol=1e-5)


def test_the_python_api_verifies_what_it_writes(checked_build, tmp_path):
    store = str(tmp_path / "store")
    publish(checked_build, store, "digits", "1.0.0")
    result = pull_golden(store, "digits@1.0.0", tmp_path / "g.npz")
    assert (result.samples, [t.shape for t in result.outputs]) == (4, [[4, 10]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "store"]  # nothing staged is left
    listed = run_cli("ls", "digits@1.0.0", "--store", store)
    assert "golden inputs: 4 sample(s) of image with FP32 reference outputs" in listed.stdout, listed.stderr


def test_a_release_checked_without_data_has_no_golden_inputs(tmp_path, checked_build):
    import shutil

    build = tmp_path / "build"
    shutil.copytree(checked_build, build)
    assert run_cli("check", build, "--json").exit_code == 0  # no --data: no golden inputs recorded
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    assert resolve(store, "digits@1.0.0").manifest.content.golden is None
    assert "golden inputs: none (checked without --data)" in run_cli("ls", "digits@1.0.0", "--store", store).stdout
    out = tmp_path / "p.plan"
    result = run_cli("pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", out, "--golden")
    assert result.exit_code == 2 and "has no golden inputs" in result.stderr and "--data" in result.stderr


def test_a_check_reused_after_its_golden_file_was_removed_writes_it_again(tmp_path, checked_build, digits_data):
    import shutil

    build = tmp_path / "build"
    shutil.copytree(checked_build, build)
    before = (build / "golden.npz").read_bytes()
    (build / "golden.npz").unlink()
    result = run_cli("check", build, "--data", digits_data, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["reused"] is False and (build / "golden.npz").read_bytes() == before
    again = run_cli("check", build, "--data", digits_data, "--json")
    assert json.loads(again.stdout)["reused"] is True


def test_a_verified_pull_with_golden_reads_the_manifest_once_and_verifies_the_golden_inputs_too(
    checked_build, tmp_path, monkeypatch
):
    """`pull --golden --verify-key`: one manifest read serves the plan and golden.npz, and an unsigned release
    gets neither (nothing is written); a signed one gets both."""
    from compiler.releases.pull import pull
    from compiler.stores import open_store
    from tests.support.keys import write_keys

    (tmp_path / "keys").mkdir()
    keys = write_keys(tmp_path / "keys")
    store = str(tmp_path / "store")
    publish(checked_build, store, "digits", "1.0.0")
    signed = run_cli("publish", checked_build, "--store", store, "--name", "digits", "--version", "1.1.0",
                     "--sign-key", keys["ed25519"])  # fmt: skip
    assert signed.exit_code == 0, signed.stderr
    out = tmp_path / "out"
    out.mkdir()
    unsigned = run_cli("pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", out / "d.plan",
                       "--golden", "--verify-key", keys["ed25519.pub"])  # fmt: skip
    assert unsigned.exit_code == 1 and "unsigned" in unsigned.stderr
    assert list(out.iterdir()) == []

    opened = open_store(store)
    reads = []
    original = type(opened).read_manifest
    monkeypatch.setattr(type(opened), "read_manifest", lambda self, *a: reads.append(a) or original(self, *a))
    result = pull(
        opened,
        "digits@1.1.0",
        out=out / "d.plan",
        sku="rtx-4090",
        verify_key=keys["ed25519.pub"],
        golden=True,
        use_cache=False,
    )
    assert reads == [("digits", "1.1.0")]
    assert result.golden.sha256 == resolve(store, "digits@1.1.0").manifest.content.golden.blob.sha256
    assert sorted(p.name for p in out.iterdir()) == ["d.plan", "d.plan.json", "golden.npz"]
