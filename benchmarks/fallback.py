"""``calibrate --fallback auto`` against its floor and a one-region-at-a-time search, on models with injected
outlier channels (issue 30).

Models: the outlier MLP of tests/fixtures/make_outlier_mlp.py (one and two outlier regions), and a BERT-sized
encoder (tests/fixtures/make_encoder.py at BERT-base width: hidden 768, 12 heads, FFN 3072; ``--layers``
layers) with one FFN channel scaled 1000x (and the next MatMul's row scaled down as much), in one layer or two.

Per model, in alternating order each round (median wall time over ``--rounds``):
- ours:   ``calibrate(..., fallback="auto")``: plain calibration, sensitivity ranking, bisection, final calibration;
- floor:  one plain calibration plus one evaluation (the least any search can cost);
- linear: plain calibration, then regions taken out one at a time in graph order (no ranking), cumulatively, each
          evaluated like ours, until the gates pass, then the final calibration (Neural Compressor's op-by-op
          fallback without a sensitivity ranking).
It prints evaluations, seconds, ours/floor and ours/linear, the target 2*ceil(log2 n) + 4 evaluations for n
regions, and the fraction of Conv/MatMul/Gemm work left in INT8.

usage: python benchmarks/fallback.py [--rounds 3] [--layers 2] [--samples 64]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibration import calibrate  # noqa: E402
from calibration.fallback import Search, _regions, low_precision_work  # noqa: E402
from compiler.core.options import CalibrationOptions  # noqa: E402
from tests.fixtures import make_encoder, make_outlier_mlp  # noqa: E402

FFN = 3072
"""BERT-base's feed-forward width."""


def encoder(folder: Path, layers: int, outlier_layers: tuple[int, ...], samples: int) -> tuple[Path, Path]:
    """A BERT-base-wide encoder with one FFN channel 1000x the others in each of ``outlier_layers``."""
    proto = make_encoder.build(layers=layers, hidden=768, heads=12, ffn=FFN)
    weights = {i.name: i for i in proto.graph.initializer}
    rng = np.random.default_rng(5)
    for layer in outlier_layers:
        channel = int(rng.integers(FFN))
        for name, index, factor in (
            (f"layer.{layer}/intermediate.weight", (slice(None), channel), 1000.0),
            (f"layer.{layer}/intermediate.bias", (channel,), 1000.0),
            (f"layer.{layer}/output.weight", (channel, slice(None)), 1e-3),
        ):
            array = numpy_helper.to_array(weights[name]).copy()
            array[index] *= factor
            weights[name].CopyFrom(numpy_helper.from_array(array, name))
    model = folder / f"encoder-{layers}l-{len(outlier_layers)}.onnx"
    onnx.save_model(proto, model)
    return model, make_encoder.make_data(folder / f"{model.stem}.npz", samples=samples, sequence=32)


def options(**extra) -> CalibrationOptions:
    return CalibrationOptions(precision="int8", reuse=False, batch_size=16, **extra)


def ours(model: Path, data: Path, out: Path) -> dict:
    started = time.perf_counter()
    result = calibrate(model, data, out, options(fallback="auto"))
    fallback = result.fallback or {}
    return {
        "seconds": time.perf_counter() - started,
        "evaluations": fallback.get("evaluations"),
        "regions": fallback.get("regions"),
        "kept": fallback.get("regions_kept"),
        "passed": result.passed,
        "int8_work": fallback.get("low_precision_work"),
        "nodes": fallback.get("nodes_kept"),
    }


def floor(model: Path, data: Path, out: Path) -> dict:
    started = time.perf_counter()
    plain = calibrate(model, data, out, options())
    search = Search(out / "model.onnx", model, data, plain, options(), None)
    try:
        search.passes(set())
    finally:
        search.close()
    return {"seconds": time.perf_counter() - started, "evaluations": 2}


def linear(model: Path, data: Path, out: Path) -> dict:
    """Regions out one at a time in graph order, cumulatively, until the gates pass; then the final calibration."""
    started = time.perf_counter()
    plain = calibrate(model, data, out, options())
    order = {n.name: i for i, n in enumerate(onnx.load_model(out / "model.onnx", load_external_data=False).graph.node)}
    regions = sorted(_regions(plain.report.sensitivity or []), key=lambda r: min(order.get(n, 0) for n in r.nodes))
    search = Search(out / "model.onnx", model, data, plain, options(), None)
    kept: set[str] = set()
    try:
        for region in regions:
            kept |= set(region.nodes)
            if search.passes(kept):
                break
    finally:
        search.close()
    evaluations = search.evaluations + 1
    source = {n.name for n in onnx.load_model(model, load_external_data=False).graph.node}
    from calibration.sensitivity import source_name

    final = calibrate(model, data, out, options(exclude=tuple(sorted({source_name(n, source) for n in kept}))))
    return {
        "seconds": time.perf_counter() - started,
        "evaluations": evaluations + 1,
        "passed": final.passed,
        "int8_work": low_precision_work(out / "model.onnx"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2, help="encoder layers (BERT-base has 12)")
    parser.add_argument("--samples", type=int, default=64, help="encoder samples (80 %% calibrate, 20 %% held out)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-fallback-"))
    models = {
        "MLP, 1 outlier": make_outlier_mlp.save(work / "mlp1.onnx"),
        "MLP, 2 outliers": make_outlier_mlp.save(work / "mlp2.onnx", layers=8, outliers=(1, 5)),
        f"encoder {args.layers}x768, 1 outlier": encoder(work, args.layers, (1,), args.samples),
        f"encoder {args.layers}x768, 2 outliers": encoder(work, args.layers, (0, args.layers - 1), args.samples),
    }
    runs = {"ours": ours, "floor": floor, "linear": linear}
    rows = []
    for label, (model, data) in models.items():
        seen: dict[str, list[dict]] = {name: [] for name in runs}
        for round_ in range(args.rounds):
            names = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for name in names:
                seen[name].append(runs[name](model, data, work / f"{model.stem}-{name}"))
        median = {name: statistics.median(r["seconds"] for r in results) for name, results in seen.items()}
        first = {name: results[0] for name, results in seen.items()}
        n = first["ours"]["regions"] or 1
        rows.append(
            [
                label,
                str(n),
                f"{first['ours']['evaluations']}",
                str(2 * math.ceil(math.log2(n)) + 4),
                f"{median['ours']:.2f}",
                f"{median['floor']:.2f}",
                f"{first['linear']['evaluations']}",
                f"{median['linear']:.2f}",
                f"{median['ours'] / median['floor']:.2f}",
                f"{median['ours'] / median['linear']:.2f}",
                f"{first['ours']['kept']}",
                f"{first['ours']['int8_work']}",
                str(first["ours"]["passed"] and first["linear"]["passed"]),
            ]
        )
        print(f"{label}: ours kept {first['ours']['nodes']}", flush=True)
    header = [
        "model",
        "regions n",
        "ours evals",
        "target",
        "ours s",
        "floor s",
        "linear evals",
        "linear s",
        "ours/floor",
        "ours/linear",
        "regions kept",
        "INT8 work",
        "passed",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"rounds: {args.rounds} (median seconds); evaluations counted as calibrations + held-out evaluations")
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
