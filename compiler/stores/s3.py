"""A store in an S3 bucket (``s3://bucket/prefix``), through boto3: the shared layout as objects.

Endpoint, region and credentials come the standard AWS way (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, the environment,
config files). Blobs go up through boto3's transfer manager (parallel multipart parts); a manifest is a create-only
``put_object`` (``If-None-Match: *``); a channel moves with ``If-Match`` on the ETag its mover read. Transient
errors are retried by botocore's standard retry mode, within bounded connect and read timeouts.
"""

from __future__ import annotations

import re
from typing import Any

from compiler.core.errors import CompileError, EnvironmentProblem, InvalidInput
from compiler.core.records import MAX_RECORD_BYTES
from compiler.stores.base import Sink, Token, VerifyingReader
from compiler.stores.keyed import KeyedStore

BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX_PART = re.compile(r"[A-Za-z0-9._-]+")
MB = 1 << 20
TRANSFER = {"multipart_threshold": 16 * MB, "multipart_chunksize": 16 * MB, "max_concurrency": 8}
"""Parts of 16 MiB, 8 at a time: a 500 MB plan is 30 parts."""
MISSING = {"404", "NoSuchKey", "NotFound"}
TAKEN = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}
"""A conditional write lost: the key exists (create-only) or changed (If-Match), or a concurrent one won (409)."""
DENIED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix with a trailing slash or empty), refusing what no bucket is."""
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidInput(f"store {uri}: {bucket!r} is not an S3 bucket name (3 to 63 of a-z 0-9 . -)")
    parts = [part for part in prefix.split("/") if part]
    for part in parts:
        if part in (".", "..") or not PREFIX_PART.fullmatch(part):
            raise InvalidInput(f"store {uri}: prefix part {part!r}: use A-Z a-z 0-9 . _ - between slashes")
    return bucket, "".join(f"{part}/" for part in parts)


class S3Store(KeyedStore):
    def __init__(self, uri: str) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.uri = uri
        self.bucket, self.prefix = parse_s3_uri(uri)
        config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=60,
                        max_pool_connections=TRANSFER["max_concurrency"] + 2)
        try:
            self.client = boto3.session.Session().client("s3", config=config)
        except Exception as exc:  # botocore's profile and config errors: the environment's, not ours
            raise EnvironmentProblem(f"store {uri}: cannot set up S3 ({exc})") from None
        self.transfer = TransferConfig(**TRANSFER)

    def _call(self, what: str, action, *args: Any, **kwargs: Any) -> Any:
        """One S3 call with its failures said in the store's terms: missing -> None-ish to the caller (raised as
        KeyError), unreachable, denied or no bucket -> exit 3."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return action(*args, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code == "NoSuchBucket":
                raise self._no_bucket() from None
            if code in MISSING or status == "404":
                raise KeyError(what) from None
            if code in TAKEN or status in TAKEN:
                raise _Taken(what) from None
            if code in DENIED or status == "403":
                raise EnvironmentProblem(f"store {self.uri}: access denied ({code or status}) to {what}; check the "
                                         "AWS credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE) and the bucket's "
                                         "policy") from None
            raise EnvironmentProblem(f"store {self.uri}: {what} failed ({code or status}: "
                                     f"{exc.response.get('Error', {}).get('Message', '')})") from None
        except BotoCoreError as exc:
            raise EnvironmentProblem(f"store {self.uri}: {_describe(exc)}") from None

    def _no_bucket(self) -> EnvironmentProblem:
        return EnvironmentProblem(f"store {self.uri}: bucket {self.bucket} does not exist; create it or fix --store")

    def _missing(self, key: str) -> None:
        """A 404 on HEAD says neither which: tell a missing key from a missing bucket."""
        try:
            self._call(f"bucket {self.bucket}", self.client.head_bucket, Bucket=self.bucket)
        except KeyError:
            raise self._no_bucket() from None

    def _size(self, key: str) -> int | None:
        try:
            return self._call(key, self.client.head_object, Bucket=self.bucket, Key=self.prefix + key)[
                "ContentLength"]
        except KeyError:
            self._missing(key)
            return None

    def _put(self, key: str, source: VerifyingReader) -> None:
        try:
            self._call(key, self.client.upload_fileobj, source, self.bucket, self.prefix + key, Config=self.transfer)
        except CompileError:
            raise
        except KeyError:
            raise self._no_bucket() from None

    def _stream(self, key: str, sink: Sink) -> bool:
        try:
            self._call(key, self.client.download_fileobj, self.bucket, self.prefix + key, _Sequential(sink),
                       Config=self.transfer)
        except KeyError:
            self._missing(key)
            return False
        return True

    def _read(self, key: str) -> tuple[bytes, Token] | None:
        try:
            response = self._call(key, self.client.get_object, Bucket=self.bucket, Key=self.prefix + key)
        except KeyError:
            return None
        with response["Body"] as body:
            data = self._call(key, body.read, MAX_RECORD_BYTES + 1)
        return data, response["ETag"]

    def _create(self, key: str, data: bytes) -> bool:
        try:
            self._call(key, self.client.put_object, Bucket=self.bucket, Key=self.prefix + key, Body=data,
                       IfNoneMatch="*")
        except _Taken:
            return False
        except KeyError:
            raise self._no_bucket() from None
        return True

    def _swap(self, key: str, data: bytes, expected: Token | None) -> bool:
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            self._call(key, self.client.put_object, Bucket=self.bucket, Key=self.prefix + key, Body=data,
                       **condition)
        except _Taken:
            return False
        except KeyError:  # If-Match on a key deleted meanwhile
            return False
        return True

    def _children(self, prefix: str) -> list[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        names: list[str] = []
        try:
            pages = self._call(prefix, lambda: list(paginator.paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix, Delimiter="/")))
        except KeyError:
            raise self._no_bucket() from None
        start = len(self.prefix + prefix)
        for page in pages:
            names += [entry["Prefix"][start:].rstrip("/") for entry in page.get("CommonPrefixes", [])]
            names += [entry["Key"][start:] for entry in page.get("Contents", [])]
        return names


class _Taken(Exception):
    """A conditional write refused (412/409)."""


class _Sequential:
    """A sink s3transfer must write in order: an object with ``write`` and no ``seek`` is non-seekable to it, so
    parts downloaded in parallel are queued and written one after another (and hashed as they go)."""

    def __init__(self, sink: Sink) -> None:
        self.write = sink.write


def _describe(exc: Exception) -> str:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
                "(see docs/store.md)")
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach {exc.kwargs.get('endpoint_url', 'the endpoint')}; is the server up (AWS_ENDPOINT_URL)?"
    return f"{type(exc).__name__}: {exc}"
