"""Verification benchmark (issue 31), each figure against a baseline measured in the same run, the median of
alternating rounds:

- verify: `compile verify`'s `verify_release()` of a signed release of 100 engines in a local folder store / a plain
  sha256 of the same 100 stored plans (the least any check of every blob must do; target <= 1.1). Ours also reads
  the manifest, checks the signature and the provenance and hashes layers.json.
- requests: S3 requests one verified pull (`pull(..., verify_key=...)`) makes in a store holding 1,000 signed
  releases / in one holding 1 (target <= 1), counted with botocore's event hooks on a real SeaweedFS; and the HTTP
  requests of one on an OCI registry (docker-registry, no referrers API) of ``--oci-releases`` releases / of 1,
  counted with a requests response hook.

usage: python benchmarks/verify.py [--rounds N] [--engines N] [--megabytes N] [--releases N] [--oci-releases N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from benchmarks.store import fake_plan, write_records  # noqa: E402
from compiler.releases.publish import publish  # noqa: E402
from compiler.releases.pull import pull  # noqa: E402
from compiler.releases.signing import load_signer  # noqa: E402
from compiler.releases.verify import verify_release  # noqa: E402
from compiler.stores import open_store  # noqa: E402
from tests.support.keys import write_keys  # noqa: E402
from tests.support.s3server import s3_server  # noqa: E402

MB = 1 << 20


def fake_build(folder: Path, engines: int, megabytes: int, sku_names: list[str] | None = None) -> list[str]:
    """A build folder of ``engines`` plans of random bytes (one per SKU) and the records `compile build` writes
    for them: verifying measures hashing and reading, whatever the bytes are. The plans' digests."""
    plans = []
    for index in range(engines):
        sku = sku_names[index] if sku_names else f"sku-{index:03d}"
        (folder / sku / "fp16").mkdir(parents=True)
        plans.append((sku, fake_plan(folder / sku / "fp16" / "engine.plan", megabytes), megabytes * MB))
    return [engine.sha256 for engine in write_records(folder, plans)]


def hash_files(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as handle:
            hashlib.file_digest(handle, "sha256")


def timed(action, *args, **kwargs) -> float:
    started = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - started


def measure_verify(args, work: Path, keys: dict[str, Path]) -> tuple[str, float, float, str]:
    digests = fake_build(work / "build", args.engines, args.megabytes)
    root = work / "store"
    publish(work / "build", str(root), "bench", "1.0.0", signer=load_signer(keys["ed25519"]))
    plans = [root / "blobs" / "sha256" / digest for digest in digests]
    ours, baseline = [], []
    for _ in range(args.rounds):
        ours.append(timed(verify_release, str(root), "bench@1.0.0", keys["ed25519.pub"]))
        baseline.append(timed(hash_files, plans))
    return (
        f"verify of {args.engines} engines ({args.engines * args.megabytes} MB) / sha256 of the plans, s",
        statistics.median(ours),
        statistics.median(baseline),
        "<= 1.1",
    )


def measure_requests(args, work: Path, keys: dict[str, Path]) -> tuple[str, float, float, str]:
    fake_build(work / "small", 1, 1, ["rtx-4090"])
    signer = load_signer(keys["ed25519"])
    counts = {}
    with s3_server() as server:
        os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        for releases in sorted({1, args.releases}):
            bucket = f"requests-{releases}"
            server.client().create_bucket(Bucket=bucket)
            store = open_store(f"s3://{bucket}")
            counts[releases] = _pull_requests(
                store,
                releases,
                signer,
                work,
                keys,
                lambda s, note: s.client.meta.events.register("before-send.s3", note),
            )
    return (
        f"requests: verified pull in {args.releases} releases / in 1",
        float(counts[args.releases]),
        float(counts[1]),
        "<= 1",
    )


def _pull_requests(store, releases: int, signer, work: Path, keys: dict[str, Path], watch) -> int:
    """Requests a verified pull of the first of ``releases`` published releases makes (``watch`` hands the
    store's request hook a callback)."""
    for i in range(releases):
        publish(work / "small", store, f"model-{i:04d}", "1.0.0", signer=signer)
    seen: list[object] = []
    watch(store, lambda *_, **__: seen.append(1))  # botocore passes keywords, requests the response
    pull(
        store,
        "model-0000@1.0.0",
        sku="rtx-4090",
        out=work / "small.plan",
        use_cache=False,
        verify_key=keys["ed25519.pub"],
    )
    return len(seen)


def measure_oci_requests(args, work: Path, keys: dict[str, Path]) -> tuple[str, float, float, str]:
    from tests.support.registry import registry_server

    signer = load_signer(keys["ed25519"])
    counts = {}
    with registry_server() as registry:
        for releases in sorted({1, args.oci_releases}):
            store = open_store(registry.uri())
            store.settle_seconds = 0  # one publisher: no racing push to wait for
            counts[releases] = _pull_requests(
                store, releases, signer, work, keys, lambda s, note: s.session.hooks["response"].append(note)
            )
    return (
        f"requests: verified pull (OCI) in {args.oci_releases} releases / in 1",
        float(counts[args.oci_releases]),
        float(counts[1]),
        "<= 1",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engines", type=int, default=100)
    parser.add_argument("--megabytes", type=int, default=4, help="each plan's size")
    parser.add_argument("--releases", type=int, default=1000)
    parser.add_argument("--oci-releases", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compile-bench-verify-") as tmp:
        work = Path(tmp)
        (work / "keys").mkdir()
        keys = write_keys(work / "keys")
        rows = [
            measure_verify(args, work, keys),
            measure_requests(args, work, keys),
            measure_oci_requests(args, work, keys),
        ]
    table = Table(title=f"verify benchmark, {args.rounds} alternating rounds")
    for column in ("figure", "ours", "baseline", "ratio", "target"):
        table.add_column(column)
    for figure, ours, base, target in rows:
        table.add_row(figure, f"{ours:.3f}", f"{base:.3f}", f"{ours / base:.3f}", target)
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
