"""Pushing a 500 MB plan to a local OCI registry through the store, against a plain HTTP blob upload of the same file
measured in the same run.

A real CNCF Distribution (`docker-registry`, as the tests start it) on 127.0.0.1. Each round, in alternating order:
- plain: `requests` POST /blobs/uploads/ then one monolithic PUT of the file with its digest (what any client does)
- store: what `compile publish` does for the plan: OciStore.blob_size, then put_blob from a VerifyingReader (hashing
  every byte on the way, the registry checking the digest too)
each into a repository of its own, so neither finds the blob there. Prints each side's median MB/s and store/plain.

usage: python benchmarks/store_oci.py [--megabytes 500] [--rounds 5]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from compiler.stores.base import VerifyingReader
from compiler.stores.oci import OciStore
from tests.support.registry import start_registry


def plain(host: str, repository: str, path: Path, sha256: str) -> float:
    started = time.perf_counter()
    with requests.Session() as session:
        location = session.post(f"http://{host}/v2/{repository}/blobs/uploads/", timeout=60).headers["Location"]
        with open(path, "rb") as handle:
            answer = session.put(
                f"{location}&digest=sha256:{sha256}",
                data=handle,
                timeout=600,
                headers={"Content-Type": "application/octet-stream"},
            )
    answer.raise_for_status()
    return time.perf_counter() - started


def store(uri: str, name: str, path: Path, sha256: str, size: int) -> float:
    started = time.perf_counter()
    oci = OciStore(uri)
    assert oci.blob_size(name, sha256) is None
    with VerifyingReader(path, sha256, size) as source:
        oci.put_blob(name, sha256, source)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    size = options.megabytes * 1_000_000
    with tempfile.TemporaryDirectory(prefix="compile-bench-oci-") as folder:
        root = Path(folder)
        plan = root / "engine.plan"
        digest = hashlib.sha256()
        with open(plan, "wb") as handle:
            for _ in range(options.megabytes):
                chunk = os.urandom(1_000_000)
                digest.update(chunk)
                handle.write(chunk)
        sha256 = digest.hexdigest()
        (root / "registry").mkdir()
        registry = start_registry(root / "registry")
        try:
            seconds: dict[str, list[float]] = {"plain": [], "store": []}
            for round_ in range(options.rounds):
                order = ("plain", "store") if round_ % 2 == 0 else ("store", "plain")
                for side in order:
                    if side == "plain":
                        seconds[side].append(plain(registry.host, f"bench/plain-{round_}", plan, sha256))
                    else:
                        seconds[side].append(store(registry.uri("bench"), f"store-{round_}", plan, sha256, size))
        finally:
            registry.stop()
    rate = {side: options.megabytes / statistics.median(values) for side, values in seconds.items()}
    for side, values in seconds.items():
        print(
            f"{side:5}  median {statistics.median(values):.2f} s  {rate[side]:.0f} MB/s  "
            f"(rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )
    print(f"store / plain throughput: {rate['store'] / rate['plain']:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
