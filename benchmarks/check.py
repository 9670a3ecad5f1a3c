"""`compile check` benchmark on a ResNet-50-sized fp16 + int8 build: the check's overhead over onnxruntime.

Claim checked (exit 1 when missed): the check of the build on 64 samples (every check: lint, partitions,
fusions, memory, accuracy of both precisions, FP16 range) takes <= 1.15 x its floor, measured in the same run:
onnxruntime running the FP32, FP16 and Q/DQ models over the same samples, called directly (sessions made with
the same options, the same batches). Median of alternating rounds. Also measured: the limit of the checks as
specified (the FP32 run with every intermediate as an output, which the FP16 range check needs, and one max over
each), so that check / limit says how much of the figure is ours.

The model is ``tests/support/synthetic.resnet(depth=50)``: ResNet-50's graph and size with random weights (fixed seed),
and the samples are random too: right for timing, meaningless for accuracy (the accuracy gates may well fail;
that is not what is measured). Nothing is downloaded. Usage:
``python benchmarks/check.py [--samples 64] [--rounds 3] [--image-size 224]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def floor(models: list[Path], data: Path, samples: int, batch: int) -> float:
    """onnxruntime alone: each model's session over the same samples."""
    import numpy as np

    from compiler.data.session import session

    started = time.perf_counter()
    with np.load(data, allow_pickle=False) as arrays:
        images = arrays["image"][:samples]
    for model in models:
        sess = session(model, "model")
        for start in range(0, samples, batch):
            sess.run(None, {"image": images[start : start + batch]})
    return time.perf_counter() - started


def limit(source, models: list[Path], data: Path, samples: int, batch: int, work: Path) -> float:
    """What the checks as specified cannot avoid: the FP32 model run with every float intermediate as an output
    (the FP16 range check must see each value) and one pass over each to find its largest magnitude, then the
    FP16 and Q/DQ models as in the floor."""
    import numpy as np

    from compiler.data.ranges import _float_intermediates, _session_with_outputs

    started = time.perf_counter()
    wanted, _, _ = _float_intermediates(source)
    sess = _session_with_outputs(source, list(wanted.values()), work / "limit.onnx")
    with np.load(data, allow_pickle=False) as arrays:
        images = arrays["image"][:samples]
    for start in range(0, samples, batch):
        for value in sess.run(None, {"image": images[start : start + batch]}):
            float(np.abs(value).max())
    return time.perf_counter() - started + floor(models[1:], data, samples, batch)


def _inputs(root: Path, samples: int, size: int) -> tuple[Path, Path, Path]:
    """A ResNet-50 of random weights, random images and one profile of batches up to 8."""
    import numpy as np
    import yaml

    from tests.support import synthetic

    model = synthetic.resnet(root / "resnet50.onnx", depth=50, image_size=size)
    data = root / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(data, image=rng.standard_normal((max(samples, 80), 3, size, size), dtype=np.float32))
    shapes = {"image": {"min": [1, 3, size, size], "opt": [8, 3, size, size], "max": [8, 3, size, size]}}
    profiles = root / "profiles.yaml"
    profiles.write_text(yaml.safe_dump({"profiles": [{"name": "online", "shapes": shapes}]}))
    return model, data, profiles


def _report(ours: list[float], theirs: list[float], limits: list[float], result) -> float:
    """The per-round table and the medians; check's ratio to its floor."""
    median = statistics.median
    ratio = median(ours) / median(theirs)
    header = ("round", 6), ("check s", 9), ("floor s", 9), ("limit s", 9), ("ratio", 7), ("limit/floor", 12)
    print(" ".join(f"{name:>{width}}" for name, width in [*header, ("check/limit", 12)]))
    for index, (a, b, c) in enumerate(zip(ours, theirs, limits, strict=True)):
        print(f"{index:>6} {a:>9.2f} {b:>9.2f} {c:>9.2f} {a / b:>7.2f} {c / b:>12.2f} {a / c:>12.2f}")
    print(
        f"{'median':>6} {median(ours):>9.2f} {median(theirs):>9.2f} {median(limits):>9.2f} {ratio:>7.2f} "
        f"{median(limits) / median(theirs):>12.2f} {median(ours) / median(limits):>12.2f}  (claim: <= 1.15)"
    )
    per_check = {c.name: c.status.value for e in result.engines for c in e.checks}
    print(f"checks: {per_check}; verdict passed={result.passed} (random weights: accuracy is not the point)")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()

    from compiler.check import check
    from compiler.core.options import CheckOptions
    from compiler.engines import BuildOptions, build_engines
    from compiler.engines.folder import built_model, read_build, source_model

    with tempfile.TemporaryDirectory(prefix="compile-bench-check-") as work:
        root = Path(work)
        model, data, profiles = _inputs(root, args.samples, args.image_size)
        out = root / "engines"
        started = time.perf_counter()
        options = BuildOptions(data=data, cache_dir=root / "cache")
        report = build_engines(model, profiles, "rtx-4090", ["fp16", "int8"], out, options)
        assert not report.failed, report.failed
        print(f"build (fp16 + int8, calibration included): {time.perf_counter() - started:.1f} s")
        build = read_build(out)
        source = source_model(build, None)
        models = [source.path] + [built_model(t, source, root / "cache")[0] for t in build.targets]
        assert all(models), models
        os.environ["COMPILE_CACHE_DIR"] = str(root / "cache")  # where check finds the built models
        options = CheckOptions(data=data, samples=args.samples, batch_size=8, reuse=False)  # every round checks
        ours, theirs, limits = [], [], []
        for index in range(args.rounds):
            order = ("check", "floor", "limit") if index % 2 == 0 else ("limit", "floor", "check")
            for side in order:
                if side == "check":
                    started = time.perf_counter()
                    result = check(out, options)
                    ours.append(time.perf_counter() - started)
                elif side == "floor":
                    theirs.append(floor(models, data, args.samples, 8))
                else:
                    limits.append(limit(source, models, data, args.samples, 8, root))
        return 0 if _report(ours, theirs, limits, result) <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
