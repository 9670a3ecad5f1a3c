"""A store in an S3 bucket (``s3://bucket/prefix``), through boto3: the shared layout as objects.

Endpoint, region and credentials come the standard AWS way (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, the environment,
config files). Blobs and manifests are create-only: a ``put_object``, or for a big blob a multipart upload of
parallel parts, with ``If-None-Match: *`` (412: already there, never replaced); a channel moves with ``If-Match`` on
the ETag its mover read.
Transient errors are retried by botocore's standard retry mode, within bounded connect and read timeouts.

Every object says what it is: records are ``application/json``, blobs ``application/octet-stream`` with their
sha256 in the ``sha256`` user metadata (``x-amz-meta-sha256``), and by default an S3 checksum the server verifies
on arrival and keeps (``ChecksumSHA256``: the blob's own digest for one ``put_object``; a multipart upload's is S3's
composite checksum of its parts, ``…-N``, which is not the file's sha256: the manifest's digest stays the one to
trust). ``$COMPILE_S3_CHECKSUM=off`` sends no checksum headers, for endpoints that refuse them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
from datetime import datetime
from typing import Any

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.record_files import MAX_RECORD_BYTES
from compiler.core.text import printable
from compiler.stores.base import Discard, HashingSink, Sink, Token, VerifyingReader
from compiler.stores.deadline import Deadlined, socket_timeouts
from compiler.stores.keyed import KeyedStore

BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX_PART = re.compile(r"[A-Za-z0-9._-]+")
MB = 1 << 20
TRANSFER = {"multipart_threshold": 16 * MB, "multipart_chunksize": 16 * MB, "max_concurrency": 8}
"""Parts of 16 MiB, 8 at a time: a 500 MB plan is 30 parts."""
MISSING = {"404", "NoSuchKey", "NotFound"}
TAKEN = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}
"""A conditional write lost: the key exists (create-only) or changed (If-Match), or a concurrent one won (409)."""
CHECKSUM_ENV = "COMPILE_S3_CHECKSUM"
"""``sha256`` (the default): uploads carry an S3 checksum the server verifies; ``off``: none."""
JSON = "application/json"
BINARY = "application/octet-stream"
DENIED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix with a trailing slash or empty), refusing what no bucket is."""
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidInput(f"store {uri}: {bucket!r} is not an S3 bucket name (3 to 63 of a-z 0-9 . -)")
    parts = [part for part in prefix.split("/") if part]
    for part in parts:
        if part in (".", "..") or not PREFIX_PART.fullmatch(part):
            raise InvalidInput(f"store {uri}: prefix part {part!r}: use A-Z a-z 0-9 . _ - between slashes")
    return bucket, "".join(f"{part}/" for part in parts)


