"""Store benchmark against a real S3 server (SeaweedFS started here), each figure against a baseline measured in
the same run, the median of alternating rounds:

- publish: `publish()` of a build folder holding one 500 MB plan (random bytes) / plain boto3 `upload_file` of the
  same file (throughput ratio, target >= 0.9). Ours also hashes the plan as it reads it (the digest check that keeps
  a changed file from being stored under its recorded digest), checks what the store has and writes the manifest;
  the baseline does none of that.
- limit: `upload_file` + a sha256 of the file / `upload_file` (the cost of verifying at all, in the same run).
- republish: bytes sent when the same build is published again (target 0).
- pull: `pull()` with verification / plain boto3 `download_file` of the same blob (throughput ratio, target >= 0.9).
  Ours streams the parts in order through a sha256 (s3transfer's non-seekable download path) and writes
  engine.json; the baseline writes parts at their offsets and verifies nothing.
- limit: `download_file` + a sha256 of the file afterwards / `download_file`: verifying the plain way.
- requests: S3 requests one `pull()` makes in a store holding 1,000 releases / in one holding 1 (target <= 1),
  counted with botocore's event hooks.

usage: python benchmarks/store.py [--rounds N] [--megabytes N] [--releases N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from compiler.core.records import BuildReport, EngineRecord, Status, TargetStatus  # noqa: E402
from compiler.releases import pull  # noqa: E402
from compiler.releases.publish import publish  # noqa: E402
from compiler.stores import open_store  # noqa: E402
from tests.support.s3server import s3_server  # noqa: E402

MB = 1 << 20


def fake_build(folder: Path, megabytes: int) -> EngineRecord:
    """A build folder with one plan of random bytes and the records `compile build` writes for it (a publish
    benchmark measures moving bytes; what the bytes are does not matter)."""
    (folder / "rtx-4090" / "fp16").mkdir(parents=True)
    digest = fake_plan(folder / "rtx-4090" / "fp16" / "engine.plan", megabytes)
    return write_records(folder, [("rtx-4090", digest, megabytes * MB)])[0]


def fake_plan(path: Path, megabytes: int) -> str:
    """A TensorRT-RTX 1.7.1.116 plan header for compute capability 8.9 (publish reads it), then random bytes:
    their sha256."""
    digest = hashlib.sha256()
    header = b"vtrt".ljust(24, b"\0") + bytes([1, 7, 1, 116]).ljust(8, b"\0") + struct.pack("<Q", 0x8).ljust(32, b"\0")
    with open(path, "wb") as handle:
        for index in range(megabytes):
            chunk = header + os.urandom(MB - len(header)) if index == 0 else os.urandom(MB)
            digest.update(chunk)
            handle.write(chunk)
    return digest.hexdigest()


def write_records(folder: Path, plans: list[tuple[str, str, int]]) -> list[EngineRecord]:
    """The records `compile build` writes for plans already at ``folder/SKU/fp16/engine.plan`` (SKU, sha256,
    size each): every engine.json, then build.json."""
    engines, targets = [], []
    for sku, sha256, size in plans:
        plan_dir = folder / sku / "fp16"
        engine = EngineRecord(
            sha256=sha256,
            size_bytes=size,
            model_sha256="0" * 64,
            built_model_sha256="0" * 64,
            calibration_sha256=None,
            sku=sku,
            compute_capabilities=["8.9"],
            precision="fp16",
            backend={"name": "tensorrt-rtx", "version": "1.7.1.116"},
            profiles=[],
            builder_options={},
            build_seconds=0,
            cache_hit=False,
            cache_key="0" * 64,
            plan_header=None,
        )
        (plan_dir / "engine.json").write_text(engine.model_dump_json())
        engines.append(engine)
        targets.append(TargetStatus(sku=sku, precision="fp16", status=Status.OK, path=str(plan_dir)))
    report = BuildReport(model="model.onnx", model_sha256="0" * 64, out=str(folder), targets=targets)
    (folder / "build.json").write_text(report.model_dump_json())
    return engines


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def timed(action, *args, **kwargs) -> float:
    started = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=500)
    parser.add_argument("--releases", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compile-bench-store-") as tmp, s3_server() as server:
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        work = Path(tmp)
        engine = fake_build(work / "build", args.megabytes)
        plan = work / "build" / "rtx-4090" / "fp16" / "engine.plan"
        client = server.client()
        client.create_bucket(Bucket="bench")
        store = open_store("s3://bench")
        blob_key = f"blobs/sha256/{engine.sha256}"
        rows, sent_again = measure_transfers(args, client, store, plan, blob_key, work)
        rows.append(("republish: bytes sent", float(sent_again), 0.0, "0"))
        rows.append(measure_requests(args, server, work))
    table = Table(title=f"store benchmark, SeaweedFS, {args.megabytes} MB plan, {args.rounds} alternating rounds")
    for column in ("figure", "ours", "baseline", "ratio", "target"):
        table.add_column(column)
    for figure, ours, base, target in rows:
        ratio = f"{ours / base:.3f}" if base else "-"
        table.add_row(figure, f"{ours:.3f}", f"{base:.3f}", ratio, target)
    Console(width=150).print(table)


def measure_transfers(args, client, store, plan: Path, blob_key: str, work: Path):
    size = plan.stat().st_size
    publish_s, upload_s, hashed_upload_s, pull_s, download_s, hashed_download_s = [], [], [], [], [], []
    for round_ in range(args.rounds):
        client.delete_object(Bucket="bench", Key=blob_key)  # so each publish sends the plan again
        publish_s.append(timed(publish, work / "build", store, "bench", f"1.0.{round_}"))
        upload_s.append(timed(client.upload_file, str(plan), "bench", f"plain/{round_}", Config=store.transfer))
        hashed_upload_s.append(
            timed(
                lambda key=f"hashed/{round_}": (
                    sha256_of(plan),
                    client.upload_file(str(plan), "bench", key, Config=store.transfer),
                )
            )
        )
        out = work / "pulled.plan"
        pull_s.append(timed(pull, store, f"bench@1.0.{round_}", sku="rtx-4090", out=out, use_cache=False))
        download_s.append(
            timed(client.download_file, "bench", f"plain/{round_}", str(work / "plain.plan"), Config=store.transfer)
        )
        hashed_download_s.append(
            timed(
                lambda key=f"plain/{round_}": (
                    client.download_file("bench", key, str(work / "h.plan"), Config=store.transfer),
                    sha256_of(work / "h.plan"),
                )
            )
        )
        for leftover in (out, work / "plain.plan", work / "h.plan"):
            leftover.unlink()
    again = publish(work / "build", store, "bench", "1.0.0").uploaded_bytes
    median = statistics.median
    mbps = size / MB
    return [
        ("publish MB/s / upload_file MB/s", mbps / median(publish_s), mbps / median(upload_s), ">= 0.9"),
        (
            "limit: (upload_file + sha256) MB/s / upload_file MB/s",
            mbps / median(hashed_upload_s),
            mbps / median(upload_s),
            "information",
        ),
        ("pull (verified) MB/s / download_file MB/s", mbps / median(pull_s), mbps / median(download_s), ">= 0.9"),
        (
            "limit: (download_file + sha256) MB/s / download_file MB/s",
            mbps / median(hashed_download_s),
            mbps / median(download_s),
            "information",
        ),
    ], again


def measure_requests(args, server, work: Path):
    """Requests of one pull from a store of 1 release and from one of ``--releases`` (one small plan shared)."""
    build = work / "small"
    fake_build(build, 1)
    counts = {}
    for releases in (1, args.releases):
        bucket = f"requests-{releases}"
        server.client().create_bucket(Bucket=bucket)
        store = open_store(f"s3://{bucket}")
        for i in range(releases):
            publish(build, store, f"model-{i:04d}", "1.0.0")
        seen: list[object] = []
        store.client.meta.events.register("before-send.s3", lambda request, seen=seen, **_: seen.append(request))
        pull(store, "model-0000@1.0.0", sku="rtx-4090", out=work / "small.plan", use_cache=False)
        counts[releases] = len(seen)
    shutil.rmtree(build)
    return (
        f"requests: pull in {args.releases} releases / in 1",
        float(counts[args.releases]),
        float(counts[1]),
        "<= 1",
    )


if __name__ == "__main__":
    main()
