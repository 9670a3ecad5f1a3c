"""Ceiling for the `--jobs` figure of benchmarks/build.py: one process starts once, imports TensorRT-RTX, and
builds two targets with the raw builder API, either one after the other in that process or in two children
forked side by side (as `compile build --jobs 2` forks its workers).

Nothing of ours runs, so `seq / par` is the most any `--jobs 2` can gain over `--jobs 1` on this machine
with a single start-up: it differs from two raw builder processes run in sequence / side by side, where the
side-by-side pair also overlaps two interpreter start-ups that a single `compile build` pays once.
usage: raw_pair.py seq|par MODEL PROFILES.yaml OUT_DIR   (plans for compute capabilities 8.9 and 8.6)
"""

import os
import sys
from pathlib import Path

from raw_build import raw_build


def main(mode: str, model: str, profiles: str, out: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    targets = [(capability, str(Path(out) / f"{capability}.plan")) for capability in ("8.9", "8.6")]
    if mode == "seq":
        for capability, plan in targets:
            raw_build(model, profiles, capability, plan)
        return
    children = []
    for capability, plan in targets:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                raw_build(model, profiles, capability, plan)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    if any(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children):
        raise SystemExit("a build failed")


if __name__ == "__main__":
    main(*sys.argv[1:])
