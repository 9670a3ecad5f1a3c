"""Transformer benchmark on a BERT-base-sized encoder (12 layers, hidden 768, 12 heads, sequence 128; random
weights made in the run by tests/fixtures/make_encoder.py, with its Hugging Face mask): issue 33.

Claims checked (exit 1 when missed):

1. ``calibrate`` int8 (``--method``, minmax by default) of 512 samples <= 1.1 x onnxruntime's ``quantize_static``
   called directly with the same placement (op_types_to_quantize MatMul/Gemm, per-channel symmetric weights,
   symmetric activations, float bias) and method on the same samples; <= 0.7 x for entropy and percentile.
   ``calibrate`` also proves its Q/DQ model builds (one TensorRT-RTX build), measures the held-out accuracy and
   ranks the quantized nodes by their local error (:data:`CHECKS`, calibration.json's ``phases``): each is timed
   in the run, and the limit is the baseline plus them.
2. Peak RSS of ``calibrate`` with 2,048 samples <= 1.1 x with 256 (activations go to onnxruntime in chunks).
3. ``compile build`` of the int8 Q/DQ model (rtx-4090) <= 1.1 x the raw TensorRT-RTX builder API on the same
   model and profile (benchmarks/raw_build.py).

Also reported: the INT8 and FP16 cosine of hidden states and logits against FP32 (held-out samples).
Every run is a child process reporting its own peak RSS (VmHWM); paired runs alternate who goes first and the
median is taken. Usage: ``python benchmarks/transformer.py [--samples 512] [--small 256] [--large 2048]
[--repeat 3] [--method minmax|entropy|percentile] [--calibrate-only]``.
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

from benchmarks.calibration import CHECKS, median_run, ours_options, peak_rss_mb  # noqa: E402 - after the path

BERT_BASE = {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 30522}
SEQUENCE = 128
PROFILES = """\
profiles:
  - name: online
    shapes:
      input_ids: {min: [1, 16], opt: [8, 128], max: [16, 128]}
      attention_mask: {min: [1, 16], opt: [8, 128], max: [16, 128]}
