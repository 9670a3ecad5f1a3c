"""One cold or cached build timed inside a fresh process, after its imports: the cold-build figure of
benchmarks/build.py, so neither side runs on memory the other one just freed in the same process.

usage: timed_build.py raw|compile MODEL PROFILES.yaml OUT [CACHE]   (prints the seconds)
  raw:     the raw TensorRT-RTX builder API (raw_build.py) for compute capability 8.9, the plan at OUT
  compile: compile's build_engines() for SKU rtx-4090 (compute capability 8.9), fp32, into OUT with
           the build cache at CACHE
"""

import os
import sys
import time
from pathlib import Path


def main(side: str, model: str, profiles: str, out: str, cache: str = "") -> None:
    if side == "raw":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from raw_build import raw_build

        def build() -> None:
            raw_build(model, profiles, "8.9", out)
    else:
        from compiler.backends import load_backend
        from compiler.engines import BuildOptions, build_engines

        load_backend("tensorrt-rtx")  # imports TensorRT, as raw_build's module does

        def build() -> None:
            if build_engines(model, profiles, ["rtx-4090"], ["fp32"], out, BuildOptions(cache_dir=cache)).failed:
                raise SystemExit(f"the build failed: see {out}/build.json")

    os.sync()  # no write-back of earlier runs' files during this one
    started = time.perf_counter()
    build()
    print(time.perf_counter() - started)


if __name__ == "__main__":
    main(*sys.argv[1:])