class S3Store(Deadlined, KeyedStore):
    def __init__(self, uri: str) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.uri = uri
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.checksums = _checksums_wanted(uri)
        connect, read = socket_timeouts(5, 60)
        config = Config(
            retries={"mode": "standard", "max_attempts": 4},
            connect_timeout=connect,
            read_timeout=read,
            max_pool_connections=TRANSFER["max_concurrency"] + 2,
        )
        try:
            self.client = boto3.session.Session().client("s3", config=config)
        except Exception as exc:  # botocore's profile and config errors: the environment's, not ours
            raise EnvironmentProblem(f"store {uri}: cannot set up S3 ({exc})") from None
        self.transfer = TransferConfig(**TRANSFER)
        self.client.meta.events.register("before-send", self._refuse_after_deadline)

    def _checksum(self, data: bytes) -> dict[str, str]:
        """The S3 checksum of one request's body, which the server verifies (BadDigest when it differs)."""
        if not self.checksums:
            return {}
        return {"ChecksumSHA256": base64.b64encode(hashlib.sha256(data).digest()).decode()}

    @staticmethod
    def _blob_attributes(sha256: str) -> dict[str, Any]:
        return {"ContentType": BINARY, "Metadata": {"sha256": sha256}}

    def _put_object(self, key: str, data: bytes, **arguments: Any) -> None:
        """One ``put_object`` of ``data`` with its checksum; records (manifests, channels, attachments, cache
        entries, leases) are JSON documents, blobs say so in ``arguments``."""
        self._call(
            key,
            self.client.put_object,
            Bucket=self.bucket,
            Key=self.prefix + key,
            Body=data,
            **arguments,
            **self._checksum(data),
        )

    def _refuse_after_deadline(self, **kwargs: Any) -> None:
        """No request leaves once an operation passed the deadline: the transfer manager's threads stop too."""
        if self.gave_up is not None:
            raise EnvironmentProblem(self.gave_up)

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
            if code == "InvalidRange" or status == "416":
                raise _Short(what) from None
            if code in DENIED or status == "403":
                raise EnvironmentProblem(
                    f"store {self.uri}: access denied ({code or status}) to {what}; check the "
                    "AWS credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE) and the bucket's "
                    "policy"
                ) from None
            raise EnvironmentProblem(
                f"store {self.uri}: {what} failed ({code or status}: "
                f"{exc.response.get('Error', {}).get('Message', '')})"
            ) from None
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
            answer = self._call(key, self.client.head_object, Bucket=self.bucket, Key=self.prefix + key)
        except KeyError:
            self._missing(key)
            return None
        return self._field(answer, "ContentLength", key, int)

    def _put(self, key: str, source: VerifyingReader) -> bool:
        """Create-only: one ``put_object`` with ``If-None-Match: *`` for a blob up to one part, else a multipart
        upload (parts sent in parallel) completed with ``If-None-Match: *`` once every byte was read and verified,
        aborted otherwise. A 412 means a blob of that digest is there already: it is never replaced."""
        try:
            if source.size <= TRANSFER["multipart_threshold"]:
                self._put_object(key, source.read_all(), IfNoneMatch="*", **self._blob_attributes(source.sha256))
            else:
                self._put_parts(key, source)
        except _Taken:
            return False
        except KeyError:
            raise self._no_bucket() from None
        return True

    def _put_parts(self, key: str, source: VerifyingReader) -> None:
        from concurrent.futures import ThreadPoolExecutor

        composite = {"ChecksumAlgorithm": "SHA256"} if self.checksums else {}
        upload = self._call(
            key,
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=self.prefix + key,
            **self._blob_attributes(source.sha256),
            **composite,
        )
        upload_id = self._field(upload, "UploadId", key, str)
        try:
            size, workers = TRANSFER["multipart_chunksize"], TRANSFER["max_concurrency"]
            with ThreadPoolExecutor(workers) as pool:
                pending, parts, number = [], [], 0
                while data := source.read(size):
                    number += 1
                    pending.append(
                        pool.submit(
                            self._call,
                            key,
                            self.client.upload_part,
                            Bucket=self.bucket,
                            Key=self.prefix + key,
                            UploadId=upload_id,
                            PartNumber=number,
                            Body=data,
                            **self._checksum(data),
                        )
                    )
                    if len(pending) >= workers:  # at most `workers` parts in memory
                        parts += [pending.pop(0).result()]
                parts += [future.result() for future in pending]
            source.require_verified()
            self._call(
                key,
                self.client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=self.prefix + key,
                UploadId=upload_id,
                IfNoneMatch="*",
                MultipartUpload={
                    "Parts": [
                        {"PartNumber": i + 1, "ETag": self._field(part, "ETag", key, str)}
                        | ({"ChecksumSHA256": self._field(part, "ChecksumSHA256", key, str)} if composite else {})
                        for i, part in enumerate(parts)
                    ]
                },
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the error that got us here is the one to report
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.prefix + key, UploadId=upload_id)
            raise

    def _stream(self, key: str, sink: Sink, size: int | None = None) -> bool:
        """Through the transfer manager (parallel ranged parts for a big blob, written in order). Told the
        expected ``size``, it asks for no more than that (and no HEAD): a longer object is never read whole, a
        shorter one fails its range or its digest. A blob below the multipart threshold is one ranged GET: the
        manager's threads would cost more than its read (a remote cache entry is mostly such blobs)."""
        if size is not None and 0 < size < self.transfer.multipart_threshold:
            return self._stream_small(key, sink, size)
        from boto3.s3.transfer import create_transfer_manager

        subscribers = [_KnownSize(size)] if size is not None else None
        try:
            with create_transfer_manager(self.client, self.transfer) as manager:
                future = manager.download(self.bucket, self.prefix + key, _Sequential(sink), subscribers=subscribers)
                self._call(key, future.result)
        except KeyError:
            self._missing(key)
            return False
        except _Short:
            raise CheckFailed(
                f"store {self.uri}: {key} is damaged (shorter than the {size} bytes recorded for "
                "it); publish it again or ask who owns the store"
            ) from None
        return True

    def _stream_small(self, key: str, sink: Sink, size: int) -> bool:
        """The first ``size`` bytes and one more: fewer (an object cut short, or empty: 416) fail the caller's
        digest, the one more fails the sink's size (a longer object is damaged, though its head is intact)."""
        try:
            response = self._call(
                key, self.client.get_object, Bucket=self.bucket, Key=self.prefix + key, Range=f"bytes=0-{size}"
            )
        except KeyError:
            self._missing(key)
            return False
        except _Short:
            return True
        with self._field(response, "Body", key) as body:
            while chunk := self._call(key, body.read, MB):
                sink.write(chunk)
        return True

    def _read(self, key: str) -> tuple[bytes, Token] | None:
        try:
            response = self._call(key, self.client.get_object, Bucket=self.bucket, Key=self.prefix + key)
        except KeyError:
            return None
        etag = self._field(response, "ETag", key, str)
        with self._field(response, "Body", key) as body:
            data = self._call(key, body.read, MAX_RECORD_BYTES + 1)
        return data, etag

    def _create(self, key: str, data: bytes) -> bool:
        try:
            self._put_object(key, data, IfNoneMatch="*", ContentType=JSON)
        except _Taken:
            return False
        except KeyError:
            raise self._no_bucket() from None
        return True

    def _swap(self, key: str, data: bytes, expected: Token | None) -> bool:
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            self._put_object(key, data, ContentType=JSON, **condition)
        except _Taken:
            return False
        except KeyError:  # If-Match on a key deleted meanwhile
            return False
        return True

    def _remove_damaged(self, key: str, sha256: str, size: int) -> bool:
        """Judged by the bytes of one object version (its ETag), then deleted only if it still has that ETag
        (``If-Match``): a good blob a racing repair put there meanwhile has another and stays."""
        try:
            answer = self._call(key, self.client.head_object, Bucket=self.bucket, Key=self.prefix + key)
        except KeyError:
            return False
        etag = self._field(answer, "ETag", key, str)
        sink = HashingSink(Discard(), size, sha256)
        ranged = {"Range": f"bytes=0-{size}"} if size else {}  # one byte past: enough to tell a longer one
        try:
            response = self._call(
                key, self.client.get_object, Bucket=self.bucket, Key=self.prefix + key, IfMatch=etag, **ranged
            )
            with self._field(response, "Body", key) as body:
                while data := self._call(key, body.read, 1 << 20):
                    sink.write(data)
        except (KeyError, _Taken):
            return False  # gone or changed meanwhile: a racing repair's
        except (CheckFailed, _Short):
            pass  # longer, or an empty object asked for a byte: damaged
        else:
            if sink.matches():
                return False
        try:
            self._call(key, self.client.delete_object, Bucket=self.bucket, Key=self.prefix + key, IfMatch=etag)
        except (KeyError, _Taken):
            return False
        return True

    def _pages(self, prefix: str) -> list[dict]:
        """Every page of the listing one level below ``prefix`` (objects, and common prefixes as folders)."""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            return self._call(
                prefix, lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix, Delimiter="/"))
            )
        except KeyError:
            raise self._no_bucket() from None

    def _children(self, prefix: str) -> list[str]:
        names: list[str] = []
        start = len(self.prefix + prefix)
        for page in self._pages(prefix):
            names += [
                self._field(entry, "Prefix", prefix, str)[start:].rstrip("/") for entry in self._entries(page, prefix)
            ]
            names += [
                self._field(entry, "Key", prefix, str)[start:] for entry in self._entries(page, prefix, "Contents")
            ]
        return sorted(set(names))  # a stray object "releases/x" beside the prefix "releases/x/" is one name

    def _delete(self, key: str) -> None:
        try:
            self._call(key, self.client.delete_object, Bucket=self.bucket, Key=self.prefix + key)
        except KeyError:
            return

    def _listing(self, prefix: str) -> dict[str, tuple[int, float]]:
        start = len(self.prefix + prefix)
        return {
            self._field(entry, "Key", prefix, str)[start:]: (
                self._field(entry, "Size", prefix, int),
                self._field(entry, "LastModified", prefix, datetime).timestamp(),
            )
            for page in self._pages(prefix)
            for entry in self._entries(page, prefix, "Contents")
        }

    def _field(self, answer: Any, name: str, what: str, kind: type | None = None) -> Any:
        """``answer[name]`` of an S3 answer (of the type ``kind`` when given): an endpoint that left it out (a 200
        without an ETag, a listing entry without a Key) is not an S3 server this tool can use (exit 3)."""
        value = answer.get(name) if isinstance(answer, dict) else None
        if value is None or (kind is not None and (not isinstance(value, kind) or isinstance(value, bool))):
            raise self._unusable(what, name, value is not None)
        return value

    def _entries(self, page: Any, prefix: str, kind: str = "CommonPrefixes") -> list[dict]:
        """A listing page's entries of ``kind`` (none when it has none; exit 3 when they are not a list)."""
        entries = page.get(kind, []) if isinstance(page, dict) else None
        if not isinstance(entries, list):
            raise self._unusable(prefix, kind, True)
        return entries

    def _unusable(self, what: str, name: str, present: bool) -> EnvironmentProblem:
        return EnvironmentProblem(
            f"store {self.uri}: the S3 endpoint answered {printable(what)[:200]} without "
            f"{'a valid ' if present else ''}{name}; it is not an S3 server this tool can use (check AWS_ENDPOINT_URL)"
        )


