"""Start-up benchmark: `compile --version` and `compile --help` against `python -c "import typer"` (targets 1.5x and
2.5x; --help's limit, importing the Rich help Typer renders it with, is measured beside it), and a fully cached
`compile release pipelines/example.yaml` against the cold release (target 0.10x), all measured in the same run,
interleaved rounds, medians. Where the cached release's time goes is shown beside it (each stage's seconds from
release-report.json; the rest is interpreter start-up, imports and the report).

usage: python benchmarks/startup.py [--rounds N]
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
COMMANDS = {
    "import typer": [sys.executable, "-c", "import typer"],
    "import typer.rich_utils": [sys.executable, "-c", "import typer.rich_utils"],
    "compile --version": [sys.executable, "-m", "compiler", "--version"],
    "compile --help": [sys.executable, "-m", "compiler", "--help"],
}


def seconds(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    return took, done.stdout


def release(root: Path) -> tuple[float, dict]:
    env = {**os.environ, "COMPILE_CACHE_DIR": str(root / "cache")}
    took, out = seconds(
        [
            sys.executable,
            "-m",
            "compiler",
            "release",
            str(PIPELINE),
            "--work",
            str(root / "work"),
            "--store",
            str(root / "artifacts"),
            "--json",
        ],
        env,
    )
    return took, json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in [*COMMANDS, "cold release", "cached release"]}
    stages: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="compile-bench-startup-") as tmp:
        for round_ in range(args.rounds):
            for name, command in COMMANDS.items():  # interleaved: each round measures every command once
                times[name].append(seconds(command)[0])
            root = Path(tmp) / str(round_)
            times["cold release"].append(release(root)[0])
            took, report = release(root)
            times["cached release"].append(took)
            for stage in report["stages"]:
                stages.setdefault(stage["stage"], []).append(stage["seconds"])
    median = {name: statistics.median(values) for name, values in times.items()}
    table = Table(title=f"start-up benchmark, {args.rounds} interleaved rounds (medians)")
    for column in ("figure", "ours s", "baseline s", "ratio", "target"):
        table.add_column(column)
    for name, target in (("compile --version", "<= 1.5"), ("compile --help", "<= 2.5")):
        table.add_row(
            f"{name} / import typer",
            f"{median[name]:.3f}",
            f"{median['import typer']:.3f}",
            f"{median[name] / median['import typer']:.2f}",
            target,
        )
    table.add_row(
        "limit: import typer.rich_utils (Typer's help needs it) / import typer",
        f"{median['import typer.rich_utils']:.3f}",
        f"{median['import typer']:.3f}",
        f"{median['import typer.rich_utils'] / median['import typer']:.2f}",
        "",
    )
    table.add_row(
        "compile --help / that limit",
        f"{median['compile --help']:.3f}",
        f"{median['import typer.rich_utils']:.3f}",
        f"{median['compile --help'] / median['import typer.rich_utils']:.2f}",
        "",
    )
    table.add_row(
        "cached release / cold release",
        f"{median['cached release']:.3f}",
        f"{median['cold release']:.3f}",
        f"{median['cached release'] / median['cold release']:.3f}",
        "<= 0.10",
    )
    in_stages = 0.0
    for stage, values in stages.items():
        in_stages += statistics.median(values)
        table.add_row(f"  cached: {stage}", f"{statistics.median(values):.3f}", "", "", "")
    table.add_row("  cached: start-up, imports, report", f"{median['cached release'] - in_stages:.3f}", "", "", "")
    table.add_row(
        "limit: compile --version / cold release",
        f"{median['compile --version']:.3f}",
        f"{median['cold release']:.3f}",
        f"{median['compile --version'] / median['cold release']:.3f}",
        "",
    )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
