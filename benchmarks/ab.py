"""A/B of two checkouts of compile on the same machine, back to back: `compile build` wall time through the CLI.

For each round, in alternating order, each checkout builds ResNet-50 (random weights, tests/support/synthetic.py) from a
model file new to its build cache (a fresh copy and a fresh --cache-dir, so it is parsed and hashed as after a
checkout), for:
- one:    one target (rtx-4090 fp32), into an empty build cache
- jobs 1: two targets (rtx-4090, rtx-3090 fp32), --jobs 1, --no-cache
- jobs 2: the same two targets, --jobs 2
- cached: the one target again into a new folder from a warm cache (the model seen before)
It prints each side's median, B / A, and the speed-up --jobs 1 / --jobs 2 of each side.

usage: python benchmarks/ab.py A_DIR B_DIR [--rounds N]   (each DIR a checkout; the venv's packages serve both)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.support import synthetic  # noqa: E402

PROFILES = (
    "profiles:\n  - name: p\n    shapes:\n"
    "      image: {min: [1, 3, 224, 224], opt: [4, 3, 224, 224], max: [8, 3, 224, 224]}\n"
)
CASES = {
    "one": ["--sku", "rtx-4090", "--precision", "fp32"],
    "jobs 1": ["--sku", "rtx-4090", "--sku", "rtx-3090", "--precision", "fp32", "--no-cache", "--jobs", "1"],
    "jobs 2": ["--sku", "rtx-4090", "--sku", "rtx-3090", "--precision", "fp32", "--no-cache", "--jobs", "2"],
}


def build(checkout: Path, model: Path, profiles: Path, out: Path, cache: Path, args: list[str]) -> float:
    """Seconds of one `compile build` of ``checkout`` (its packages first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [
        sys.executable,
        "-m",
        "compiler",
        "build",
        str(model),
        "--profiles",
        str(profiles),
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
        "--json",
        *args,
    ]
    os.sync()  # no run pays for the write-back of the plans before it
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=checkout, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    sides = {"A": options.a.resolve(), "B": options.b.resolve()}
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="compile-ab-") as folder:
        work = Path(folder)
        source, profiles = work / "resnet50.onnx", work / "p.yaml"
        synthetic.resnet(source, depth=50)
        profiles.write_text(PROFILES)
        for round_ in range(options.rounds):
            order = list(sides.items())[:: 1 if round_ % 2 == 0 else -1]
            for case, args in CASES.items():
                for side, checkout in order:
                    run = work / f"{side}-{round_}-{case.replace(' ', '')}"
                    run.mkdir()
                    model = run / "model.onnx"
                    shutil.copy(source, model)  # new to this run's cache: parsed and hashed anew
                    times.setdefault((side, case), []).append(
                        build(checkout, model, profiles, run / "out", run / "cache", args)
                    )
            for side, checkout in order:  # warm: the "one" run's cache has the engine and the model's facts
                run = work / f"{side}-{round_}-one"
                times.setdefault((side, "cached"), []).append(
                    build(checkout, run / "model.onnx", profiles, run / "out2", run / "cache", CASES["one"])
                )
            for stale in work.glob(f"*-{round_}-*"):
                shutil.rmtree(stale)
    print(f"{options.rounds} alternating rounds; A = {sides['A']}, B = {sides['B']}")
    print(f"{'case':<8} {'A median s':>11} {'B median s':>11} {'B / A':>7}")
    medians = {key: statistics.median(values) for key, values in times.items()}
    for case in [*CASES, "cached"]:
        a, b = medians["A", case], medians["B", case]
        print(f"{case:<8} {a:>11.3f} {b:>11.3f} {b / a:>7.3f}")
    for side in sides:
        print(f"{side}: --jobs 1 / --jobs 2 = {medians[side, 'jobs 1'] / medians[side, 'jobs 2']:.3f}")


if __name__ == "__main__":
    main()
