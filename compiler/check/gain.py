"""Whether a low-precision engine gains anything: the share of its heavy nodes (Conv, ConvTranspose, MatMul, Gemm)
that compute in the engine's own precision, read from the built engine's kernels, not from the ONNX graph. A
calibration whose fallback kept almost everything in float, or an fp8 target of a convolution network (TensorRT-RTX
runs FP8 only for MatMul/Gemm, on compute capability 8.9 and later: its convolutions run in FP16), is released
under a precision it does not compute in; this check says so instead of passing it as int8 or fp8."""

from __future__ import annotations

from compiler.check.fusions import Graph
from compiler.core.records import QUANTIZED, CheckResult, Kernel, Precision, Status

HEAVY = ("Conv", "ConvTranspose", "MatMul", "Gemm")
GEMMS = ("MatMul", "Gemm")


def low_precision_share(kernels: list[Kernel], graph: Graph, ops: tuple[str, ...] = HEAVY) -> tuple[int, int]:
    """(heavy nodes some kernel computes quantized, heavy nodes some kernel names)."""
    naming: dict[str, set[str]] = {}
    for kernel in kernels:
        for node in kernel.onnx_nodes:
            if graph.op.get(node) in ops:
                naming.setdefault(node, set()).add(kernel.precision or "none")
    return sum(1 for found in naming.values() if found & set(QUANTIZED)), len(naming)


def check_gain(precision: Precision, runtime: str, kernels: list[Kernel], graph: Graph, minimum: float) -> CheckResult:
    """Failed when less than ``minimum`` of the heavy nodes compute in the engine's precision (int8, fp8)."""
    figures: dict = {"minimum": minimum}
    if precision not in (Precision.INT8, Precision.FP8):
        return CheckResult(name="precision-gain", status=Status.SKIPPED, summary=f"not judged for {precision}")
    quantized, heavy = low_precision_share(kernels, graph)
    convs = [n for n, op in graph.op.items() if op in ("Conv", "ConvTranspose")]
    gemms = [n for n, op in graph.op.items() if op in GEMMS]
    if precision == Precision.FP8 and runtime == "tensorrt-rtx":
        quantized, heavy = low_precision_share(kernels, graph, GEMMS)[0], len(convs) + len(gemms)
        figures["convolutions_in_fp16"] = len(convs)
    share = quantized / heavy if heavy else 0.0
    figures |= {"quantized": quantized, "heavy": heavy, "share": round(share, 4)}
    what = f"{quantized} of {heavy} Conv/MatMul/Gemm nodes compute in {precision} ({share:.0%})"
    if heavy and share >= minimum:
        return CheckResult(name="precision-gain", status=Status.OK, summary=what, figures=figures)
    if precision == Precision.FP8 and runtime == "tensorrt-rtx" and len(convs) >= len(gemms):
        advice = (
            f"no FP8 gain: its {len(convs)} convolution(s) run in FP16 (TensorRT-RTX computes FP8 only for MatMul "
            "and Gemm); release this target in int8 or fp16"
        )
    else:
        advice = f"no useful {precision} placement: release this target in fp16 or fp32"
    return CheckResult(
        name="precision-gain",
        status=Status.FAILED,
        summary=f"{what}, less than --min-low-precision {minimum:g}: {advice}",
        figures=figures,
    )
