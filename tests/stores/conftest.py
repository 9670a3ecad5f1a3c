"""The store under test on every backend (a local folder, S3 on a real SeaweedFS, a real OCI registry) and the
build folders the store tests publish."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compiler.core.records import EngineRecord
from compiler.stores import open_store
from tests.support.cli import CliResult, run_cli
from tests.support.registry import Registry, environment_without_credentials

SKUS = ("rtx-3090", "rtx-4090")


@dataclass
class StoreUnderTest:
    kind: str
    uri: str
    env: dict[str, str]
    tamper: Callable[[str, bytes], None]
    """Replace a blob's bytes behind the store's back."""
    registry: Registry | None = None
    """The OCI registry serving the store, for the tests that look into its storage."""

    def cli(self, *args: str | Path, **kwargs) -> CliResult:
        return run_cli(*args, "--store", self.uri, env=self.env, **kwargs)

    def manifest(self, name: str, version: str) -> bytes | None:
        return open_store(self.uri).read_manifest(name, version)


def _tamper_local(root: Path) -> Callable[[str, bytes], None]:
    def tamper(sha256: str, data: bytes) -> None:
        blob = root / "blobs" / "sha256" / sha256
        blob.chmod(0o644)
        blob.write_bytes(data)

    return tamper


@pytest.fixture(params=["local", "s3", "oci"])
def store(request, tmp_path, monkeypatch) -> Iterator[StoreUnderTest]:
    if request.param == "local":
        root = tmp_path / "store"
        yield StoreUnderTest("local", str(root), dict(os.environ), _tamper_local(root))
        return
    if request.param == "oci":
        registry = request.getfixturevalue("registry")
        originals: dict[Path, bytes] = {}

        def tamper_oci(sha256: str, data: bytes) -> None:
            """The registry keeps one copy of a blob for every repository: the original goes back afterwards,
            so later tests publishing the same plan find it sound."""
            path = registry.blob_file(sha256)
            if path.is_file():
                originals.setdefault(path, path.read_bytes())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        yield StoreUnderTest("oci", registry.uri(), environment_without_credentials(tmp_path), tamper_oci, registry)
        for path, data in originals.items():
            path.write_bytes(data)
        return
    server = request.getfixturevalue("s3")
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    server.client().create_bucket(Bucket=bucket)
    for key, value in server.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)

    def tamper(sha256: str, data: bytes) -> None:
        server.client().put_object(Bucket=bucket, Key=f"team/blobs/sha256/{sha256}", Body=data)

    yield StoreUnderTest("s3", f"s3://{bucket}/team", server.env(), tamper)


@pytest.fixture(scope="session")
def builds(built_digits) -> dict[str, Path]:
    """Two build folders of other content: fp16 for two SKUs, fp32 for one."""
    return {"a": built_digits(SKUS, ("fp16",)), "b": built_digits(("rtx-3090",), ("fp32",))}


def _engine(build: Path, sku: str, precision: str = "fp16") -> EngineRecord:
    return EngineRecord.model_validate_json((build / sku / precision / "engine.json").read_bytes())
