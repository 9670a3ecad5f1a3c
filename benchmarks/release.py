"""Release benchmark: a fully cached re-release of pipelines/example.yaml / the cold release, measured in the same
run (target <= 0.10), each through the CLI as a CI job runs it, median of rounds (each: cold, then cached); and
where the cached run's time goes (each stage's seconds from release-report.json, the rest being interpreter start-up
and imports), with the start-up any command pays (`compile --version`) measured beside it as the limit.

Cold: an empty build cache, work folder and store. Cached: the same again, every stage reusing what the cold run
made (calibration folder, build cache, blobs and manifest in the store).
usage: python benchmarks/release.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "pipelines" / "example.yaml"


def run_release(root: Path) -> tuple[float, dict]:
    env = {**os.environ, "COMPILE_CACHE_DIR": str(root / "cache")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compiler", "release", str(PIPELINE), "--work", str(root / "work"),
                           "--store", str(root / "artifacts"), "--json"], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"release failed: {done.stderr}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cold, cached, startup, stages = [], [], [], {}
    with tempfile.TemporaryDirectory(prefix="compile-bench-release-") as tmp:
        for round_ in range(args.rounds):
            root = Path(tmp) / str(round_)
            seconds, _ = run_release(root)
            cold.append(seconds)
            seconds, report = run_release(root)
            cached.append(seconds)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "compiler", "--version"], capture_output=True, check=True)
            startup.append(time.perf_counter() - started)
            for stage in report["stages"]:
                stages.setdefault(stage["stage"], []).append(stage["seconds"])
    median = statistics.median
    table = Table(title=f"release benchmark: pipelines/example.yaml, {args.rounds} rounds")
    for column in ("figure", "ours s", "baseline s", "ratio", "target"):
        table.add_column(column)
    table.add_row("cached re-release / cold release", f"{median(cached):.3f}", f"{median(cold):.3f}",
                  f"{median(cached) / median(cold):.3f}", "<= 0.10")
    in_stages = sum(median(v) for v in stages.values())
    for stage, seconds in stages.items():
        table.add_row(f"  cached: {stage}", f"{median(seconds):.3f}", "", "", "information")
    table.add_row("  cached: start-up, imports, report", f"{median(cached) - in_stages:.3f}", "", "", "information")
    table.add_row("limit: start-up of any command (compile --version) / cold", f"{median(startup):.3f}",
                  f"{median(cold):.3f}", f"{median(startup) / median(cold):.3f}", "information")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
