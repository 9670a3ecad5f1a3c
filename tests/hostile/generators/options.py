"""Option values of build, calibrate and inspect."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from tests.hostile.generators.common import AMBIGUOUS, ENVIRONMENT, GATE, INVALID, SAMPLES, VALID


@dataclass(frozen=True)
class OptionValue:
    """One option given one value (as the user types it) and the documented verdict on it."""

    option: str
    value: str
    verdict: str
    extra: tuple[str, ...] = field(default=())

    def args(self) -> tuple[str, ...]:
        return (self.option, self.value, *self.extra)


def _int_values(low: int, high: int | None, *, extra_valid: tuple[int, ...] = ()) -> list[tuple[str, str]]:
    """Hostile values of an integer option with the documented range [low, high]. With no documented maximum,
    values past 2**20 are ambiguous: a sane bound may refuse them (2), or the run takes them within the suite's
    time and memory bounds (0)."""
    values: list[tuple[str, str]] = []
    for number in sorted(
        {
            low - 1,
            low - 2**31,
            -1,
            0,
            low,
            *extra_valid,
            2**63,
            2**64,
            10**30,
            *((high, high + 1, 2 * high) if high is not None else ()),
        }
    ):
        if number < low or (high is not None and number > high):
            verdict = INVALID
        else:
            verdict = AMBIGUOUS if high is None and number > 2**20 else VALID
        values.append((str(number), verdict))
    values += [
        ("x", INVALID),
        ("", INVALID),
        ("1.5", INVALID),
        ("nan", INVALID),
        ("0x10", INVALID),
        ("1e3", INVALID),
        ("--json", INVALID),
    ]
    return values


def _float_values(valid, *, extra: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    values = ["nan", "NaN", "inf", "-inf", "-1", "0", "0.5", "1", "1.5", "2", "98", "1e308", "1e-320", "x", "", *extra]
    return [(v, valid(v)) for v in values]


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _in(low: float, high: float, *, low_open: bool = False):
    """In [low, high] (or (low, high]), and finite: "NaN and infinity are refused everywhere" (docs/calibrate.md)."""

    def verdict(text: str) -> str:
        number = _as_float(text)
        if number is None or not math.isfinite(number):
            return INVALID
        ok = (low < number if low_open else low <= number) and number <= high
        return VALID if ok else INVALID

    return verdict


def _gate(low: float, high: float):
    inner = _in(low, high)
    return lambda text: GATE if inner(text) == VALID else INVALID


def _holdout(text: str) -> str:
    """A fraction in (0, 1) or a whole count, leaving calibration samples out of the data's (docs/calibrate.md)."""
    number = _as_float(text)
    if number is None or not math.isfinite(number) or number <= 0:
        return INVALID
    if number >= 1 and number != int(number):
        return INVALID  # neither a fraction below 1 nor a whole count
    held = max(1, round(SAMPLES * number)) if number < 1 else int(number)
    return VALID if held < SAMPLES else INVALID


