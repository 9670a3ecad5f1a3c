"""Hostile golden inputs (issue 34): a tampered, oversized, mislisted, pickled or bomb-like golden blob is refused
(exit 1) by pull and export before anything of it is written or served; a build folder whose check recorded
golden inputs it no longer has is not published; a single sample over the cap makes no golden file at all."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from compiler.check.golden_capture import write_golden_npz
from compiler.core.errors import CheckFailed
from compiler.core.files import hash_json
from compiler.core.records import GOLDEN_MAX_BYTES, BlobRef, GoldenRecord, GoldenTensor
from compiler.releases.golden import load_golden
from compiler.releases.publish import publish
from tests.support.cli import assert_clean_error, run_cli
from tests.support.serving import datacenter_copy


@pytest.fixture(scope="module")
def checked_build(built_digits, digits_data) -> Path:
    return built_digits(("rtx-4090",), ("fp16",), data=digits_data)


def _published(build: Path, tmp_path: Path) -> tuple[str, dict]:
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    manifest = Path(store) / "releases" / "digits" / "1.0.0" / "manifest.json"
    return store, json.loads(manifest.read_text())


def _pull(store: str, tmp_path: Path, *extra: str):
    out = tmp_path / "serve" / "digits.plan"
    out.parent.mkdir(exist_ok=True)
    return run_cli(
        "pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", out, "--golden", "--no-cache", *extra
    ), out.with_name("golden.npz")


def test_a_tampered_golden_blob_is_refused(checked_build, tmp_path):
    store, manifest = _published(checked_build, tmp_path)
    blob = Path(store) / "blobs" / "sha256" / manifest["content"]["golden"]["blob"]["sha256"]
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-20] ^= 0xFF
    blob.write_bytes(bytes(data))
    result, golden = _pull(store, tmp_path)
    assert_clean_error(result, 1, manifest["content"]["golden"]["blob"]["sha256"], "corrupt")
    assert not golden.exists()


def test_an_oversized_golden_claim_is_refused_before_a_byte_is_fetched(checked_build, tmp_path):
    store, manifest = _published(checked_build, tmp_path)
    path = Path(store) / "releases" / "digits" / "1.0.0" / "manifest.json"
    (Path(store) / "blobs" / "sha256" / manifest["content"]["golden"]["blob"]["sha256"]).unlink()
    manifest["content"]["golden"]["blob"]["size_bytes"] = GOLDEN_MAX_BYTES + 1
    manifest["content_sha256"] = hash_json(manifest["content"])
    path.chmod(0o644)
    path.write_text(json.dumps(manifest))
    result, golden = _pull(store, tmp_path)
    assert_clean_error(result, 1, "manifest.json is damaged", f"more than any release's may ({GOLDEN_MAX_BYTES})")
    assert not golden.exists()


def test_golden_inputs_that_are_not_what_the_manifest_lists_are_refused(checked_build, tmp_path):
    build = tmp_path / "build"
    shutil.copytree(checked_build, build)
    report = json.loads((build / "check.json").read_text())
    report["golden"]["inputs"][0]["shape"] = [4, 3, 224, 224]  # a listing the file does not hold
    (build / "check.json").write_text(json.dumps(report))
    store, _ = _published(build, tmp_path)
    result, golden = _pull(store, tmp_path)
    assert_clean_error(
        result, 1, "the golden inputs are not what the manifest lists", "input_0 is float32 [4, 1, 8, 8]"
    )
    assert not golden.exists()


def test_export_with_a_tampered_golden_blob_writes_nothing(checked_build, tmp_path):
    build = datacenter_copy(checked_build, tmp_path / "build")
    store, manifest = _published(build, tmp_path)
    blob = Path(store) / "blobs" / "sha256" / manifest["content"]["golden"]["blob"]["sha256"]
    blob.chmod(0o644)
    blob.write_bytes(b"PK\x03\x04 not the golden inputs")
    repo = tmp_path / "models"
    repo.mkdir()
    result = run_cli(
        "export", "triton", "digits@1.0.0", "--store", store, "--repo", repo, "--triton-release", "25.10", "--no-cache"
    )
    assert_clean_error(result, 1, manifest["content"]["golden"]["blob"]["sha256"])
    assert list(repo.iterdir()) == []


def test_publish_refuses_a_check_whose_golden_file_is_gone(checked_build, tmp_path):
    build = tmp_path / "build"
    shutil.copytree(checked_build, build)
    (build / "golden.npz").unlink()
    result = run_cli("publish", build, "--store", tmp_path / "store", "--name", "digits", "--version", "1.0.0")
    assert_clean_error(result, 1, "golden.npz: missing", "run compile check")
    assert not (tmp_path / "store" / "releases").exists()


def test_publish_refuses_a_golden_file_edited_after_the_check(checked_build, tmp_path):
    build = tmp_path / "build"
    shutil.copytree(checked_build, build)
    np.savez(build / "golden.npz", input_0=np.zeros((4, 1, 8, 8), np.float32), output_0=np.zeros((4, 10), np.float32))
    result = run_cli("publish", build, "--store", tmp_path / "store", "--name", "digits", "--version", "1.0.0")
    assert_clean_error(result, 1, "golden.npz", "check.json records", "run compile check again")
    assert not (tmp_path / "store" / "releases").exists()


def test_pull_golden_into_a_plan_named_golden_is_refused(checked_build, tmp_path):
    store, _ = _published(checked_build, tmp_path)
    result = run_cli(
        "pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", tmp_path / "golden.npz", "--golden"
    )
    assert_clean_error(result, 2, "golden.npz is written beside the plan")
    assert not (tmp_path / "golden.npz").exists()


def _record(path: Path, inputs: list[GoldenTensor], outputs: list[GoldenTensor]) -> GoldenRecord:
    import hashlib

    data = path.read_bytes()
    return GoldenRecord(
        blob=BlobRef(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)),
        samples=1,
        inputs=inputs,
        outputs=outputs,
    )


def test_a_pickled_golden_array_is_never_unpickled(tmp_path):
    path = tmp_path / "golden.npz"
    np.savez(path, input_0=np.array([{"__reduce__": "boom"}], dtype=object), output_0=np.zeros((1,), np.float32))
    record = _record(
        path, [GoldenTensor(name="x", dtype="object", shape=[1])], [GoldenTensor(name="y", dtype="float32", shape=[1])]
    )
    with pytest.raises(CheckFailed, match="not what the manifest lists"):
        load_golden(path, record, "digits@1.0.0")


def test_a_golden_archive_that_unpacks_beyond_the_cap_is_refused_unread(tmp_path):
    path = tmp_path / "golden.npz"
    big = np.zeros((GOLDEN_MAX_BYTES // 4 + 1024,), np.float32)
    buffer = io.BytesIO()
    np.save(buffer, big)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:  # a few KB that inflate past the cap
        archive.writestr("input_0.npy", buffer.getvalue())
        archive.writestr("output_0.npy", io.BytesIO().getvalue())
    assert path.stat().st_size < 1 << 20
    record = _record(
        path,
        [GoldenTensor(name="x", dtype="float32", shape=list(big.shape))],
        [GoldenTensor(name="y", dtype="float32", shape=[0])],
    )
    with pytest.raises(CheckFailed, match="unpack to"):
        load_golden(path, record, "digits@1.0.0")


def test_one_sample_over_the_cap_makes_no_golden_file(tmp_path):
    huge = np.zeros((2, GOLDEN_MAX_BYTES // 4), np.float32)  # one sample alone is the whole cap
    assert write_golden_npz(tmp_path / "golden.npz", {"x": huge}, {"y": np.zeros((2, 1), np.float32)}) is None
    assert not (tmp_path / "golden.npz").exists()
    record = write_golden_npz(tmp_path / "golden.npz", {"x": huge[:, :1000]}, {"y": np.zeros((2, 1), np.float32)})
    assert record.samples == 2 and record.blob.size_bytes == (tmp_path / "golden.npz").stat().st_size
