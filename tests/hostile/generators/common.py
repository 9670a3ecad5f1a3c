"""What every family of generators shares: the shipped files, verdicts, recipes' result, hostile text."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from hypothesis import strategies as st

from tests.support.digits import DIGITS_DATA, DIGITS_MODEL, DIGITS_PROFILES

MODEL_INPUT = "image"
MODEL_DIMS: tuple[str | int, ...] = ("B", 1, 8, 8)
"""The digits CNN's one input, float32 [B, 1, 8, 8]."""
SAMPLES = 24
"""Samples in the generated data: enough for a split (20 % held out), few enough that a valid case calibrates in
about a second."""

MAX_PROFILE_DIM = 2**31 - 1
MAX_PROFILE_VOLUME = 2**40
"""TensorRT's bounds on a profile: ``IOptimizationProfile.setDimensions`` takes int32 values (it refuses 2**31 and
misreads larger ones), and the builder's tensor volume limit is 2**40 elements."""

# verdicts: how the documented rules classify an input (test_hostile.py maps each to the exit codes it allows)
INVALID = "invalid"
"""Refused by a documented rule, or damaged: exit 2."""
VALID = "valid"
"""Satisfies every documented rule: the command does its work."""
AMBIGUOUS = "ambiguous"
"""The documents do not decide (e.g. a Fortran-ordered array, an unknown key in a record): success or exit 2,
either way within the contract."""
UNREADABLE = "unreadable"
"""Models: not an ONNX protobuf with a graph, opsets and an IR version, or external data that fails the safe-load
rules (docs/inspect.md, "Loading a model safely")."""
CHECKER_REJECTS = "checker-rejects"
"""Models: a readable protobuf that ``onnx.checker`` refuses."""
LOADS = "loads"
"""Models: passes the checker; shape inference or TensorRT may still refuse it."""
RESIGNED = "re-signed damage"
"""Calibration folders: a damaged model.onnx whose sha256 calibration.json was updated to match, so only reading
the model (the safe load, then TensorRT's parser) can find the damage."""
FAILED_VERDICT = "failed verdict"
"""Calibration folders: a verdict.json saying the calibration failed its gates: build refuses it (exit 1) unless
``--allow-failed``."""
ENVIRONMENT = "environment"
"""Options: a backend or GPU this machine does not have: exit 3."""
GATE = "gate"
"""Options: a valid gate threshold, which the result may miss (exit 1)."""


@dataclass(frozen=True)
class Made:
    """One hostile input, made: what to pass on the command line and how the rules classify it."""

    path: Path
    verdict: str
    names: tuple[str, ...] = ()
    """An error line must contain one of these (the file, folder, field or option at fault); empty: not checked."""
    args: tuple[str, ...] = ()
    """Extra command-line arguments this input comes with (``--precision fp8`` asked of an int8 folder)."""
    flags: tuple[str, ...] = ()
    """Flags added to the command line with this input (``--allow-failed``)."""


# --- the shipped files -----------------------------------------------------------------------------------------


@functools.cache
def model_bytes() -> bytes:
    return DIGITS_MODEL.read_bytes()


def model_proto() -> onnx.ModelProto:
    return onnx.ModelProto.FromString(model_bytes())


@functools.cache
def _digits() -> np.ndarray:
    with np.load(DIGITS_DATA) as data:
        return np.ascontiguousarray(data[MODEL_INPUT][:SAMPLES])


def digits_samples(count: int = SAMPLES) -> np.ndarray:
    """The first ``count`` digits samples (repeated when more are asked for), float32 [count, 1, 8, 8]."""
    base = _digits()
    return np.ascontiguousarray(np.resize(base, (count, *base.shape[1:])))


def valid_profiles() -> dict[str, Any]:
    return yaml.safe_load(DIGITS_PROFILES.read_text())


def make_fifo(path: Path) -> Path:
    """A FIFO nobody writes to: opening it for reading blocks forever, so a read of it shows as a timeout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def flip_bits(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    """``data`` with bit ``bit`` of byte ``position % len(data)`` inverted, for each (position, bit)."""
    mutable = bytearray(data)
    for position, bit in flips:
        mutable[position % len(mutable)] ^= 1 << bit
    return bytes(mutable)


def bit_flips(max_size: int = 12) -> st.SearchStrategy[list[tuple[int, int]]]:
    return st.lists(st.tuples(st.integers(0, 2**32), st.integers(0, 7)), min_size=1, max_size=max_size)


HOSTILE_TEXT = (
    "line\nbreak",
    "carriage\rreturn",
    "esc\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "nul\x00byte",
    "bell\x07",
    "del\x7f",
    "c1\x85next",
    "bidi\u202eevil",
    "isolate\u2066x\u2069",
    "zero\u200bwidth",
    "é-combining-e\u0301",
    "日本語",
    "emoji-\U0001f600",
    "",
    " ",
    "x" * 5000,
    "error: forged",
    "\nerror: forged line",
)
"""Strings that must never reach a terminal or an error line unescaped: line breaks, control sequences,
bidirectional overrides, a forged ``error:`` line; and plain unicode, empty and very long strings."""


def hostile_text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(min_size=0, max_size=40))
