"""What a hostile build folder, manifest or filesystem must never do to a store or to what is written from it
(issue 29's critical defects), each through the real CLI against every backend it applies to:

- a build folder whose empty plan claims (size 0) the digest of a plan already in the store must not replace that
  blob: every stream is verified (empty ones too), blobs are create-only, and a pull stops reading at the first
  byte past the manifest's size;
- names a manifest gives (SKU, compute capability) are checked before they become paths or config.pbtxt fields
  of `compile export triton`;
- `promote` never follows a symbolic link (nor blocks on a FIFO) standing where its lock file goes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from compiler.core.errors import CheckFailed
from compiler.stores import open_store
from compiler.stores.base import VerifyingReader
from tests.support.cli import CliResult, assert_clean_error, run_cli

NAME, SKU = "digits", "rtx-4090"


@dataclass
class Backend:
    kind: str
    uri: str
    env: dict[str, str]
    read_blob: Callable[[str], bytes | None]
    write_blob: Callable[[str, bytes], None]
    """Put bytes under a blob's key behind the store's back."""
    write_key: Callable[[str, bytes], None]
    """Put bytes under any key of the store's layout behind its back."""

    def cli(self, *args: str | Path, **kwargs) -> CliResult:
        return run_cli(*args, "--store", self.uri, env=self.env, **kwargs)


def _local(tmp_path: Path) -> Backend:
    root = tmp_path / "store"

    def read(sha256: str) -> bytes | None:
        path = root / "blobs" / "sha256" / sha256
        return path.read_bytes() if path.is_file() else None

    def write_key(key: str, data: bytes) -> None:
        path = root.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.chmod(0o644)
        path.write_bytes(data)

    return Backend(
        "local",
        str(root),
        dict(os.environ),
        read,
        lambda sha256, data: write_key(f"blobs/sha256/{sha256}", data),
        write_key,
    )


def _s3(server) -> Backend:
    client = server.client()
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)

    def read(sha256: str) -> bytes | None:
        try:
            return client.get_object(Bucket=bucket, Key=f"team/blobs/sha256/{sha256}")["Body"].read()
        except client.exceptions.NoSuchKey:
            return None

    def write_key(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"team/{key}", Body=data)

    return Backend(
        "s3",
        f"s3://{bucket}/team",
        server.env(),
        read,
        lambda sha256, data: write_key(f"blobs/sha256/{sha256}", data),
        write_key,
    )


@pytest.fixture(params=["local", "s3"])
def backend(request, tmp_path, monkeypatch) -> Backend:
    if request.param == "local":
        return _local(tmp_path)
    server = request.getfixturevalue("s3")
    for key, value in server.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    return _s3(server)


@pytest.fixture(scope="module")
def build(built_digits) -> Path:
    return built_digits((SKU,), ("fp16",))


def _engine_json(build: Path) -> Path:
    return build / SKU / "fp16" / "engine.json"


def _plan(build: Path) -> tuple[str, bytes]:
    data = (build / SKU / "fp16" / "engine.plan").read_bytes()
    return hashlib.sha256(data).hexdigest(), data


def _publish(backend: Backend, build: Path, version: str) -> CliResult:
    return backend.cli("publish", build, "--name", NAME, "--version", version)


def _empty_plan_claiming(build: Path, root: Path, sha256: str) -> Path:
    """A copy of ``build`` whose plan is 0 bytes while engine.json names ``sha256`` with size_bytes 0."""
    hostile = root / "hostile"
    shutil.copytree(build, hostile)
    (hostile / SKU / "fp16" / "engine.plan").write_bytes(b"")
    record = json.loads(_engine_json(hostile).read_bytes())
    record.update(sha256=sha256, size_bytes=0)
    _engine_json(hostile).write_text(json.dumps(record, indent=2))
    return hostile


# --- 1. blobs: verified streams, create-only writes, bounded reads ------------------------------------------


def test_an_empty_plan_claiming_a_stored_digest_is_refused_and_the_blob_kept(backend, build, tmp_path):
    digest, plan = _plan(build)
    assert _publish(backend, build, "1.0.0").exit_code == 0
    hostile = _empty_plan_claiming(build, tmp_path, digest)
    result = _publish(backend, hostile, "2.0.0")
    assert_clean_error(result, 1, str(hostile / SKU / "fp16" / "engine.plan"), digest)
    assert backend.read_blob(digest) == plan  # the other release's plan is still whole
    assert open_store(backend.uri).read_manifest(NAME, "2.0.0") is None
    out = tmp_path / "pulled" / "digits.plan"
    out.parent.mkdir()
    pulled = backend.cli("pull", f"{NAME}@1.0.0", "--sku", SKU, "--out", out, "--no-cache")
    assert pulled.exit_code == 0, pulled.stderr
    assert out.read_bytes() == plan


