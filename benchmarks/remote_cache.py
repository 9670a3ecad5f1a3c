"""Remote cache and gc benchmark against a real S3 server (SeaweedFS started here), each figure against a baseline
measured in the same run, the median of alternating rounds:

- runner B / (start-up + boto3): `compile release` of the example on a runner with an empty local cache whose
  remote cache (S3) runner A filled / the same process start-up (`compile --version`) plus downloading the same
  engine entries' blobs with plain boto3 (target <= 1.2).
- runner B / runner A: the same release / runner A's, which calibrated, built and checked everything and sent it
  (target <= 0.3).
- limit: runner B's time less its cached stages (inspect, calibrate, build, check), which leaves start-up with its
  imports, loading the pipeline, publish and the report: what no cache removes; shown against the same baseline,
  and runner B against it (ours / limit).
- gc requests: `compile gc --dry-run --keep 2` of a store of N releases / listing every key of the store once with
  list_objects_v2 (requests, counted with botocore's event hooks), and the same for seconds; limit: against listing
  once and reading every manifest once (gc must read each to know its publish time and the blobs it keeps).

usage: python benchmarks/remote_cache.py [--rounds N] [--releases N (0: no gc part)]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from benchmarks.store import fake_build  # noqa: E402
from compiler.releases.publish import publish  # noqa: E402
from compiler.releases.store_gc import gc_store  # noqa: E402
from compiler.stores import open_store  # noqa: E402
from tests.support.cli import REPO, run_cli  # noqa: E402
from tests.support.s3server import s3_server  # noqa: E402

CACHED = ("inspect", "calibrate", "build", "check")
"""The stages runner B takes from the remote cache."""


def pipeline(work: Path) -> Path:
    """The example pipeline with absolute paths."""
    source = REPO / "pipelines" / "example.yaml"
    data = yaml.safe_load(source.read_text())
    for key in ("model", "profiles"):
        data[key] = str((source.parent / data[key]).resolve())
    for section in ("calibration", "check"):
        data[section]["data"] = str((source.parent / data[section]["data"]).resolve())
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def release(pipeline_file: Path, work: Path, name: str, env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    result = run_cli(
        "release",
        pipeline_file,
        "--work",
        work / name,
        "--store",
        work / f"store-{name}",
        "--json",
        env={**env, "COMPILE_CACHE_DIR": str(work / f"cache-{name}")},
    )
    seconds = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"runner {name} failed: {result.stderr}")
    return seconds, json.loads(result.stdout)


def baseline(client, bucket: str, prefix: str, work: Path, env: dict[str, str]) -> float:
    """Start-up of the command, and the engine entries' blobs downloaded with plain boto3."""
    started = time.perf_counter()
    run_cli("--version", env=env)
    blobs = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/cache/engines/"):
        for entry in page.get("Contents", []):
            index = json.loads(client.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read())
            blobs.update(f["sha256"] for f in index["files"].values())
    target = work / "downloads"
    target.mkdir(exist_ok=True)
    for sha in sorted(blobs):
        client.download_file(bucket, f"{prefix}/blobs/sha256/{sha}", str(target / sha))
    seconds = time.perf_counter() - started
    shutil.rmtree(target)
    return seconds


def measure_runners(args, server, work: Path) -> list[tuple[str, float, float, str]]:
    client = server.client()
    client.create_bucket(Bucket="cache")
    pipeline_file = pipeline(work)
    a_s, b_s, base_s, rest_s = [], [], [], []
    for round_ in range(args.rounds):
        prefix = f"r{round_}"
        env = server.env(COMPILE_REMOTE_CACHE=f"s3://cache/{prefix}")
        a_s.append(release(pipeline_file, work, f"a{round_}", env)[0])
        seconds, report_b = release(pipeline_file, work, f"b{round_}", env)
        b_s.append(seconds)
        sources = {s["stage"]: (s.get("cache") or {}).get("source") for s in report_b["stages"]}
        if any(sources[s] != "remote" for s in CACHED):
            raise SystemExit(f"runner B made something itself: {sources}")
        rest_s.append(b_s[-1] - sum(s["seconds"] for s in report_b["stages"] if s["stage"] in CACHED))
        base_s.append(baseline(client, "cache", prefix, work, env))
        print(
            f"round {round_}: A {a_s[-1]:.2f} s, B {b_s[-1]:.2f} s ("
            + ", ".join(f"{s['stage']} {s['seconds']:.2f}" for s in report_b["stages"])
            + f"; the rest {rest_s[-1]:.2f}), "
            f"baseline {base_s[-1]:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    median = statistics.median
    return [
        ("runner B s / (start-up + boto3 download) s", median(b_s), median(base_s), "<= 1.2"),
        ("runner B s / runner A s", median(b_s), median(a_s), "<= 0.3"),
        (
            "limit: runner B less its cached stages s / (start-up + boto3 download) s",
            median(rest_s),
            median(base_s),
            "information",
        ),
        ("runner B s / limit s", median(b_s), median(rest_s), "information"),
    ]


def measure_gc(args, server, work: Path) -> list[tuple[str, float, float, str]]:
    """gc of a store of ``--releases`` releases (10 versions of each name, each a 1 MB plan shared) against listing
    the store once."""
    client = server.client()
    client.create_bucket(Bucket="gc-bench")
    build = work / "small"
    fake_build(build, 1)
    store = open_store("s3://gc-bench")
    for i in range(args.releases):
        publish(build, store, f"model-{i // 10:03d}", f"1.0.{i % 10}")
    seen: list[object] = []
    store.client.meta.events.register("before-send.s3", lambda request, **_: seen.append(request))
    started = time.perf_counter()
    report = gc_store(store, keep=2, grace_minutes=0, dry_run=True)
    gc_seconds, gc_requests = time.perf_counter() - started, len(seen)
    assert report.removed_versions == args.releases - 2 * (args.releases // 10)
    seen.clear()
    started = time.perf_counter()
    keys = [
        entry["Key"]
        for page in store.client.get_paginator("list_objects_v2").paginate(Bucket="gc-bench")
        for entry in page.get("Contents", [])
    ]
    list_seconds, list_requests = time.perf_counter() - started, len(seen)
    for key in keys:
        if key.endswith("/manifest.json"):
            store.client.get_object(Bucket="gc-bench", Key=key)["Body"].read()
    read_seconds, read_requests = time.perf_counter() - started, len(seen)
    return [
        (
            f"gc --dry-run requests / list the store once ({args.releases} releases)",
            float(gc_requests),
            float(list_requests),
            "information",
        ),
        (f"gc --dry-run s / list the store once s ({args.releases} releases)", gc_seconds, list_seconds, "information"),
        (
            "limit: gc requests / (list once + read every manifest once)",
            float(gc_requests),
            float(read_requests),
            "information",
        ),
        ("limit: gc s / (list once + read every manifest once) s", gc_seconds, read_seconds, "information"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--releases", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compile-bench-cache-") as tmp, s3_server() as server:
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        rows = measure_runners(args, server, Path(tmp))
        print(rows, flush=True)  # kept if the gc part fails
        rows += measure_gc(args, server, Path(tmp)) if args.releases else []
    table = Table(title=f"remote cache and gc benchmark, SeaweedFS, {args.rounds} alternating rounds")
    for column in ("figure", "ours", "baseline", "ratio", "target"):
        table.add_column(column)
    for figure, ours, base, target in rows:
        table.add_row(figure, f"{ours:.3f}", f"{base:.3f}", f"{ours / base:.3f}" if base else "-", target)
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