BUILD_OPTIONS: dict[str, list[tuple[str, str]]] = {
    "--jobs": _int_values(1, 64, extra_valid=(2,)),
    "--workspace-mb": _int_values(1, 1 << 20, extra_valid=(16, 256)),
    "--optimization-level": [*_int_values(0, 5, extra_valid=(3,)), ("9", INVALID)],
    "--sku": [
        ("rtx4090", INVALID),
        ("", INVALID),
        ("RTX-4090", INVALID),
        ("rtx-4090\n", INVALID),
        ("rtx\x1b[2J", INVALID),
        ("rtx-4090\u202e", INVALID),
        ("h100", ENVIRONMENT),
        ("a100", ENVIRONMENT),
        ("rtx-3090", VALID),
        ("rtx-5090", VALID),
        ("../skus", INVALID),
        ("*", INVALID),
    ],
    "--precision": [
        ("FP32", INVALID),
        ("int4", INVALID),
        ("", INVALID),
        ("fp32 ", INVALID),
        ("bf16", INVALID),
        ("int8", INVALID),
        ("fp8", INVALID),
        ("fp16", VALID),
        ("fp32\x1b[31m", INVALID),
    ],
    "--backend": [
        ("tensorrt-rtx", VALID),
        ("tensorrt", ENVIRONMENT),
        ("cuda", INVALID),
        ("", INVALID),
        ("TensorRT", INVALID),
        ("tensorrt-rtx\n", INVALID),
    ],
    "--method": [("minmax", INVALID), ("entropy", INVALID), ("kl", INVALID)],
    "--dim": [
        ("image:0=N", VALID),
        ("image:1=C", INVALID),
        ("image:4=N", INVALID),
        ("image:-1=N", INVALID),
        ("image:99999999999999999999=N", INVALID),
        ("label:0=N", INVALID),
        ("image:0=", INVALID),
        ("image:0=1N", INVALID),
        ("image:0=N\x1b[2J", INVALID),
        ("image:0", INVALID),
        ("", INVALID),
        ("=:0=N", INVALID),
    ],
    "--cache-dir": [("@file", INVALID), ("@under-file", INVALID), ("/dev/null", INVALID), ("@fresh", VALID)],
    "--out": [("@file", INVALID), ("@under-file", INVALID), ("/dev/null", INVALID), ("@fresh", VALID)],
}
"""``compile build``'s options (docs/build.md): int8/fp8 without --calibration or --data, and --method without
--data, are refused; --dim renames the dynamic batch dim of the digits model's ``image`` [B, 1, 8, 8] only;
``@file`` is a path that is a file, ``@under-file`` a path below one."""

CALIBRATE_OPTIONS: dict[str, list[tuple[str, str]]] = {
    "--holdout": [
        (v, _holdout(v))
        for v in ("nan", "inf", "-inf", "-1", "0", "1e-9", "0.5", "0.999999", "1", "2", "2.5", "23", "24", "1e300", "x")
    ],
    "--percentile": _float_values(_in(50, 100, low_open=True), extra=("50", "50.0001", "99.9", "100", "100.0001")),
    "--samples": _int_values(1, None, extra_valid=(5, 10**6)),
    "--batch-size": _int_values(1, None, extra_valid=(3, 10**6)),
    "--num-bins": [*_int_values(256, 1 << 14, extra_valid=(512,)), ("255", INVALID), (str(10**6), INVALID)],
    "--chunk-mb": _int_values(1, None, extra_valid=(2, 10**6)),
    "--seed": [
        ("-1", INVALID),
        ("0", VALID),
        ("7", VALID),
        (str(2**32), VALID),
        (str(2**64), AMBIGUOUS),
        (str(2**128), AMBIGUOUS),
        ("x", INVALID),
        ("1.5", INVALID),
    ],
    "--min-cosine": _float_values(_gate(-1, 1)),
    "--min-top1": _float_values(_gate(0, 1)),
    "--max-abs-error": _float_values(_gate(0, math.inf)),
    "--method": [
        ("minmax", VALID),
        ("entropy", VALID),
        ("percentile", VALID),
        ("MinMax", INVALID),
        ("kl", INVALID),
        ("", INVALID),
        ("minmax\x1b[2J", INVALID),
    ],
    "--precision": [
        ("int8", VALID),
        ("fp8", VALID),
        ("fp16", VALID),
        ("int4", INVALID),
        ("FP16", INVALID),
        ("", INVALID),
        ("fp32", INVALID),
    ],
    "--out": [
        ("@model-folder", INVALID),
        ("@model-folder-link", INVALID),
        ("@model-file", INVALID),
        ("@data-file", INVALID),
        ("/dev/null", INVALID),
        ("@under-file", INVALID),
        ("@fresh", VALID),
    ],
    "--const": [
        ("image=1", INVALID),
        ("nope=1", INVALID),
        ("image", INVALID),
        ("=3", INVALID),
        ("image=nan", INVALID),
        ("image=1e400", INVALID),
        ("image\x1b[2J=1", INVALID),
    ],
    "--sample-axis": [
        ("image=0", VALID),
        ("image=1", INVALID),
        ("image=4", INVALID),
        ("nope=1", INVALID),
        ("image", INVALID),
        ("image=-1", INVALID),
        ("image=1.5", INVALID),
        ("image=0x1", INVALID),
    ],
    "--output": [
        ("logits:logits", VALID),
        ("logits:embedding", VALID),
        ("logits:dense,threshold=0", VALID),
        ("nope:logits", INVALID),
        ("logits:bogus", INVALID),
        ("logits", INVALID),
        (":logits", INVALID),
        ("logits:dense,threshold=nan", INVALID),
        ("logits:detection,boxes=4:2", INVALID),
        ("logits:detection,axis=5", INVALID),
        ("logits:detection,boxes=0:3", INVALID),
        ("logits:tensor,min=1", INVALID),
        ("logits:detection,iou=2", INVALID),
        ("logits\x1b[2J:logits", INVALID),
    ],
}
"""``compile calibrate``'s options (docs/calibrate.md); --const freezes an input that is not a batch of samples
(the digits' ``image`` is a batch: refused, as an input the model lacks, a value that is not a finite number);
--sample-axis names an input's sample axis (its axis 1 is a fixed 1, not a batch: refused, as an axis past its
rank or that is not a whole number);
--output declares an output's kind (docs/check.md#output-kinds):
an output the model lacks, a kind or key it does not know, a box range that is not 4 rows, an axis beyond the
output's rank are 2. Gates take a threshold in their measure's range: a
cosine in [-1, 1], a top-1 fraction in [0, 1], a non-negative error; NaN is never a threshold. --seed is at
least 0 (a seed beyond 64 bits: either way). --num-bins is 256 to 16384 (10**6 would be an entropy search of
hours). ``@model-folder`` is the folder of the model, which is
named model.onnx, so writing there would overwrite the input (``@model-folder-link``: a symlink to it)."""