"""


def child_ours(args: argparse.Namespace) -> dict:
    import onnxruntime.quantization.shape_inference  # noqa: F401 - imported before the clock, as the baseline does

    from calibration import calibrate

    started = time.perf_counter()
    result = calibrate(args.model, args.data, args.out, ours_options(args, args.precision, args.method))
    return {
        "seconds": time.perf_counter() - started,
        "samples": result.samples,
        "checks": {name: result.phases.get(name, 0.0) for name in CHECKS},
        "cosine": {o.name: o.cosine_mean for o in result.report.outputs},
    }


def child_onnxruntime(args: argparse.Namespace) -> dict:
    """onnxruntime's own flow on the same samples, placement and method: quant_pre_process + quantize_static."""
    import numpy as np
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from calibration.calibrators import HistogramOptions, _ort_method
    from compiler.data.sampling import split

    started = time.perf_counter()
    with np.load(args.data, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    count = len(next(iter(arrays.values())))
    chosen = split(count, args.holdout, args.samples, seed=0).calibration
    batches = iter(
        [
            {name: array[chosen[i : i + args.batch_size]] for name, array in arrays.items()}
            for i in range(0, len(chosen), args.batch_size)
        ]
    )

    class Reader:
        def get_next(self):
            return next(batches, None)

    histogram = HistogramOptions()  # calibrate's defaults
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(args.model, str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(Path(tmp) / "qdq.onnx"),
            Reader(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul", "Gemm"],
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=_ort_method(args.method),
            extra_options={
                "ActivationSymmetric": True,
                "WeightSymmetric": True,
                "QuantizeBias": False,
                "CalibNumBins": histogram.num_bins,
                "CalibNumQuantizedBins": histogram.num_quantized_bins,
                "CalibPercentile": histogram.percentile,
            },
        )
    return {"seconds": time.perf_counter() - started, "samples": len(chosen)}


def run(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{command[2:4]} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_child(kind: str, **options) -> dict:
    command = [sys.executable, __file__, "--child", kind]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return run(command)


def timed_build(side: str, model: Path, profiles: Path, out: Path, calibration: Path) -> dict:
    """One build in a fresh process, timed after its imports: raw builder API or compile's build_engines, whose
    plan (the checks before any build: the model's facts and profile limits, the calibration folder) is timed
    apart: the limit's share beyond the raw builder."""
    code = f"""
import sys, tempfile, time
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "benchmarks")!r}]
if {side!r} == "raw":
    import tensorrt_rtx
    from raw_build import raw_build
    build = lambda: raw_build({str(model)!r}, {str(profiles)!r}, "8.9", {str(out / "raw.plan")!r})
else:
    from compiler.backends import load_backend
    from compiler.engines import BuildOptions, execute_builds, plan_builds
    load_backend("tensorrt-rtx")
    def build():
        started = time.perf_counter()
        cold = tempfile.mkdtemp(prefix="cache-", dir={str(out)!r})  # a cold cache: nothing known of the model
        planned = plan_builds({str(model)!r}, {str(profiles)!r}, ["rtx-4090"], ["int8"], {str(out / "ours")!r},
                              BuildOptions(calibration={str(calibration)!r}, use_cache=False, cache_dir=cold))
        checks[0] = time.perf_counter() - started
        report = execute_builds(planned, {str(model)!r}, {str(out / "ours")!r})
        assert not report.failed, report.failed
checks = [0.0]
started = time.perf_counter()
build()
print('{{"seconds": %f, "checks": %f}}' % (time.perf_counter() - started, checks[0]))
"""
    return run([sys.executable, "-c", code])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=["ours", "onnxruntime"])
    parser.add_argument("--model")
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"])
    parser.add_argument(
        "--calibrate-only", action="store_true", help="only the paired calibrations (no memory sweep, no build)"
    )
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--small", type=int, default=256)
    parser.add_argument("--large", type=int, default=2048)
    parser.add_argument("--holdout", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        figures = child_ours(args) if args.child == "ours" else child_onnxruntime(args)
        figures["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(figures))
        return

    from rich.console import Console

    console = Console()
    runs = _measure(args, console)
    console.print(_table(args, runs))
    for precision, row in (("int8", runs["ours"]), ("fp16", runs.get("fp16"))):
        if row is None:  # --calibrate-only
            continue
        console.print(
            f"{precision} held-out cosine vs FP32: "
            + ", ".join(f"{name} {value:.5f}" for name, value in row["cosine"].items())
        )
    checks = _figures(args, runs)
    for label, value, limit in checks:
        verdict = "(shown)" if limit is None else ("ok" if value <= limit else "FAILED")
        console.print(f"{label}: {value:.2f}" + (f" (limit {limit}) " if limit else " ") + verdict)
    if any(limit is not None and value > limit for _, value, limit in checks):
        raise SystemExit(1)


def _alternating(repeat: int, first: tuple[list, object], second: tuple[list, object]) -> None:
    """Both sides ``repeat`` times, alternating who goes first; medians are taken later."""
    for i in range(repeat):
        for runs, action in (first, second)[:: 1 if i % 2 == 0 else -1]:
            runs.append(action())


def _measure(args, console) -> dict[str, dict]:
    """Every run of the benchmark on one BERT-base-sized encoder and its data: the medians of the paired ones."""
    import onnx

    from tests.fixtures.make_encoder import build, make_data

    with tempfile.TemporaryDirectory(prefix="transformer-bench-") as tmp:
        root = Path(tmp)
        model, profiles = root / "bert-base.onnx", root / "profiles.yaml"
        onnx.save_model(build(**BERT_BASE), model)
        profiles.write_text(PROFILES)
        data = make_data(root / "data.npz", samples=max(args.samples, args.large) + args.holdout, sequence=SEQUENCE)
        console.print(f"BERT-base-sized encoder: {model.stat().st_size / 2**20:.0f} MiB, sequence {SEQUENCE}")
        common = dict(model=model, data=data, holdout=args.holdout, batch_size=args.batch_size, method=args.method)
        ours, direct, raw, compiled = [], [], [], []
        _alternating(
            args.repeat,
            (ours, lambda: run_child("ours", out=root / "int8", samples=args.samples, **common)),
            (direct, lambda: run_child("onnxruntime", samples=args.samples, **common)),
        )
        if args.calibrate_only:
            return {"ours": median_run(ours), "direct": median_run(direct)}
        _alternating(
            args.repeat,
            (raw, lambda: timed_build("raw", root / "int8" / "model.onnx", profiles, root, root / "int8")),
            (compiled, lambda: timed_build("ours", model, profiles, root, root / "int8")),
        )
        return {
            "ours": median_run(ours),
            "direct": median_run(direct),
            "raw": median_run(raw),
            "compiled": median_run(compiled),
            "small": run_child("ours", out=root / "small", samples=args.small, **common),
            "large": run_child("ours", out=root / "large", samples=args.large, **common),
            "fp16": run_child(
                "ours", out=root / "fp16", precision="fp16", samples=args.small, **common | {"method": "minmax"}
            ),
        }


def _table(args, runs: dict[str, dict]):
    from rich.table import Table

    table = Table(
        title=f"BERT-base-sized encoder, sequence {SEQUENCE}, batch {args.batch_size}, {args.holdout} "
        f"held-out; paired rows: median of {args.repeat} alternating runs",
        title_justify="left",
    )
    for column in ("run", "samples", "seconds", "peak RSS MiB"):
        table.add_column(column, justify="left" if column == "run" else "right")
    checks = ", ".join(f"{name.strip('_')} {seconds:.1f} s" for name, seconds in runs["ours"]["checks"].items())
    rows = [
        (f"calibrate int8 {args.method} (of which {checks})", runs["ours"]),
        ("onnxruntime quantize_static, same placement and method", runs["direct"]),
        (f"calibrate int8, {args.small} samples", runs.get("small")),
        (f"calibrate int8, {args.large} samples", runs.get("large")),
    ]
    for name, row in rows:
        if row is not None:
            table.add_row(name, str(row["samples"]), f"{row['seconds']:.1f}", f"{row['peak_rss_mb']:.0f}")
    if "compiled" not in runs:  # --calibrate-only
        return table
    compiled = runs["compiled"]
    label = f"compile build int8 (rtx-4090; of which the plan's checks {compiled['checks']:.1f} s)"
    table.add_row(label, "", f"{compiled['seconds']:.1f}", "")
    table.add_row("raw TensorRT-RTX builder, same Q/DQ model", "", f"{runs['raw']['seconds']:.1f}", "")
    return table


def _figures(args, runs: dict[str, dict]) -> list[tuple[str, float, float | None]]:
    """Each figure, its value and its limit (None: shown, not judged)."""
    ours, direct = runs["ours"], runs["direct"]
    limit = direct["seconds"] + sum(ours["checks"].values())
    target = 1.1 if args.method == "minmax" else 0.7
    calibrated = [
        (f"calibrate / quantize_static ({args.method}, {args.samples} samples)", ours["seconds"] / direct["seconds"],
         target),
        ("limit: (quantize_static + the checks calibrate adds) / quantize_static", limit / direct["seconds"], None),
        ("calibrate / limit", ours["seconds"] / limit, None),
    ]  # fmt: skip
    if "compiled" not in runs:  # --calibrate-only
        return calibrated
    raw, compiled = runs["raw"], runs["compiled"]
    rss = runs["large"]["peak_rss_mb"] / runs["small"]["peak_rss_mb"]
    build_limit = raw["seconds"] + compiled["checks"]
    return [
        *calibrated,
        (f"peak RSS {args.large} / {args.small} samples", rss, 1.1),
        ("compile build / raw builder (int8 Q/DQ model)", compiled["seconds"] / raw["seconds"], 1.1),
        ("compile build / (raw builder + the plan's checks)", compiled["seconds"] / build_limit, None),
    ]


if __name__ == "__main__":
    main()
