"""The two quantizers side by side (issue 33): ``calibrate --quantizer onnxruntime|modelopt`` on the same models, data
and method (minmax), each run a fresh ``compile calibrate`` process.

Printed per model x precision x quantizer: the quantized nodes, each output's mean cosine and SQNR on the held-out
samples, whether the default gates pass, wall seconds, and peak RSS (the largest of the command and the ModelOpt
child, from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper: the two are not resident together for long). Install size
of each environment is printed at the end. Needs ``$COMPILE_MODELOPT_PYTHON``. Usage: ``python
benchmarks/quantizers.py [--precision int8 --precision fp8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "digits CNN": ("compiler/examples/digits_cnn.onnx", "compiler/examples/digits.npz"),
    "encoder": ("tests/fixtures/encoder.onnx", "tests/fixtures/encoder_data.npz"),
    "ViT": ("tests/fixtures/zoo/vit.onnx", "compiler/examples/digits.npz"),
}
_WRAPPER = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "print(done.stdout if done.stdout.strip() else done.stderr)"
)


def run(model: str, data: str, precision: str, quantizer: str, out: Path) -> dict:
    import time

    command = [
        sys.executable,
        "-c",
        _WRAPPER,
        sys.executable,
        "-m",
        "compiler",
        "calibrate",
        str(REPO / model),
        "--data",
        str(REPO / data),
        "--precision",
        precision,
        "--quantizer",
        quantizer,
        "--out",
        str(out),
        "--no-reuse",
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    seconds = time.perf_counter() - started
    head, _, body = done.stdout.partition("\n")
    code, rss_kb = map(int, head.split())
    if not body.lstrip().startswith("{"):  # an error line instead of the record
        return {
            "error": f"exit {code}, {body.strip().splitlines()[-1] if body.strip() else 'no output'}",
            "seconds": seconds,
        }
    result = json.loads(body)
    return {
        "quantized": result["quantized_nodes"],
        "passed": result["passed"],
        "seconds": seconds,
        "peak_rss_mb": rss_kb / 1024,
        "outputs": {o["name"]: (o["cosine_mean"], o.get("sqnr_db")) for o in result["report"]["outputs"]},
    }


def size_mb(python: str) -> float:
    """The venv holding ``python`` (its site-packages and all), in MB."""
    root = Path(python).absolute().parents[1]  # the venv, not where its python links to
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", action="append", choices=["int8", "fp8"])
    args = parser.parse_args()
    if not os.environ.get("COMPILE_MODELOPT_PYTHON"):
        sys.exit("set $COMPILE_MODELOPT_PYTHON (docs/calibrate.md)")
    print(
        "| model | precision | quantizer | quantized nodes | cosine / SQNR dB per output | gates | seconds | "
        "peak RSS MB |\n|---|---|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory(prefix="bench-quantizers-") as root:
        for name, (model, data) in MODELS.items():
            for precision in args.precision or ["int8", "fp8"]:
                for quantizer in ("onnxruntime", "modelopt"):
                    figures = run(model, data, precision, quantizer, Path(root) / f"{name}-{precision}-{quantizer}")
                    if "error" in figures:
                        print(
                            f"| {name} | {precision} | {quantizer} | error: {figures['error']} | | | "
                            f"{figures['seconds']:.1f} | |",
                            flush=True,
                        )
                        continue
                    outputs = ", ".join(
                        f"{o} {c:.4f} / {s if s is None else f'{s:.1f}'}" for o, (c, s) in figures["outputs"].items()
                    )
                    print(
                        f"| {name} | {precision} | {quantizer} | {figures['quantized']} | {outputs} | "
                        f"{'pass' if figures['passed'] else 'FAIL'} | {figures['seconds']:.1f} | "
                        f"{figures['peak_rss_mb']:.0f} |",
                        flush=True,
                    )
    print(
        f"\ninstall size: this venv {size_mb(sys.executable):.0f} MB, ModelOpt's venv "
        f"{size_mb(os.environ['COMPILE_MODELOPT_PYTHON']):.0f} MB"
    )


if __name__ == "__main__":
    main()
