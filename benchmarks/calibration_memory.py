"""Calibration memory benchmark on a 480x480 dense-prediction model (issue 40 "Memory", issue 45): peak RSS of
``calibrate --precision int8`` (minmax) does not grow with samples x image size beyond the chunk allowed.

Claims checked (exit 1 when missed):

1. Peak RSS of int8 calibration with --large (256) calibration samples <= 1.5 GB (default --chunk-mb 256).
2. Peak RSS at --large samples <= 1.1 x peak RSS at --small (32) samples.

The model is ``tests/fixtures/text_detector.onnx`` (a DBNet-like detector: probability map [B, 1, H, W], dynamic
H/W, random weights; ``tests/fixtures/make_text_detector.py``); the images are made here at --image-size (smooth
backgrounds with dark strokes of "text", fixed seed), stored uncompressed in a temporary folder, never committed.
Each calibration is its own child process; it reports its peak RSS (VmHWM) and the peak of each phase (the peak
is reset through /proc/self/clear_refs when a phase starts): pre-processing, range collection, the Q/DQ model, the
build proof, the held-out comparison and the sensitivity pass. Usage:
``python benchmarks/calibration_memory.py [--image-size 480] [--small 32] [--large 256] [--holdout 32]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = REPO / "tests" / "fixtures" / "text_detector.onnx"
PEAK_LIMIT_MB = 1536.0
RATIO_LIMIT = 1.1


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("this benchmark needs Linux's /proc/self/status")


def reset_peak() -> None:
    """VmHWM set back to the current RSS (Linux >= 4.0), so the next reading is the peak since now."""
    Path("/proc/self/clear_refs").write_text("5")


def timed_phases(phases: dict[str, float]):
    """Wrap each phase's function so that ``phases`` gets its peak RSS (MiB), the highest when it runs twice."""
    from calibration import calibrators, steps

    def wrap(module, attribute: str, label: str) -> None:
        original = getattr(module, attribute)

        def measured(*args, **kwargs):
            reset_peak()
            try:
                return original(*args, **kwargs)
            finally:
                phases[label] = max(phases.get(label, 0.0), peak_rss_mb())
                reset_peak()

        setattr(module, attribute, measured)

    wrap(calibrators, "prepare", "pre-processing")
    wrap(calibrators, "collect_ranges", "range collection")
    wrap(calibrators, "quantize", "Q/DQ model")
    wrap(steps, "prove", "build proof")
    wrap(steps, "compare", "held-out comparison")
    wrap(steps, "sensitivity", "sensitivity")


def child(args: argparse.Namespace) -> dict:
    from calibration import calibrate
    from compiler.core.options import CalibrationOptions

    phases: dict[str, float] = {}
    timed_phases(phases)
    options = CalibrationOptions(
        precision="int8", method="minmax", samples=args.samples, holdout=args.holdout, chunk_mb=args.chunk_mb
    )
    options = options.model_copy(update={"reuse": False})
    started = time.perf_counter()
    overall = peak_rss_mb()  # before the clock: imports
    result = calibrate(args.model, args.data, args.out, options)
    overall = max(overall, peak_rss_mb(), *phases.values())
    return {
        "seconds": time.perf_counter() - started,
        "samples": result.samples,
        "cosine": result.report.outputs[0].cosine_mean,
        "peak_rss_mb": overall,
        "phases": phases,
    }


def write_images(path: Path, count: int, size: int) -> None:
    """``count`` images [3, size, size] in [0, 1]: a smooth background with dark strokes, the look of a page of
    text; written a few at a time into a stored (uncompressed) .npz, which calibrate reads sample by sample."""
    import numpy as np
    from numpy.lib import format as npy

    rng = np.random.default_rng(0)
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        member = Path(tmp) / "image.npy"
        array = npy.open_memmap(member, mode="w+", dtype=np.float32, shape=(count, 3, size, size))
        for i in range(count):
            tint = rng.uniform(0.6, 1.0, 3).astype(np.float32)
            image = tint[:, None, None] * (0.8 + 0.2 * np.sin(6.28 * (ys * rng.uniform(0.5, 2) + xs)))[None]
            for _ in range(rng.integers(4, 12)):  # lines of "text": dark bars of strokes
                top, left = rng.integers(0, size - 24), rng.integers(0, size // 2)
                height, length = rng.integers(8, 24), rng.integers(size // 8, size // 2)
                strokes = rng.random(length) < 0.6
                image[:, top : top + height, left : left + length] *= np.where(strokes, 0.15, 1.0)[None, None, :]
            array[i] = image + rng.normal(0, 0.02, image.shape).astype(np.float32)
        array.flush()
        del array
        import zipfile

        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            archive.write(member, "image.npy")


def run_child(**options) -> dict:
    command = [sys.executable, __file__, "--child"]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit("a calibration run failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--model", default=str(MODEL))
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--samples", type=int)
    parser.add_argument("--image-size", type=int, default=480)
    parser.add_argument("--small", type=int, default=32)
    parser.add_argument("--large", type=int, default=256)
    parser.add_argument("--holdout", type=int, default=32)
    parser.add_argument("--chunk-mb", type=int, default=256)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory(prefix="calibration-memory-") as tmp:
        root = Path(tmp)
        data = root / "images.npz"
        write_images(data, args.large + args.holdout, args.image_size)
        common = dict(model=args.model, data=data, holdout=args.holdout, chunk_mb=args.chunk_mb)
        runs = {count: run_child(out=root / str(count), samples=count, **common) for count in (args.small, args.large)}
    small, large = runs[args.small], runs[args.large]
    table = Table(
        title=f"int8 minmax calibration of the text detector at {args.image_size}x{args.image_size}, "
        f"--chunk-mb {args.chunk_mb}, {args.holdout} held-out: peak RSS MiB",
        title_justify="left",
    )
    table.add_column("phase")
    for count in runs:
        table.add_column(f"{count} samples", justify="right")
    for phase in small["phases"]:
        table.add_row(phase, *(f"{runs[count]['phases'].get(phase, 0):.0f}" for count in runs))
    table.add_row("whole run", *(f"{runs[count]['peak_rss_mb']:.0f}" for count in runs))
    table.add_row("seconds", *(f"{runs[count]['seconds']:.1f}" for count in runs))
    table.add_row("held-out cosine", *(f"{runs[count]['cosine']:.5f}" for count in runs))
    console = Console()
    console.print(table)
    checks = [
        (f"peak RSS at {args.large} samples (MiB)", large["peak_rss_mb"], PEAK_LIMIT_MB),
        (f"peak RSS {args.large} / {args.small} samples", large["peak_rss_mb"] / small["peak_rss_mb"], RATIO_LIMIT),
    ]
    for label, value, limit in checks:
        console.print(f"{label}: {value:.2f} (limit {limit}) {'ok' if value <= limit else 'FAILED'}")
    if any(value > limit for _, value, limit in checks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