class _Taken(Exception):
    """A conditional write refused (412/409)."""


class _Short(Exception):
    """A ranged read past the object's end (416): it is shorter than expected."""


class _KnownSize:
    """An s3transfer subscriber that tells the download its size, so it sends no HEAD and reads no further."""

    def __init__(self, size: int) -> None:
        self.size = size

    def on_queued(self, future, **kwargs) -> None:
        future.meta.provide_transfer_size(self.size)

    def on_progress(self, **kwargs) -> None: ...

    def on_done(self, **kwargs) -> None: ...


class _Sequential:
    """A sink s3transfer must write in order: an object with ``write`` and no ``seek`` is non-seekable to it, so
    parts downloaded in parallel are queued and written one after another (and hashed as they go)."""

    def __init__(self, sink: Sink) -> None:
        self.write = sink.write


def _checksums_wanted(uri: str) -> bool:
    value = os.environ.get(CHECKSUM_ENV, "sha256").strip().lower()
    if value not in ("sha256", "off"):
        raise InvalidInput(f"store {uri}: ${CHECKSUM_ENV} is {printable(value)!r}: use sha256 (the default) or off")
    return value == "sha256"


def _describe(exc: Exception) -> str:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return (
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
            "(see docs/store.md)"
        )
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach {exc.kwargs.get('endpoint_url', 'the endpoint')}; is the server up (AWS_ENDPOINT_URL)?"
    return f"{type(exc).__name__}: {exc}"