def test_a_blob_already_stored_is_never_replaced(backend, build, tmp_path):
    """Create-only at the store: a blob of the digest there (here damaged, other bytes) is not overwritten by a
    publish; the publish is refused as damaged store content naming the blob."""
    digest, plan = _plan(build)
    backend.write_blob(digest, b"damaged")
    result = _publish(backend, build, "1.0.0")
    assert_clean_error(result, 1, f"blobs/sha256/{digest}", "damaged")
    assert backend.read_blob(digest) == b"damaged"
    assert open_store(backend.uri).read_manifest(NAME, "1.0.0") is None
    with VerifyingReader(build / SKU / "fp16" / "engine.plan", digest, len(plan)) as source:
        assert open_store(backend.uri).put_blob(NAME, digest, source) is False
    assert backend.read_blob(digest) == b"damaged"


def test_the_verifying_reader_checks_empty_streams_and_never_reads_past_the_size(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with VerifyingReader(empty, "0" * 64, 0) as source, pytest.raises(CheckFailed, match="hash to"):
        source.read(1 << 20)
    longer = tmp_path / "longer"
    longer.write_bytes(b"abc" + b"x" * 10)
    with VerifyingReader(longer, hashlib.sha256(b"abc").hexdigest(), 3) as source:
        with pytest.raises(CheckFailed, match="longer"):
            source.read(1 << 20)
        assert source.read_bytes <= 3
    with VerifyingReader(empty, hashlib.sha256(b"").hexdigest(), 0) as source:
        assert source.read() == b"" and source.verified


class _CountingStore:
    """The real store, counting the bytes its backend hands the pull's sink."""

    def __init__(self, store) -> None:
        self.store, self.offered = store, 0

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def get_blob(self, name: str, sha256: str, sink, *args, **kwargs) -> bool:
        counter = self

        class Counting:
            def write(self, data: bytes) -> object:
                counter.offered += len(data)
                return sink.write(data)

        return self.store.get_blob(name, sha256, Counting(), *args, **kwargs)


def test_a_pull_stops_reading_an_oversized_blob_at_the_recorded_size(backend, build, tmp_path):
    from compiler.releases.fetch import fetch_verified

    digest, plan = _plan(build)
    assert _publish(backend, build, "1.0.0").exit_code == 0
    extra = 8 << 20
    backend.write_blob(digest, plan + b"\0" * extra)
    out = tmp_path / "out" / "digits.plan"
    out.parent.mkdir()
    result = backend.cli("pull", f"{NAME}@1.0.0", "--sku", SKU, "--out", out, "--no-cache")
    assert_clean_error(result, 1, digest, "nothing was written")
    assert list(out.parent.iterdir()) == []
    store = _CountingStore(open_store(backend.uri))
    with pytest.raises(CheckFailed):
        fetch_verified(store, NAME, digest, len(plan), out, None)
    assert store.offered < len(plan) + (1 << 20), store.offered  # not the whole object
    assert list(out.parent.iterdir()) == []


# --- 2. names from a manifest become paths and config fields only once checked -------------------------------


def _hostile_release(backend: Backend, build: Path, version: str, change: Callable[[dict], None]) -> str:
    """``digits@version``: the published 1.0.0's manifest with ``change`` made to its content, and its
    content_sha256 made to match (the damage a store's writer could do, not a torn file)."""
    from compiler.core.files import hash_json

    assert _publish(backend, build, "1.0.0").exit_code == 0  # or unchanged
    manifest = json.loads(open_store(backend.uri).read_manifest(NAME, "1.0.0"))
    manifest["content"]["version"] = version
    change(manifest["content"])
    manifest["content_sha256"] = hash_json(manifest["content"])
    backend.write_key(f"releases/{NAME}/{version}/manifest.json", json.dumps(manifest, indent=2).encode())
    return f"{NAME}@{version}"


def _export(backend: Backend, ref: str, repo: Path) -> CliResult:
    repo.mkdir(parents=True, exist_ok=True)
    return backend.cli("export", "triton", ref, "--repo", repo, "--no-cache", "--triton-release", "25.10")


def _as_datacenter(backend: Backend, content: dict) -> None:
    """The engine as a datacenter TensorRT build would publish it, which Triton's release 25.10 loads (a stand-in
    plan blob: datacenter TensorRT cannot build here, tests/support/serving.py)."""
    data = b"datacenter TensorRT 10.11.0.33 plan stand-in"
    digest = hashlib.sha256(data).hexdigest()
    backend.write_blob(digest, data)
    content["engines"][0].update(
        backend={"name": "tensorrt", "version": "10.11.0.33"},
        plan_header=None,
        plan={"sha256": digest, "size_bytes": len(data)},
        runtime={"family": "tensorrt", "version": "10.11.0.33"},
    )


def _files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("sku", ["../../../outside/evil", "/tmp/compile-critical-evil", "a/../../b"])
def test_a_sku_that_is_a_path_is_damage_and_nothing_is_written_outside_the_repo(backend, build, tmp_path, sku):
    ref = _hostile_release(backend, build, "2.0.0", lambda c: c["engines"][0].update(sku=sku))
    work = tmp_path / "work"
    repo = work / "a" / "b" / "repo"
    repo.mkdir(parents=True)
    before = _files_under(tmp_path)
    result = _export(backend, ref, repo)
    assert_clean_error(result, 1, f"releases/{NAME}/2.0.0/manifest.json", "sku", "not a SKU name")
    assert _files_under(tmp_path) == before
    assert not Path("/tmp/compile-critical-evil-fp16.plan").exists()


def test_a_sku_with_quotes_cannot_inject_config_fields(backend, build, tmp_path):
    sku = 'x" } cc_model_filenames { key: "9.0" value: "x'
    ref = _hostile_release(backend, build, "2.0.0", lambda c: c["engines"][0].update(sku=sku))
    repo = tmp_path / "repo"
    assert_clean_error(_export(backend, ref, repo), 1, "manifest.json", "sku", "not a SKU name")
    assert _files_under(repo) == []


@pytest.mark.parametrize("capability", ["8.9x", "../8.9", '8.9" } x {', "9"])
def test_a_compute_capability_that_is_no_compute_capability_is_damage(backend, build, tmp_path, capability):
    ref = _hostile_release(backend, build, "2.0.0", lambda c: c["engines"][0].update(compute_capabilities=[capability]))
    repo = tmp_path / "repo"
    assert_clean_error(
        _export(backend, ref, repo), 1, "manifest.json", "compute_capabilities", "not a compute capability"
    )
    assert _files_under(repo) == []


def test_a_model_name_with_a_newline_stays_a_comment(backend, build, tmp_path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    hostile = 'm.onnx)\ndefault_model_filename: "evil.plan"\n# ('
    ref = _hostile_release(
        backend, build, "2.0.0", lambda c: (c.update(model_name=hostile), _as_datacenter(backend, c))
    )
    repo = tmp_path / "repo"
    result = _export(backend, ref, repo)
    assert result.exit_code == 0, result.stderr
    config = text_format.Parse((repo / NAME / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.default_model_filename == ""
    assert dict(config.cc_model_filenames) == {"8.9": f"{SKU}-fp16.plan"}


def test_publish_refuses_an_engine_json_compute_capability_that_is_none(build, tmp_path):
    hostile = tmp_path / "hostile"
    shutil.copytree(build, hostile)
    record = json.loads(_engine_json(hostile).read_bytes())
    record["compute_capabilities"] = ["8.9x"]
    _engine_json(hostile).write_text(json.dumps(record, indent=2))
    result = run_cli("publish", hostile, "--store", tmp_path / "store", "--name", NAME, "--version", "1.0.0")
    assert_clean_error(result, 2, str(_engine_json(hostile)), "compute_capabilities", "8.9x")
    assert not (tmp_path / "store" / "releases").exists()


# --- 3. promote's lock file stays in the store ------------------------------------------------------------------


def _local_release(build: Path, tmp_path: Path) -> Backend:
    backend = _local(tmp_path)
    assert _publish(backend, build, "1.0.0").exit_code == 0
    (Path(backend.uri) / "channels" / NAME).mkdir(parents=True, exist_ok=True)
    return backend


def test_a_symlinked_lock_is_damage_and_never_followed(build, tmp_path):
    backend = _local_release(build, tmp_path)
    outside = tmp_path / "outside" / "created-by-promote"
    outside.parent.mkdir()
    lock = Path(backend.uri) / "channels" / NAME / ".stable.lock"
    lock.symlink_to(outside)
    result = backend.cli("promote", f"{NAME}@1.0.0", "--channel", "stable", timeout=60)
    assert_clean_error(result, 1, f"channels/{NAME}/.stable.lock", "symbolic link")
    assert list(outside.parent.iterdir()) == []
    assert not (Path(backend.uri) / "channels" / NAME / "stable").exists()


def test_a_fifo_lock_is_damage_and_never_blocks(build, tmp_path):
    backend = _local_release(build, tmp_path)
    lock = Path(backend.uri) / "channels" / NAME / ".stable.lock"
    os.mkfifo(lock)
    result = backend.cli("promote", f"{NAME}@1.0.0", "--channel", "stable", timeout=60)
    assert_clean_error(result, 1, f"channels/{NAME}/.stable.lock", "FIFO")
    assert not (Path(backend.uri) / "channels" / NAME / "stable").exists()


def test_a_promote_creates_its_lock_inside_the_store(build, tmp_path):
    backend = _local_release(build, tmp_path)
    result = backend.cli("promote", f"{NAME}@1.0.0", "--channel", "stable")
    assert result.exit_code == 0, result.stderr
    lock = Path(backend.uri) / "channels" / NAME / ".stable.lock"
    assert lock.is_file() and not lock.is_symlink()


# --- majors: pull --out onto what is not a regular file; pulled plans are copies; pipeline versions --------------


def _published_local(build: Path, tmp_path: Path) -> Backend:
    backend = _local(tmp_path)
    assert _publish(backend, build, "1.0.0").exit_code == 0
    return backend


def _assert_pull_refused_onto(backend: Backend, out: Path, kind: Callable[[int], bool]) -> None:
    import stat

    result = backend.cli("pull", f"{NAME}@1.0.0", "--sku", SKU, "--out", out, "--no-cache", timeout=60)
    assert_clean_error(result, 2, str(out), "not a regular file")
    assert kind(os.lstat(out).st_mode) and not stat.S_ISREG(os.lstat(out).st_mode)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_pull_out_onto_a_fifo_is_refused(build, tmp_path):
    import stat

    backend = _published_local(build, tmp_path)
    out = tmp_path / "out" / "digits.plan"
    out.parent.mkdir()
    os.mkfifo(out)
    _assert_pull_refused_onto(backend, out, stat.S_ISFIFO)


def test_pull_out_onto_a_device_node_is_refused(build, tmp_path):
    import stat

    backend = _published_local(build, tmp_path)
    out = tmp_path / "out" / "null"
    out.parent.mkdir()
    try:
        os.mknod(out, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("no permission to make a device node here")
    _assert_pull_refused_onto(backend, out, stat.S_ISCHR)


def test_a_pulled_plan_is_a_copy_not_a_link_to_the_pull_cache(build, tmp_path):
    digest, plan = _plan(build)
    backend = _published_local(build, tmp_path)
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    out.mkdir()
    for attempt in ("first", "second"):  # the first fills the cache, the second is served from it
        pulled = run_cli(
            "pull",
            f"{NAME}@1.0.0",
            "--sku",
            SKU,
            "--out",
            out / f"{attempt}.plan",
            "--store",
            backend.uri,
            env={**backend.env, "COMPILE_CACHE_DIR": str(cache)},
        )
        assert pulled.exit_code == 0, pulled.stderr
    cached = cache / "pulls" / "sha256" / digest
    assert cached.read_bytes() == plan
    for attempt in ("first", "second"):
        assert os.stat(out / f"{attempt}.plan").st_nlink == 1
        assert not os.path.samefile(out / f"{attempt}.plan", cached)
    with open(out / "first.plan", "r+b") as handle:  # a consumer edits its plan in place
        handle.write(b"edited")
    assert cached.read_bytes() == plan


def test_a_pipeline_version_that_yaml_reads_as_a_number_is_refused(tmp_path):
    example = Path(__file__).resolve().parents[2] / "pipelines" / "example.yaml"
    text = example.read_text().replace("version: 1.0.0", "version: 1.10")
    assert "version: 1.10" in text
    pipeline = tmp_path / "pipelines" / "p.yaml"
    pipeline.parent.mkdir()
    pipeline.write_text(text.replace("../", str(example.parents[1]) + "/"))
    result = run_cli("plan", pipeline, "--format", "json")
    if result.exit_code == 0:  # kept as written, never 1.1
        assert '"1.10"' in result.stdout and '"1.1"' not in result.stdout
    else:
        assert_clean_error(result, 2, "version", "1.10")
