"""What the engine tests share: the matrix they build and how to read what a build wrote."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.digits import DIGITS_PROFILES, build_args

CC_BITS = {"7.5": 0x1, "8.0": 0x2, "8.6": 0x4, "8.9": 0x8, "12.0": 0x10, "12.1": 0x20}
SKUS = {"rtx-4090": "8.9", "rtx-3090": "8.6"}
PRECISIONS = ("fp32", "fp16", "int8")


def matrix_args(out, cache, calibration, skus=tuple(SKUS), precisions=PRECISIONS, profiles=DIGITS_PROFILES):
    """`compile build` of the engine tests' matrix (int8 from ``calibration``) with a cache of their own."""
    extra = ("--cache-dir", cache, "--json", "--calibration", calibration)
    return build_args(out, skus, precisions, *extra, profiles=profiles)


def layers_of(out: Path, sku: str, precision: str) -> list[dict]:
    return json.loads((out / sku / precision / "layers.json").read_text())["layers"]
