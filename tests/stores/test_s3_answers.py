"""An S3 endpoint whose answers lack what S3 always sends (issue 39, major 7): a real SeaweedFS behind a hostile
HTTP server (tests/support/hostile_registry.py, forwarding the signed Host header) that answers one request itself.
Every command answers exit 3 in one line naming the store, never an internal error."""

from __future__ import annotations

import uuid

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.hostile_registry import Answer, Upstream, hostile_registry

MANIFEST = "team/releases/digits/1.0.0/manifest.json"
LISTING = r"^/BUCKET\?(.*&)?list-type=2"
EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>BUCKET</Name><Prefix>team/releases/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated><Contents><Size>3</Size></Contents></ListBucketResult>"
)
"""A listing whose one object has no Key (and no LastModified)."""


@pytest.fixture
def bucket(s3) -> str:
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3.client().create_bucket(Bucket=name)
    s3.client().put_object(Bucket=name, Key=MANIFEST, Body=b"{}")
    return name


@pytest.mark.parametrize(
    ("command", "method", "pattern", "answer"),
    [
        ("pull", "GET", "/manifest.json", Answer(200, {"Content-Type": "application/json"}, b"{}")),
        ("ls", "GET", LISTING, Answer(200, {"Content-Type": "application/xml"}, EMPTY_LISTING)),
    ],
    ids=["get-without-etag", "listing-entry-without-key"],
)
def test_an_s3_answer_without_what_s3_always_sends_is_an_unusable_endpoint(
    command, method, pattern, answer, s3, bucket, tmp_path
):
    with hostile_registry(Upstream(s3.endpoint.removeprefix("http://")), keep_host=True) as hostile:
        body = answer.body.replace(b"BUCKET", bucket.encode()) if isinstance(answer.body, bytes) else answer.body
        hostile.answer(method, pattern.replace("BUCKET", bucket), Answer(answer.status, answer.headers, body))
        env = s3.env(AWS_ENDPOINT_URL=f"http://{hostile.host}")
        store = f"s3://{bucket}/team"
        args = {
            "pull": ["pull", "digits@1.0.0", "--sku", "rtx-4090", "--out", tmp_path / "digits.plan"],
            "ls": ["ls"],
        }[command]
        result = run_cli(*args, "--store", store, env=env, timeout=120)
        assert hostile.requests, "the command never reached the hostile endpoint"
    assert_clean_error(result, 3, store, "not an S3 server this tool can use")
    assert not (tmp_path / "digits.plan").exists()