CALIBRATE_OPTION_EXTRA = {"--percentile": ("--method", "percentile"), "--num-bins": ("--method", "entropy")}
"""What makes a calibrate option matter: --percentile is read by --method percentile, --num-bins by the
histogram methods."""


def option_recipes(table: dict[str, list[tuple[str, str]]], option: str) -> st.SearchStrategy[OptionValue]:
    extra = CALIBRATE_OPTION_EXTRA.get(option, ()) if table is CALIBRATE_OPTIONS else ()
    return st.sampled_from(table[option]).map(lambda pair: OptionValue(option, pair[0], pair[1], extra))


def option_value(table: dict[str, list[tuple[str, str]]], option: str, value: str) -> OptionValue:
    """The table's entry for one value (for the cases a run always includes)."""
    verdict = dict(table[option])[value]
    extra = CALIBRATE_OPTION_EXTRA.get(option, ()) if table is CALIBRATE_OPTIONS else ()
    return OptionValue(option, value, verdict, extra)


UNUSED_BY_FP16 = ("--method", "--num-bins", "--percentile", "--chunk-mb")
"""fp16 converts the model: it computes no ranges, so the range options are never read."""


def calibrate_precisions(option: OptionValue) -> st.SearchStrategy[str]:
    """The --precision a calibrate option case runs with (int8 most often; fp16 reads fewer options)."""
    if option.option == "--precision":
        return st.just(option.value)
    return st.sampled_from(["int8", "int8", "fp8", "fp16"])


def with_precision(option: OptionValue, precision: str) -> OptionValue:
    """The option's verdict once the precision is known: a bad number for an option the run never reads may be
    refused or ignored."""
    numeric = _as_float(option.value) is not None
    if precision == "fp16" and option.option in UNUSED_BY_FP16 and option.verdict == INVALID and numeric:
        return replace(option, verdict=AMBIGUOUS)
    return option
