"""What a published S3 object says of itself, on a real S3 server (SeaweedFS): records are application/json, blobs
application/octet-stream with their sha256 in user metadata and an S3 checksum the server verified on arrival (the
blob's own sha256 for one put; S3's composite checksum of the parts for a multipart upload); none with
$COMPILE_S3_CHECKSUM=off; a bad value of it is bad input."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest

from compiler.stores import open_store
from compiler.stores.base import VerifyingReader
from tests.support.cli import assert_clean_error, run_cli


@pytest.fixture
def bucket(s3, monkeypatch) -> str:
    name = f"o-{uuid.uuid4().hex[:16]}"
    s3.client().create_bucket(Bucket=name)
    for key, value in s3.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    return name


def _heads(s3, bucket: str) -> dict[str, dict]:
    client = s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key: client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED") for key in keys}


def _sha256_b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def test_a_release_s_objects_carry_content_types_and_checksums_the_server_verified(s3, bucket, builds):
    done = run_cli("publish", builds["a"], "--name", "digits", "--version", "1.0.0", "--store", f"s3://{bucket}/t")
    assert done.exit_code == 0, done.stderr
    heads = _heads(s3, bucket)
    blobs = {key: head for key, head in heads.items() if key.startswith("t/blobs/sha256/")}
    assert len(blobs) >= 3 and len(heads) > len(blobs)
    for key, head in blobs.items():
        digest = key.rsplit("/", 1)[1]
        assert head["ContentType"] == "application/octet-stream", key
        assert head["Metadata"] == {"sha256": digest}, key
        assert head["ChecksumSHA256"] == _sha256_b64(digest), key
    client = s3.client()
    for key, head in heads.items():
        if key not in blobs:
            assert head["ContentType"] == "application/json", key
            assert head.get("ChecksumSHA256"), key
            json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_a_multipart_blob_carries_its_sha256_and_s3_s_composite_checksum(s3, bucket, tmp_path: Path):
    blob = tmp_path / "big.plan"
    blob.write_bytes(os.urandom(17 << 20))  # over the 16 MiB threshold: two parts
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    store = open_store(f"s3://{bucket}/t")
    reader = VerifyingReader(blob, digest, blob.stat().st_size)
    try:
        assert store.put_blob("digits", digest, reader)
    finally:
        reader.close()
    head = _heads(s3, bucket)[f"t/blobs/sha256/{digest}"]
    assert head["Metadata"] == {"sha256": digest}
    assert head["ChecksumSHA256"].endswith("-2") and head["ChecksumSHA256"] != _sha256_b64(digest)


def test_checksums_off_sends_none_and_a_bad_setting_is_bad_input(s3, bucket, builds, monkeypatch):
    uri = f"s3://{bucket}/t"
    env = {**os.environ, "COMPILE_S3_CHECKSUM": "off"}
    done = run_cli("publish", builds["a"], "--name", "digits", "--version", "1.0.0", "--store", uri, env=env)
    assert done.exit_code == 0, done.stderr
    for key, head in _heads(s3, bucket).items():
        assert not head.get("ChecksumSHA256"), key
        assert head["ContentType"] in ("application/json", "application/octet-stream"), key
    bad = run_cli("ls", "--store", uri, env={**os.environ, "COMPILE_S3_CHECKSUM": "md5"})
    assert_clean_error(bad, 2, "COMPILE_S3_CHECKSUM", "sha256")
