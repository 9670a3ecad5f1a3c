"""Report benchmark (issue 44): release-report.html of the bundled example's release against the cold release that
made it (target < 0.10x), and the page's size (target < 2 MB). Each round releases the example into a fresh cache,
work folder and store (a subprocess, as a user runs it), then writes its page again in this process the way the
release does (matplotlib imported, the view read from the work folder, the page rendered), and measures the limit
beside it: matplotlib alone drawing and saving as many bar charts of the same sizes as SVG. Medians of the rounds.

usage: python benchmarks/report.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "pipelines" / "example.yaml"


def cold_release(root: Path) -> float:
    env = {**os.environ, "COMPILE_CACHE_DIR": str(root / "cache")}
    args = ["release", str(PIPELINE), "--work", str(root / "work"), "--store", str(root / "artifacts")]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compiler", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"compile release failed: {done.stderr}")
    return time.perf_counter() - started


def page(work: Path, out: Path) -> tuple[float, int]:
    """The page as the release writes it: view, charts and HTML (matplotlib's import counted in the first round)."""
    from compiler.report import write_page
    from compiler.report.view import from_work_folder

    started = time.perf_counter()
    write_page(from_work_folder(work, "digits@1.0.0", []), out)
    return time.perf_counter() - started, out.stat().st_size


def matplotlib_floor(charts: int, bars: int) -> float:
    """matplotlib drawing ``charts`` bar charts of ``bars`` bars each and saving them as SVG: what the page costs at
    least with this library."""
    import io

    from compiler.report.charts import _pyplot

    plt = _pyplot()
    started = time.perf_counter()
    for _ in range(charts):
        figure, axes = plt.subplots(figsize=(7, 0.35 * bars + 0.9))
        axes.barh(range(bars), range(1, bars + 1))
        figure.savefig(io.StringIO(), format="svg", bbox_inches="tight")
        plt.close(figure)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    from compiler.report.charts import _pyplot  # what a release has imported already: pydantic, the records

    import_started = time.perf_counter()
    _pyplot()  # what it imports for the page: matplotlib
    imported = time.perf_counter() - import_started
    rounds = []
    for _ in range(parser.parse_args().rounds):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            cold = cold_release(root)
            took, size = page(root / "work", root / "page.html")
            rounds.append((cold, took, size, matplotlib_floor(6, 6)))
    cold, took, floor = (statistics.median(r[i] for r in rounds) for i in (0, 1, 3))
    size = max(r[2] for r in rounds)
    written = imported + took
    print(f"cold release {cold:.2f} s; page {took:.3f} s + matplotlib's import {imported:.3f} s = {written:.3f} s: "
          f"ratio {written / cold:.3f} (target < 0.10)")  # fmt: skip
    print(f"limit: matplotlib's import + 6 bar charts saved as SVG {imported + floor:.3f} s; "
          f"ours / limit {written / (imported + floor):.2f}")  # fmt: skip
    print(f"page {size / 1024:.0f} KiB (target < 2048 KiB)")


if __name__ == "__main__":
    main()
