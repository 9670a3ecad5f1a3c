"""Generators of malformed inputs: hypothesis strategies of *recipes*, each of which writes one hostile input.

A recipe is a frozen dataclass (its repr is the case's description in a report) with a ``write`` method that
makes the input inside a case's sandbox and returns a :class:`Made`: the path to hand the CLI, a *verdict* (how a
reference reading of the documented rules classifies the input; the tests map verdicts to exit codes) and the
names an error line should mention (the file or field at fault).

Inputs are made by mutating the real files the project ships (``compiler/examples/digits_cnn.onnx``,
``compiler/examples/digits.npz``, ``profiles/digits.yaml``) and the calibration folder a session makes with
``compile calibrate``, or from scratch where the format is small (PNG/BMP headers, YAML, zip archives).

Files a case must never read or change are made under the sandbox's ``outside`` folder. Where a bug would make the
tool read one, it is a FIFO with no writer: opening it blocks, so a read shows up as a timeout, not as nothing.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import pickle
import struct
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from hypothesis import strategies as st
from onnx import external_data_helper

from tests.conftest import EXAMPLES, REPO

DIGITS_MODEL = EXAMPLES / "digits_cnn.onnx"
DIGITS_DATA = EXAMPLES / "digits.npz"
DIGITS_PROFILES = REPO / "profiles" / "digits.yaml"
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
    "line\nbreak", "carriage\rreturn", "esc\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "nul\x00byte", "bell\x07",
    "del\x7f", "c1\x85next", "bidi\u202eevil", "isolate\u2066x\u2069", "zero\u200bwidth", "é-combining-e\u0301",
    "日本語", "emoji-\U0001f600", "", " ", "x" * 5000, "error: forged", "\nerror: forged line",
)
"""Strings that must never reach a terminal or an error line unescaped: line breaks, control sequences,
bidirectional overrides, a forged ``error:`` line; and plain unicode, empty and very long strings."""


def hostile_text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(min_size=0, max_size=40))


# --- ONNX models -----------------------------------------------------------------------------------------------


def model_verdict(data: bytes) -> str:
    """The reference reading of model bytes (no external data): unreadable, refused by the checker, or loading."""
    try:
        proto = onnx.ModelProto.FromString(data)
    except Exception:
        return UNREADABLE
    if not proto.HasField("graph") or not proto.opset_import or proto.ir_version <= 0:
        return UNREADABLE
    if any(external_data_helper.uses_external_data(t) for t in external_data_helper._get_all_tensors(proto)):
        return UNREADABLE  # external data named by a damaged file: never beside it
    try:
        onnx.checker.check_model(proto)
    except Exception:
        return CHECKER_REJECTS
    return LOADS


def _model_file(sandbox_in: Path, data: bytes, name: str = "model.onnx") -> Path:
    path = sandbox_in / name
    path.write_bytes(data)
    return path


@dataclass(frozen=True)
class TruncatedModel:
    """The digits model cut short after ``keep`` bytes."""

    keep: int

    def write(self, box) -> Made:
        data = model_bytes()[: self.keep % len(model_bytes())]
        return Made(_model_file(box.inputs, data), model_verdict(data), ("model.onnx",))


@dataclass(frozen=True)
class BitFlippedModel:
    flips: tuple[tuple[int, int], ...]

    def write(self, box) -> Made:
        data = flip_bits(model_bytes(), list(self.flips))
        return Made(_model_file(box.inputs, data), model_verdict(data), ("model.onnx",))


def _foreign_bytes(kind: str, noise: bytes) -> bytes:
    if kind == "empty":
        return b""
    if kind == "random":
        return noise
    if kind == "text":
        return b"this is not a model\n" + noise.hex().encode()
    if kind == "json":
        return json.dumps({"graph": {"node": []}, "ir_version": 8}).encode()
    if kind == "png":
        return png_bytes(8, 8, b"\0" * 72)
    if kind == "npz":
        buffer = io.BytesIO()
        np.savez(buffer, image=digits_samples(2))
        return buffer.getvalue()
    if kind == "gzip-model":
        return zlib.compress(model_bytes())
    if kind == "nul":
        return b"\0" * (len(noise) + 1)
    if kind == "text-proto":
        return str(model_proto()).encode()[:4000]
    if kind == "huge-length":  # field 7 (graph), wire type 2, a length of 2**62: a parser must not trust it
        return b"\x08\x08" + b"\x3a" + b"\xff\xff\xff\xff\xff\xff\xff\xff\x3f" + noise
    raise AssertionError(kind)


FOREIGN_KINDS = ("text-proto", "random", "text", "json", "png", "npz", "gzip-model", "nul", "empty", "huge-length")


@dataclass(frozen=True)
class ForeignModel:
    """Bytes that are not an ONNX model, under a ``.onnx`` name."""

    kind: str
    noise: bytes

    def write(self, box) -> Made:
        data = _foreign_bytes(self.kind, self.noise)
        return Made(_model_file(box.inputs, data), model_verdict(data), ("model.onnx",))


NOT_A_FILE = ("dev-zero", "missing", "fifo", "dangling-link", "directory", "link-loop")


@dataclass(frozen=True)
class NotAModelFile:
    """A model path that is no regular file: a directory, nothing, a FIFO, a device, a broken link."""

    kind: str

    def write(self, box) -> Made:
        path = box.inputs / "model.onnx"
        if self.kind == "directory":
            path.mkdir()
        elif self.kind == "fifo":
            make_fifo(path)
        elif self.kind == "dangling-link":
            path.symlink_to(box.inputs / "gone.onnx")
        elif self.kind == "dev-zero":
            path.symlink_to("/dev/zero")
        elif self.kind == "link-loop":
            path.symlink_to(path)
        return Made(path, UNREADABLE, ("model.onnx",))


EXTERNAL_KINDS = ("link-loop", "dotdot", "symlink-out", "missing", "too-short", "directory", "nul-in-name",
                  "empty-name", "negative-offset", "huge-length", "text-offset", "absolute", "dotdot-inside",
                  "nested-inside", "link-inside")
"""How a model's external-data reference goes wrong; the last three stay inside the model's folder (controls)."""


@dataclass(frozen=True)
class ExternalDataModel:
    """The digits model with its weights moved to ``weights.bin``, then that reference bent: out of the folder
    (an absolute path, ``..``, a symlink; the target a FIFO or a real copy), to nothing, to a file too short..."""

    kind: str
    target: str
    """``file`` or ``fifo``: what a reference leading out of the folder points at."""
    cut: int

    def write(self, box) -> Made:
        folder = box.inputs
        model = model_proto()
        onnx.save_model(model, folder / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        weights = folder / "weights.bin"
        outside = box.outside / "weights.bin"
        if self.target == "fifo":
            make_fifo(outside)
        else:
            outside.write_bytes(weights.read_bytes())
        location: str | None = None
        offset_key: tuple[str, str] | None = None
        verdict = UNREADABLE
        if self.kind == "absolute":
            location = str(outside)
        elif self.kind == "dotdot":
            location = os.path.relpath(outside, folder)
        elif self.kind == "symlink-out":
            weights.unlink()
            weights.symlink_to(outside)
        elif self.kind == "missing":
            weights.unlink()
        elif self.kind == "too-short":
            data = weights.read_bytes()
            weights.write_bytes(data[: self.cut % len(data)])
        elif self.kind == "directory":
            weights.unlink()
            weights.mkdir()
        elif self.kind == "nul-in-name":
            location = "weights.bin\0../../etc/passwd"
        elif self.kind == "empty-name":
            location = ""
        elif self.kind == "negative-offset":
            offset_key = ("offset", "-64")
        elif self.kind == "huge-length":
            offset_key = ("length", str(2**63))
        elif self.kind == "text-offset":
            offset_key = ("offset", "0x10")
        elif self.kind == "link-loop":
            weights.unlink()
            weights.symlink_to(weights)
        elif self.kind == "dotdot-inside":  # stays inside, but the docs say "no ..": either answer is fine
            (folder / "sub").mkdir()
            location, verdict = "sub/../weights.bin", AMBIGUOUS
        elif self.kind == "nested-inside":
            (folder / "sub").mkdir()
            weights.rename(folder / "sub" / "weights.bin")
            location, verdict = "sub/weights.bin", VALID
        elif self.kind == "link-inside":  # the docs refuse links that lead out; onnx's checker refuses any link
            (folder / "real").mkdir()
            weights.rename(folder / "real" / "weights.bin")
            weights.symlink_to(folder / "real" / "weights.bin")
            verdict = AMBIGUOUS
        if location is not None or offset_key is not None:
            proto = onnx.load(folder / "model.onnx", load_external_data=False)
            for tensor in external_data_helper._get_all_tensors(proto):
                for entry in tensor.external_data:
                    if location is not None and entry.key == "location":
                        entry.value = location
                if offset_key is not None and external_data_helper.uses_external_data(tensor):
                    entries = {e.key: e for e in tensor.external_data}
                    if offset_key[0] in entries:
                        entries[offset_key[0]].value = offset_key[1]
                    else:
                        tensor.external_data.add(key=offset_key[0], value=offset_key[1])
            (folder / "model.onnx").write_bytes(proto.SerializeToString())
        return Made(folder / "model.onnx", verdict, ("model.onnx", "weights.bin"))


HUGE_DIMS = (2**63 - 1, -1, -(2**63), 2**31 - 1, 2**31, 2**40, 2**62, 0)
DIM_PLACES = ("reshape-shape", "output", "initializer", "value-info", "input")


@dataclass(frozen=True)
class HugeDimsModel:
    """A declared dim set to ``value``: on the input or output, on an initializer (whose bytes stay the same: a
    shape that claims far more weights than the file holds), on an intermediate value_info."""

    place: str
    axis: int
    value: int

    def write(self, box) -> Made:
        model = model_proto()
        graph = model.graph
        if self.place in ("input", "output"):
            value = (graph.input if self.place == "input" else graph.output)[0]
            dims = value.type.tensor_type.shape.dim
            dims[self.axis % len(dims)].dim_value = self.value
        elif self.place == "initializer":
            tensor = graph.initializer[self.axis % len(graph.initializer)]
            tensor.dims[self.axis % len(tensor.dims)] = self.value
        elif self.place == "value-info":
            info = graph.value_info.add()
            info.CopyFrom(onnx.helper.make_tensor_value_info(graph.node[0].output[0], onnx.TensorProto.FLOAT,
                                                             ["B", self.value, 8, 8]))
        else:  # a Reshape whose shape constant asks for the value
            flatten = next(n for n in graph.node if n.op_type == "Flatten")
            shape_name = "hostile_shape"
            graph.initializer.append(onnx.numpy_helper.from_array(np.array([self.value, -1], dtype=np.int64),
                                                                  shape_name))
            flatten.op_type = "Reshape"
            del flatten.attribute[:]
            flatten.input.append(shape_name)
        data = model.SerializeToString()
        return Made(_model_file(box.inputs, data), model_verdict(data), ("model.onnx",))


@dataclass(frozen=True)
class HostileNamesModel:
    """The digits model with its input, output or first node renamed to a hostile string (consistently, so the
    graph stays connected)."""

    place: str
    name: str

    def write(self, box) -> Made:
        model = model_proto()
        graph = model.graph
        if self.place == "node":
            graph.node[0].name = self.name
        else:
            old = (graph.input if self.place == "input" else graph.output)[0].name
            for value in (*graph.input, *graph.output):
                if value.name == old:
                    value.name = self.name
            for node in graph.node:
                node.input[:] = [self.name if n == old else n for n in node.input]
                node.output[:] = [self.name if n == old else n for n in node.output]
        data = model.SerializeToString()
        return Made(_model_file(box.inputs, data), model_verdict(data), ())


def model_recipes(kind: str) -> st.SearchStrategy[Any]:
    size = len(model_bytes())
    return {
        "truncated": st.builds(TruncatedModel, st.integers(0, size - 1)),
        "bit-flipped": st.builds(BitFlippedModel, bit_flips().map(tuple)),
        "foreign-bytes": st.builds(ForeignModel, st.sampled_from(FOREIGN_KINDS), st.binary(min_size=0, max_size=512)),
        "not-a-file": st.builds(NotAModelFile, st.sampled_from(NOT_A_FILE)),
        "external-data": st.builds(ExternalDataModel, st.sampled_from(EXTERNAL_KINDS),
                                   st.sampled_from(["fifo", "file"]), st.integers(0, 2**20)),
        "huge-dims": st.builds(HugeDimsModel, st.sampled_from(DIM_PLACES), st.integers(0, 3),
                               st.sampled_from(HUGE_DIMS)),
        "hostile-names": st.builds(HostileNamesModel, st.sampled_from(["input", "output", "node"]), hostile_text()),
    }[kind]


MODEL_KINDS = ("truncated", "bit-flipped", "foreign-bytes", "not-a-file", "external-data", "huge-dims",
               "hostile-names")


# --- shape profiles --------------------------------------------------------------------------------------------


def profiles_verdict(data: Any) -> str:
    """The documented profile rules (docs/profiles.md), applied to the digits model's input image [B, 1, 8, 8],
    independently of the tool's own code."""
    if not isinstance(data, dict) or set(data) != {"profiles"}:
        return INVALID
    profiles = data["profiles"]
    if not isinstance(profiles, list) or not profiles:
        return INVALID
    names = []
    for profile in profiles:
        if not isinstance(profile, dict) or set(profile) != {"name", "shapes"}:
            return INVALID
        name, shapes = profile["name"], profile["shapes"]
        if not isinstance(name, str) or not name:
            return INVALID
        if not isinstance(shapes, dict) or set(shapes) != {MODEL_INPUT}:  # the one dynamic input, nothing else
            return INVALID
        shape = shapes[MODEL_INPUT]
        if not isinstance(shape, dict) or set(shape) != {"min", "opt", "max"}:
            return INVALID
        lists = [shape["min"], shape["opt"], shape["max"]]
        if not all(isinstance(dims, list) and len(dims) == len(MODEL_DIMS) and all(type(d) is int for d in dims)
                   for dims in lists):
            return INVALID
        for axis, static in enumerate(MODEL_DIMS):
            if isinstance(static, int) and any(dims[axis] != static for dims in lists):
                return INVALID
        if not 1 <= lists[0][0] <= lists[1][0] <= lists[2][0]:
            return INVALID
        if any(d > MAX_PROFILE_DIM for dims in lists for d in dims) or any(
                math.prod(dims) > MAX_PROFILE_VOLUME for dims in lists):
            return INVALID
        names.append(name)
    return VALID if len(set(names)) == len(names) else INVALID


HOSTILE_DIMS = (2**31, -1, -(2**31), 1, 2, 7, 8, 9, 64, 2**31 - 1, 0, 2**32 + 1, 2**40, 2**63 - 1, 2**63, 2**64,
                10**30, 4.0, 1.5, float("nan"), float("inf"), -0.0, True, False, None, "8", "B", [8], {"v": 8}, 1e400)


def yaml_values(depth: int = 3) -> st.SearchStrategy[Any]:
    """Arbitrary YAML-representable data (what a random YAML document parses to)."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=12), st.sampled_from(HOSTILE_DIMS))
    keys = st.one_of(st.sampled_from(["profiles", "name", "shapes", MODEL_INPUT, "min", "opt", "max", "mid"]),
                     st.text(max_size=8), st.integers(-2, 2), st.booleans(), st.none())
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(keys, inner, max_size=4)),
                        max_leaves=12)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=2**20)


@dataclass(frozen=True)
class ProfilesDocument:
    """A profiles file holding ``data`` as YAML, with ``edits`` applied to the valid digits profiles when
    ``data`` is None."""

    data: Any = None
    edits: tuple[tuple[str, Any], ...] | None = None
    """Edits of the valid digits profiles; None: the document is ``data`` itself."""

    def content(self) -> Any:
        if self.edits is None:
            return self.data
        data = valid_profiles()
        for edit in self.edits:
            with contextlib.suppress(KeyError, IndexError, TypeError, AttributeError):  # it edits what is gone
                data = apply_profile_edit(data, edit)
        return data

    def write(self, box) -> Made:
        text = dump_yaml(self.content())
        path = box.inputs / "profiles.yaml"
        path.write_text(text, encoding="utf-8")
        try:  # the verdict is on what a reader of the file gets back
            verdict = profiles_verdict(yaml.safe_load(text))
        except (yaml.YAMLError, ValueError):
            verdict = INVALID
        return Made(path, verdict, ("profiles.yaml",))


def apply_profile_edit(data: Any, edit: tuple[str, Any]) -> Any:
    """One edit of a profiles document, addressed by a small path language the strategies draw."""
    what, value = edit
    data = copy.deepcopy(data)
    profiles = data["profiles"]
    if what.startswith("dim:"):  # dim:<profile>:<min|opt|max>:<axis>
        _, index, key, axis = what.split(":")
        profiles[int(index)]["shapes"][MODEL_INPUT][key][int(axis)] = value
    elif what.startswith("shape:"):  # shape:<profile>:<min|opt|max> replaced whole
        _, index, key = what.split(":")
        profiles[int(index)]["shapes"][MODEL_INPUT][key] = value
    elif what.startswith("name:"):
        profiles[int(what.split(":")[1])]["name"] = value
    elif what == "same-names":
        profiles[1]["name"] = profiles[0]["name"]
    elif what == "unknown-shape-key":
        profiles[0]["shapes"][MODEL_INPUT][value] = [1, 1, 8, 8]
    elif what == "unknown-profile-key":
        profiles[0][value] = 1
    elif what == "unknown-top-key":
        data[value] = []
    elif what == "drop-shape-key":
        del profiles[0]["shapes"][MODEL_INPUT][value]
    elif what == "drop-profile-key":
        del profiles[0][value]
    elif what == "rename-input":
        profiles[0]["shapes"][value] = profiles[0]["shapes"].pop(MODEL_INPUT)
    elif what == "extra-input":
        profiles[0]["shapes"][value] = {"min": [1], "opt": [1], "max": [1]}
    elif what == "no-shapes":
        profiles[0]["shapes"] = {}
    elif what == "no-profiles":
        data["profiles"] = []
    elif what == "profiles-value":
        data["profiles"] = value
    elif what == "top-level":
        return value
    elif what == "batch":  # min/opt/max of the batch dim of profile 0 at once
        for key, dim in zip(("min", "opt", "max"), value, strict=True):
            profiles[0]["shapes"][MODEL_INPUT][key][0] = dim
    else:
        raise AssertionError(what)
    return data


def _dim_edits() -> st.SearchStrategy[tuple[str, Any]]:
    place = st.tuples(st.integers(0, 1), st.sampled_from(["min", "opt", "max"]), st.integers(0, 3))
    return st.one_of(
        st.builds(lambda p, v: (f"dim:{p[0]}:{p[1]}:{p[2]}", v), place, st.sampled_from(HOSTILE_DIMS)),
        st.builds(lambda p, v: (f"dim:{p[0]}:{p[1]}:{p[2]}", v), place, st.integers()),
        st.tuples(st.just("batch"), st.tuples(*[st.sampled_from((0, 1, 2, 64, 2**31 - 1, 2**31, 2**62))] * 3)),
        st.builds(lambda i, k, v: (f"shape:{i}:{k}", v), st.integers(0, 1), st.sampled_from(["min", "opt", "max"]),
                  st.one_of(st.lists(st.sampled_from(HOSTILE_DIMS), max_size=6), yaml_values())),
    )


def _name_edits() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.builds(lambda i, v: (f"name:{i}", v), st.integers(0, 1), hostile_text()),
        st.builds(lambda i, v: (f"name:{i}", v), st.integers(0, 1), st.sampled_from([None, 5, 1.5, True, [], {}])),
        st.just(("same-names", None)),
        st.tuples(st.just("rename-input"), hostile_text()),
        st.tuples(st.just("extra-input"), hostile_text()),
    )


def _structure_edits() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("unknown-shape-key"), st.sampled_from(["mid", "MIN", "min "])),
        st.tuples(st.just("unknown-profile-key"), st.sampled_from(["shape", "inputs", "Name"])),
        st.tuples(st.just("unknown-top-key"), st.sampled_from(["profile", "skus", "version"])),
        st.tuples(st.just("drop-shape-key"), st.sampled_from(["min", "opt", "max"])),
        st.tuples(st.just("drop-profile-key"), st.sampled_from(["name", "shapes"])),
        st.just(("no-shapes", None)),
        st.just(("no-profiles", None)),
        st.tuples(st.just("profiles-value"), yaml_values()),
        st.tuples(st.just("top-level"), yaml_values()),
    )


@dataclass(frozen=True)
class ProfilesText:
    """A profiles file whose *text* is hostile: what no data structure dumps (duplicate keys, Python tags,
    nesting beyond any parser's stack, > 16 MiB, bytes that are not UTF-8, alias bombs, several documents)."""

    kind: str
    size: int

    def write(self, box) -> Made:
        text = DIGITS_PROFILES.read_bytes()
        path = box.inputs / "profiles.yaml"
        verdict = INVALID
        if self.kind == "duplicate-key":
            data = text.replace(b"    shapes:", b"    shapes: {}\n    shapes:", 1)
        elif self.kind == "duplicate-input":
            data = text.replace(b"      image:", b"      image: {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], "
                                b"max: [1, 1, 8, 8]}\n      image:", 1)
        elif self.kind == "python-tag":
            data = (b"profiles: !!python/object/apply:os.system ['touch " + str(box.outside / "PWNED").encode()
                    + b"']\n")
        elif self.kind == "python-name":
            data = b"profiles:\n  - name: !!python/name:os.system\n    shapes: {}\n"
        elif self.kind == "flow-nesting":
            depth = 1000 + self.size % 200_000
            data = b"profiles: " + b"[" * depth + b"]" * depth + b"\n"
        elif self.kind == "block-nesting":  # "- - - - x": block sequences nested on one line
            depth = 500 + self.size % 100_000
            data = b"profiles:\n" + b"- " * depth + b"x\n"
        elif self.kind == "giant":
            data = text + b"#" * ((16 << 20) + 1 + self.size % 4096) + b"\n"
        elif self.kind == "giant-line":
            data = b"profiles: [" + b"1, " * ((1 << 20) + self.size % 4096) + b"1]\n"
        elif self.kind == "not-utf8":
            data = text.replace(b"online", b"onl\xffine", 1)
        elif self.kind == "utf16":  # YAML allows UTF-16 with a BOM; refusing anything but UTF-8 is within bounds
            data, verdict = text.decode().encode("utf-16"), AMBIGUOUS
        elif self.kind == "alias-bomb":
            lines = [b"a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
            lines += [b"a%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * 10) + b"]" for i in range(1, 25)]
            lines.append(b"profiles: [{name: x, shapes: {image: {min: *a24, opt: *a24, max: *a24}}}]")
            data = b"\n".join(lines) + b"\n"
        elif self.kind == "merge-bomb":
            data = (b"base: &b {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [8, 1, 8, 8]}\n"
                    b"profiles:\n  - name: m\n    shapes:\n      image: {<<: *b, <<: *b}\n")
        elif self.kind == "two-documents":
            data = text + b"\n---\n" + text
        elif self.kind == "nul-bytes":
            data = text.replace(b"online", b"on\0line", 1)
        elif self.kind == "tabs":
            data = text.replace(b"  - name", b"\t- name", 1)
        elif self.kind == "crlf":  # Windows line endings: still the valid file
            data, verdict = text.replace(b"\n", b"\r\n"), VALID
        elif self.kind == "bom":  # a UTF-8 byte order mark: YAML allows one; refusing it cleanly is within bounds
            data, verdict = b"\xef\xbb\xbf" + text, AMBIGUOUS
        elif self.kind == "empty":
            data = b""
        elif self.kind == "only-comments":
            data = b"# nothing here\n" * (1 + self.size % 100)
        elif self.kind == "huge-int-literal":
            data = text.replace(b"max: [64,", b"max: [" + b"9" * (1000 + self.size % 100_000) + b",", 1)
        elif self.kind == "directory":
            path.mkdir()
            return Made(path, INVALID, ("profiles.yaml",))
        elif self.kind == "missing":
            return Made(path, INVALID, ("profiles.yaml",))
        elif self.kind == "dev-zero":
            path.symlink_to("/dev/zero")
            return Made(path, INVALID, ("profiles.yaml",))
        else:
            raise AssertionError(self.kind)
        path.write_bytes(data)
        return Made(path, verdict, ("profiles.yaml",))


PROFILE_TEXT_KINDS = ("duplicate-key", "duplicate-input", "python-tag", "python-name", "flow-nesting",
                      "block-nesting", "giant", "giant-line", "not-utf8", "utf16", "alias-bomb", "merge-bomb",
                      "two-documents", "nul-bytes", "tabs", "crlf", "bom", "empty", "only-comments",
                      "huge-int-literal", "directory", "missing", "dev-zero")


def profile_recipes(kind: str) -> st.SearchStrategy[Any]:
    def edits(strategy):
        return st.builds(ProfilesDocument, st.none(), st.lists(strategy, min_size=1, max_size=3).map(tuple))

    def document(data):
        return st.builds(ProfilesDocument, data, st.none())

    return {
        "random-document": document(yaml_values()),
        "random-under-profiles": document(st.builds(lambda v: {"profiles": v}, yaml_values())),
        "dims": edits(_dim_edits()),
        "names": edits(_name_edits()),
        "structure": edits(_structure_edits()),
        "text": st.builds(ProfilesText, st.sampled_from(PROFILE_TEXT_KINDS), st.integers(0, 2**20)),
    }[kind]


PROFILE_KINDS = ("random-document", "random-under-profiles", "dims", "names", "structure", "text")


# --- npz data --------------------------------------------------------------------------------------------------


def npz_bytes(arrays: dict[str, Any], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def npy_bytes(array: np.ndarray, header: dict[str, Any] | None = None) -> bytes:
    """An .npy member; ``header`` overrides the header dict written (shape/descr/fortran_order), not the data."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    if header is None:
        return buffer.getvalue()
    data = buffer.getvalue()
    if (data[6], data[7]) == (1, 0):
        body = data[10 + struct.unpack("<H", data[8:10])[0]:]
    else:
        body = data[12 + struct.unpack("<I", data[8:12])[0]:]
    fields = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False, "shape": array.shape}
    fields.update(header)
    text = repr(fields).encode("latin1")
    pad = (-(10 + len(text) + 1)) % 64
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text) + pad + 1) + text + b" " * pad + b"\n" + body


def zip_members(members: dict[str, bytes], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npz_file(box, data: bytes, name: str = "data.npz") -> Path:
    path = box.inputs / name
    path.write_bytes(data)
    return path


DTYPES = (">f4", "float16", "int32", "int64", "uint8", "bool", "complex64", "<U3", "datetime64[s]", "object",
          "structured", "float64", "float32")
"""``>f4`` is big-endian float32 (its dtype is not the model's float32 for numpy equality: a documented mismatch);
``float32`` is the valid control."""


@dataclass(frozen=True)
class NpzArrays:
    """An .npz of arrays derived from the digits samples: a dtype, a shape, a sample count, values, names and
    memory order changed."""

    dtype: str = "float32"
    shape: tuple[int, ...] | None = None
    count: int = SAMPLES
    poison: tuple[tuple[int, str], ...] = ()
    """(flat index, value) with value nan, inf, -inf, huge or tiny."""
    names: tuple[str, ...] = (MODEL_INPUT,)
    fortran: bool = False
    compressed: bool = False

    def arrays(self) -> dict[str, np.ndarray]:
        base = digits_samples(max(self.count, 1))[: self.count]
        if self.shape is not None:
            base = np.resize(base, self.shape)
        for index, value in self.poison:
            if base.size:
                base.reshape(-1)[index % base.size] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf,
                                                       "huge": 3e38, "tiny": 1e-45}[value]
        if self.dtype == "object":
            array: np.ndarray = np.empty(base.shape, dtype=object)
            array[...] = 0.5
        elif self.dtype == "structured":
            array = np.zeros(base.shape, dtype=[("x", "<f4"), ("y", "<f4")])
        elif self.dtype.startswith("datetime64"):
            array = np.zeros(base.shape, dtype=self.dtype)
        elif self.dtype == "<U3":
            array = base.astype("<U3")
        else:
            array = base.astype(self.dtype)
        if self.fortran:
            array = np.asfortranarray(array)
        return {name: array for name in self.names}

    def verdict(self) -> str:
        shape = self.shape if self.shape is not None else (self.count, 1, 8, 8)
        if self.names != (MODEL_INPUT,) or self.dtype != "float32" or len(shape) != 4 or tuple(shape[1:]) != (1, 8, 8):
            return INVALID
        if shape[0] < 2 or any(value in ("nan", "inf", "-inf") for _, value in self.poison):
            return INVALID
        if any(value == "huge" for _, value in self.poison) or (self.fortran and math.prod(shape[1:]) > 1):
            return AMBIGUOUS  # activations that overflow; a Fortran-ordered array numpy.savez wrote
        return VALID

    def write(self, box) -> Made:
        arrays = self.arrays()
        return Made(_npz_file(box, npz_bytes(arrays, self.compressed)), self.verdict(), ("data.npz",))


@dataclass(frozen=True)
class NpzHeader:
    """A consistent zip whose .npy header lies: more rows than the data holds, fewer, another dtype, garbage."""

    lie: str
    amount: int
    compressed: bool

    def write(self, box) -> Made:
        array = digits_samples()
        verdict = INVALID
        header: dict[str, Any] | None = None
        raw: bytes | None = None
        if self.lie == "more-rows":
            header = {"shape": (SAMPLES + 1 + self.amount, 1, 8, 8)}
        elif self.lie == "far-more-rows":
            header = {"shape": (10**12 + self.amount, 1, 8, 8)}
        elif self.lie == "fewer-rows":
            header, verdict = {"shape": (2 + self.amount % (SAMPLES - 2), 1, 8, 8)}, AMBIGUOUS
        elif self.lie == "wider-dtype":
            header = {"descr": "<f8"}
        elif self.lie == "negative-dim":
            header = {"shape": (-SAMPLES, 1, 8, 8)}
        elif self.lie == "huge-inner-dims":
            header = {"shape": (SAMPLES, 2**40, 8, 8)}
        elif self.lie == "bad-descr":
            header = {"descr": "not-a-dtype"}
        elif self.lie == "pickle-descr":
            header = {"descr": "|O"}
        elif self.lie == "not-a-dict":
            raw = b"\x93NUMPY\x01\x00" + struct.pack("<H", 54) + b"[1, 2, 3]".ljust(53) + b"\n"
        elif self.lie == "code-in-header":
            raw = (b"\x93NUMPY\x01\x00" + struct.pack("<H", 118)
                   + b"__import__('os').system('touch PWNED')".ljust(117) + b"\n")
        elif self.lie == "bad-magic":
            raw = b"\x93NUMPZ\x01\x00" + npy_bytes(array)[8:]
        elif self.lie == "version-9":
            raw = b"\x93NUMPY\x09\x09" + npy_bytes(array)[8:]
        elif self.lie == "header-length-huge":
            raw = b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1) + b"{}"
        else:
            raise AssertionError(self.lie)
        member = raw if raw is not None else npy_bytes(array, header)
        data = zip_members({f"{MODEL_INPUT}.npy": member}, self.compressed)
        return Made(_npz_file(box, data), verdict, ("data.npz",))


HEADER_LIES = ("wider-dtype", "far-more-rows", "fewer-rows", "more-rows", "negative-dim", "huge-inner-dims",
               "bad-descr", "pickle-descr", "not-a-dict", "code-in-header", "bad-magic", "version-9",
               "header-length-huge")


@dataclass(frozen=True)
class NpzDamage:
    """A valid .npz damaged as bytes: a CRC that no longer matches (data flipped, or the CRC field), a deflate
    stream corrupted, the archive cut short, garbage before or after."""

    damage: str
    where: int
    compressed: bool

    def write(self, box) -> Made:
        data = bytearray(npz_bytes({MODEL_INPUT: digits_samples()}, self.compressed))
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
            info = archive.infolist()[0]
        name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
        start = info.header_offset + 30 + name_length + extra_length
        verdict = INVALID
        if self.damage == "data-bytes":  # CRC mismatch: the bytes changed, the recorded CRC did not
            position = start + 128 + self.where % (info.compress_size - 128)
            data[position] ^= 0x5A
        elif self.damage == "crc-field":
            for offset in (info.header_offset + 14, _central_offset(bytes(data)) + 16):
                data[offset] ^= 0xFF
        elif self.damage == "deflate-stream":
            for step in range(4):
                data[start + (self.where + 97 * step) % info.compress_size] ^= 0xA5
        elif self.damage == "truncated":
            data = data[: self.where % len(data)]
        elif self.damage == "size-field":  # the local header's uncompressed size says 4 GiB
            data[info.header_offset + 22: info.header_offset + 26] = b"\xff\xff\xff\xfe"
            central = _central_offset(bytes(data))
            data[central + 24: central + 28] = b"\xff\xff\xff\xfe"
        elif self.damage == "central-directory-cut":
            data = data[: _central_offset(bytes(data)) + 10]
        elif self.damage == "eocd-offset":  # the end record points past the file
            data[-6:-2] = struct.pack("<I", 2**31)
        elif self.damage == "prefix-garbage":  # a self-extractor style prefix: zip readers accept it
            data = bytearray(b"#!garbage\n" * (1 + self.where % 20)) + data
            verdict = AMBIGUOUS
        elif self.damage == "suffix-garbage":
            data += b"\0garbage" * (1 + self.where % 20)
            verdict = AMBIGUOUS
        else:
            raise AssertionError(self.damage)
        return Made(_npz_file(box, bytes(data)), verdict, ("data.npz",))


def _central_offset(data: bytes) -> int:
    return data.rindex(b"PK\x01\x02")


NPZ_DAMAGE = ("crc-field", "data-bytes", "deflate-stream", "truncated", "size-field", "central-directory-cut",
              "eocd-offset", "prefix-garbage", "suffix-garbage")


class _Boom:
    """Pickled, it runs ``touch <path>`` when loaded: a member that must never be unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@dataclass(frozen=True)
class NpzOddMembers:
    """Members that are not plain arrays: pickles (one that runs a command when loaded), an .npy that is a raw
    pickle, a scalar, no members at all, a plain .npy under an .npz name, odd member paths."""

    kind: str
    compressed: bool

    def write(self, box) -> Made:
        good = npy_bytes(digits_samples())
        name = "data.npz"
        verdict = INVALID
        if self.kind == "pickled-object-array":
            array = np.empty(2, dtype=object)
            array[0], array[1] = _Boom(str(box.outside / "PWNED")), [1, 2]
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(array)}, self.compressed)
        elif self.kind == "raw-pickle-member":
            data = zip_members({f"{MODEL_INPUT}.npy": pickle.dumps(_Boom(str(box.outside / "PWNED")))},
                               self.compressed)
        elif self.kind == "scalar":
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(np.float32(1.0).reshape(()))}, self.compressed)
        elif self.kind == "no-members":
            data = zip_members({}, self.compressed)
        elif self.kind == "only-other-files":
            data = zip_members({"README.txt": b"hello", f"{MODEL_INPUT}.pkl": pickle.dumps([1])}, self.compressed)
        elif self.kind == "plain-npy":
            data = good
        elif self.kind == "nested-member":
            data = zip_members({f"sub/{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "traversal-member":
            data = zip_members({f"../{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "duplicate-member":
            data = zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed)
            data = _duplicate(data, npy_bytes(digits_samples(3)), self.compressed)
            verdict = AMBIGUOUS
        elif self.kind == "directory":
            path = box.inputs / name
            path.mkdir()
            return Made(path, INVALID, (name,))
        elif self.kind == "fifo":
            return Made(make_fifo(box.inputs / name), INVALID, (name,))
        elif self.kind == "no-suffix":
            name, data = "data", zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "upper-suffix":
            name, data, verdict = "data.NPZ", zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed), VALID
        elif self.kind == "extra-array":
            data = zip_members({f"{MODEL_INPUT}.npy": good, "mask.npy": good}, self.compressed)
        elif self.kind == "zero-samples":
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(digits_samples()[:0])}, self.compressed)
        else:
            raise AssertionError(self.kind)
        return Made(_npz_file(box, data, name), verdict, (name,))


def _duplicate(data: bytes, other: bytes, compressed: bool) -> bytes:
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            archive.writestr(f"{MODEL_INPUT}.npy", other)
    return buffer.getvalue()


ODD_MEMBERS = ("traversal-member", "raw-pickle-member", "scalar", "no-members", "only-other-files", "plain-npy",
               "nested-member", "pickled-object-array", "duplicate-member", "directory", "fifo", "no-suffix",
               "upper-suffix", "extra-array", "zero-samples")

ARRAY_SHAPES = ((SAMPLES, 8, 8, 1), (SAMPLES, 1, 8, 8, 1), (SAMPLES, 3, 8, 8), (SAMPLES, 1, 8, 9), (SAMPLES, 64),
                (SAMPLES,), (SAMPLES, 1, 0, 8), (SAMPLES, 1, 8), (3, 1, 8, 8))


def npz_recipes(kind: str) -> st.SearchStrategy[Any]:
    compressed = st.booleans()
    return {
        "dtype": st.builds(NpzArrays, dtype=st.sampled_from(DTYPES), compressed=compressed),
        "shape": st.builds(NpzArrays, shape=st.sampled_from(ARRAY_SHAPES), compressed=compressed),
        "count": st.builds(NpzArrays, count=st.sampled_from([1, 0, 2, 3, SAMPLES]), compressed=compressed),
        "values": st.builds(NpzArrays, poison=st.lists(st.tuples(st.integers(0, 2**20), st.sampled_from(
            ["nan", "inf", "-inf", "huge", "tiny"])), min_size=1, max_size=3).map(tuple), compressed=compressed),
        "names": st.builds(NpzArrays, names=st.sampled_from([("",), ("img",), (MODEL_INPUT, "extra"), ("IMAGE",),
                                                             (MODEL_INPUT + " ",), ("imagé",), ("a/b",)]),
                           compressed=compressed),
        "fortran": st.builds(NpzArrays, fortran=st.just(True), compressed=compressed),
        "header-lies": st.builds(NpzHeader, st.sampled_from(HEADER_LIES), st.integers(0, 2**16), compressed),
        "zip-damage": st.builds(NpzDamage, st.sampled_from(NPZ_DAMAGE), st.integers(0, 2**20), compressed),
        "odd-members": st.builds(NpzOddMembers, st.sampled_from(ODD_MEMBERS), compressed),
    }[kind]


NPZ_KINDS = ("dtype", "shape", "count", "values", "names", "fortran", "header-lies", "zip-damage", "odd-members")


# --- image folders ---------------------------------------------------------------------------------------------


def png_bytes(width: int, height: int, pixels: bytes, bit_depth: int = 8, color_type: int = 0,
              compress: bool = True) -> bytes:
    """A PNG written by hand: the header may declare any size, whatever the data holds."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    data = zlib.compress(pixels) if compress else pixels
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def bmp_header_only(width: int, height: int) -> bytes:
    """A BMP header declaring width x height 8-bit pixels, with (almost) no pixel data."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 8, 0, 0, 2835, 2835, 256, 0)
    palette = b"".join(bytes((i, i, i, 0)) for i in range(256))
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + 64, 0, 0, offset) + info + palette + b"\0" * 64


def gif_header_only(width: int, height: int) -> bytes:
    return (b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0)
            + b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x08\x02\x4c\x01\x00;")


def digit_png(index: int, mode: str = "L", size: tuple[int, int] = (8, 8), fmt: str = "PNG") -> bytes:
    """Digit sample ``index`` as an image file of the given mode, size and format."""
    from PIL import Image

    pixels = (digits_samples()[index % SAMPLES, 0] * 255).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(pixels).resize(size)
    if mode == "I;16":
        image = Image.fromarray((np.asarray(image, dtype=np.uint16) * 257).astype("<u2"))
    elif mode != "L":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


VALID_PREPROCESS: dict[str, Any] = {"input": MODEL_INPUT, "layout": "NCHW", "color": "L", "scale": 255.0,
                                    "mean": [0.0], "std": [1.0]}
"""What feeds the digits CNN from grayscale images (its fixed 8 x 8 is the default size)."""


def preprocess_verdict(data: Any) -> str:
    """The documented preprocess.yaml rules (docs/calibrate.md) against the digits CNN (one input, [B, 1, 8, 8]),
    for values whose meaning is clear (no numeric strings that a lenient reader might coerce)."""
    if data is None:
        data = {}
    if not isinstance(data, dict) or not set(data) <= set(VALID_PREPROCESS) | {"size"}:
        return INVALID
    merged = {"layout": "NCHW", "color": "RGB", "scale": 255.0, "mean": [0.0], "std": [1.0], **data}

    def number(value: Any) -> bool:
        return type(value) in (int, float) and math.isfinite(value)

    if merged.get("input") not in (None, MODEL_INPUT):
        return INVALID
    size = merged.get("size")
    if size is not None and (not isinstance(size, list) or [type(v) for v in size] != [int, int] or size != [8, 8]):
        return INVALID  # any other size makes images the model cannot take
    if merged["layout"] != "NCHW" or merged["color"] != "L":
        return INVALID  # NHWC or RGB: the wrong axis sizes for [B, 1, 8, 8]
    if not number(merged["scale"]) or merged["scale"] <= 0:
        return INVALID
    for key in ("mean", "std"):
        values = merged[key]
        if not isinstance(values, list) or len(values) != 1 or not all(number(v) for v in values):
            return INVALID  # non-finite constants poison every pixel, as NaN data would
    if merged["std"][0] == 0:
        return INVALID
    return VALID


PREPROCESS_VALUES: dict[str, tuple[Any, ...]] = {
    "size": ([1, 10**12], [100000, 100000], [2**31, 2**31], [10**12, 1], [8, 8], [0, 8], [-8, 8], [8],
             [8, 8, 8], [16, 16], [1, 1], "8x8", None, [8.5, 8], [[8], [8]], {"h": 8}),
    "layout": ("NHWC", "NCHW", "CHW", "nchw", "", None, 4),
    "color": ("RGB", "L", "CMYK", "l", "", None, ["L"]),
    "scale": (float("nan"), 16, 1e-30, 0, -1, 255.0, float("inf"), "x", None, [255]),
    "mean": ([float("inf")], [0.5], [0.0, 0.0], [], [float("nan")], [0.0], 0.5, ["x"], None, [[0.0]]),
    "std": ([0], [-1.0], [1.0], [0.0, 1.0], [float("nan")], [float("inf")], [1e-30], 1.0, None),
    "input": ("image\nerror: forged", "nope", "", 5, None, MODEL_INPUT, "\x1b[2J"),
}


@dataclass(frozen=True)
class ImageFolder:
    """A folder of digit images with a preprocess.yaml: ``preprocess`` overrides fields (a None value drops the
    field), ``images`` says what the images are, ``damage`` what happens to one of them."""

    preprocess: tuple[tuple[str, Any], ...] = ()
    spec: str = "yaml"
    """``yaml`` (the fields), or a hostile whole file: ``missing``, ``directory``, ``not-a-mapping``, ``broken``,
    ``python-tag``, ``empty``, ``unknown-key``."""
    count: int = 4
    modes: tuple[str, ...] = ("L",)
    damage: str | None = None
    where: int = 0

    def write(self, box) -> Made:
        folder = box.inputs / "images"
        folder.mkdir()
        verdict = VALID
        names = ["images", "preprocess.yaml"]
        for index in range(self.count):
            mode = self.modes[index % len(self.modes)]
            fmt, suffix = {"CMYK": ("JPEG", ".jpg"), "F": ("TIFF", ".tif"), "I": ("TIFF", ".tiff"),
                           "P": ("GIF", ".gif"), "1": ("BMP", ".bmp"), "RGBA": ("WEBP", ".webp")}.get(
                mode, ("PNG", ".png"))
            sub = folder / ("nested" if index % 3 == 2 else "")
            sub.mkdir(exist_ok=True)
            size = (8, 8) if index % 2 == 0 else (5 + index, 12)
            (sub / f"{index:03d}{suffix.upper() if index == 1 else suffix}").write_bytes(
                digit_png(index, mode, size, fmt))
        if self.count < 2:
            verdict = INVALID  # calibration needs at least 2 samples
        if self.damage is not None:
            target = folder / "000.png"
            names.append(target.name)
            verdict = _damage_image(target, self.damage, self.where, verdict)
        data = dict(VALID_PREPROCESS)
        for key, value in self.preprocess:
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        spec = folder / "preprocess.yaml"
        if self.spec == "yaml":
            spec.write_text(dump_yaml(data), encoding="utf-8")
            if preprocess_verdict(data) == INVALID:
                verdict = INVALID
        else:
            verdict = INVALID
            text = {"not-a-mapping": "- color: L\n", "broken": "color: [L\n", "empty": "",
                    "python-tag": "color: !!python/object/apply:os.system ['true']\n",
                    "unknown-key": dump_yaml({**data, "resize": "bicubic"}),
                    "not-utf8": "color: L\nscale: 255\n# \udcff\n"}.get(self.spec)
            if self.spec == "directory":
                spec.mkdir()
            elif self.spec == "fifo":
                make_fifo(spec)
            elif text is not None:
                spec.write_bytes(text.encode("utf-8", "surrogateescape"))
            elif self.spec != "missing":
                raise AssertionError(self.spec)
        return Made(folder, verdict, tuple(names))


def _damage_image(path: Path, damage: str, where: int, verdict: str) -> str:
    data = path.read_bytes() if path.exists() else digit_png(0)
    if damage == "zero-bytes":
        path.write_bytes(b"")
    elif damage == "random-bytes":
        path.write_bytes(os.urandom(16) + bytes(range(256)) * (1 + where % 8))
    elif damage == "text":
        path.write_text("not an image\n")
    elif damage == "truncated":
        path.write_bytes(data[: 8 + where % max(1, len(data) - 8)])
        return _decodes(path, verdict)
    elif damage == "bit-flipped":
        path.write_bytes(flip_bits(data, [(8 + where, where % 8), (where * 7 + 33, (where + 3) % 8)]))
        return _decodes(path, verdict)
    elif damage.startswith("bomb-"):  # bomb-<format>-<width>x<height>: a header declaring a huge image
        fmt, dims = damage.split("-")[1:]
        width, height = map(int, dims.split("x"))
        path = path.with_suffix("." + fmt)
        path.write_bytes({"png": lambda: png_bytes(width, height, b"\0" * 64),
                          "bmp": lambda: bmp_header_only(width, height),
                          "gif": lambda: gif_header_only(width, height)}[fmt]())
    elif damage == "png-bad-crc":
        mutable = bytearray(data)
        mutable[29] ^= 0xFF  # inside the IHDR chunk's CRC
        path.write_bytes(bytes(mutable))
    elif damage == "wrong-suffix":  # a JPEG named .png: the content decides, a valid image
        path.write_bytes(digit_png(0, "L", (8, 8), "JPEG"))
        return verdict
    else:
        raise AssertionError(damage)
    return INVALID


def _decodes(path: Path, verdict: str) -> str:
    """The reference decode of one image (PIL, as documented): INVALID when it fails."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                image.convert("L").resize((8, 8))
    except Exception:
        return INVALID
    return verdict


IMAGE_DAMAGE = ("truncated", "random-bytes", "text", "zero-bytes", "bit-flipped", "png-bad-crc", "wrong-suffix",
                "bomb-png-100000x100000", "bomb-png-30000x30000", "bomb-png-12000x12000", "bomb-png-65535x1",
                "bomb-png-1x2147483647", "bomb-bmp-100000x100000", "bomb-bmp-12000x12000", "bomb-gif-65535x65535")
IMAGE_MODES = ("CMYK", "RGB", "RGBA", "P", "1", "I;16", "I", "F", "L", "LA")
SPEC_KINDS = ("fifo", "directory", "missing", "not-a-mapping", "broken", "python-tag", "empty", "unknown-key",
              "not-utf8")


def image_recipes(kind: str) -> st.SearchStrategy[Any]:
    def fields(keys: tuple[str, ...]) -> st.SearchStrategy[tuple[tuple[str, Any], ...]]:
        pair = st.sampled_from(keys).flatmap(lambda key: st.tuples(st.just(key),
                                                                   st.sampled_from(PREPROCESS_VALUES[key])))
        return st.lists(pair, min_size=1, max_size=2, unique_by=lambda p: p[0]).map(tuple)

    return {
        "damaged-image": st.builds(ImageFolder, damage=st.sampled_from(IMAGE_DAMAGE), where=st.integers(0, 2**16)),
        "resize": st.builds(ImageFolder, preprocess=fields(("size",))),
        "preprocess-fields": st.builds(ImageFolder, preprocess=fields(tuple(k for k in PREPROCESS_VALUES
                                                                            if k != "size"))),
        "preprocess-file": st.builds(ImageFolder, spec=st.sampled_from(SPEC_KINDS)),
        "counts-and-modes": st.builds(ImageFolder, count=st.sampled_from([5, 1, 0, 2]),
                                      modes=st.lists(st.sampled_from(IMAGE_MODES), min_size=1, max_size=3).map(tuple)),
    }[kind]


IMAGE_KINDS = ("damaged-image", "resize", "preprocess-fields", "preprocess-file", "counts-and-modes")


# --- calibration folders ---------------------------------------------------------------------------------------


def _record(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "calibration.json").read_text())


def _save_record(folder: Path, record: Any) -> None:
    (folder / "calibration.json").write_text(json.dumps(record, indent=2))


def _resign(folder: Path, name: str) -> None:
    import hashlib

    record = _record(folder)
    record["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    _save_record(folder, record)


RECORD_FIELD_TYPES: dict[str, str] = {
    "format_version": "int", "precision": "str", "method": "str?", "model": "str", "model_sha256": "str",
    "data": "str", "data_kind": "str", "data_sha256": "str", "samples": "int", "holdout_samples": "int",
    "batch_size": "int", "seed": "int", "options": "dict", "versions": "dict", "cache_key": "str",
    "ranges": "dict", "trt_cache_header": "str?", "files": "dict", "out": "str", "seconds": "float",
}
"""calibration.json's fields (docs/formats.md) and their JSON types; ``?`` marks the nullable ones."""

WRONG_VALUES: dict[str, tuple[Any, ...]] = {
    "int": ([], {}, "abc", [1], {"v": 1}, 1.5),
    "str": ([], {}, 5, 1.5, True, ["model.onnx"]),
    "dict": ([], "x", 5, [["k", "v"]], True),
    "float": ([], {}, "fast", [1.0]),
}
"""Values of the wrong JSON type for a field of each type, none of which a lenient reader would coerce (no
numeric strings, no null)."""


@dataclass(frozen=True)
class CalibrationFolder:
    """A copy of the session's valid int8 calibration folder, then one thing done to it."""

    kind: str
    detail: Any = None
    where: int = 0

    def write(self, box, source: Path) -> Made:
        import shutil

        folder = box.inputs / "calibration"
        shutil.copytree(source, folder, symlinks=True)
        verdict = INVALID
        args: tuple[str, ...] = ()
        names: tuple[str, ...] = ("calibration",)
        model = folder / "model.onnx"
        if self.kind == "intact":
            verdict = VALID
        elif self.kind == "record-bytes":
            data = {"missing": None, "empty": b"", "random": bytes(range(256)) * 4, "truncated":
                    (folder / "calibration.json").read_bytes()[: 10 + self.where % 400], "array": b"[]",
                    "null": b"null", "string": b'"calibration"', "deep": b"[" * 100_000 + b"]" * 100_000,
                    "deep-object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nan-literal": None,
                    "utf16": json.dumps(_record(folder)).encode("utf-16"),
                    "huge-number": None, "giant": None}[self.detail]
            record = (folder / "calibration.json")
            if self.detail == "missing":
                record.unlink()
            elif self.detail == "nan-literal":  # Python's json writes NaN: not JSON, but a float to a lenient reader
                text = record.read_text()
                record.write_text(text.replace('"seconds": ', '"seconds": NaN, "_": ', 1))
                verdict = AMBIGUOUS
            elif self.detail == "huge-number":
                text = record.read_text()
                record.write_text(text.replace('"samples": ', '"samples": 1' + "0" * 5000 + ', "_": ', 1))
            elif self.detail == "giant":
                with open(record, "ab") as handle:
                    handle.truncate((64 << 20) + 1 + self.where % 1000)
            else:
                record.write_bytes(data)
            names = ("calibration.json", "calibration")
        elif self.kind == "field-type":
            key, wrong = self.detail
            record = _record(folder)
            record[key] = wrong
            _save_record(folder, record)
            names = ("calibration.json",)
        elif self.kind == "field-missing":
            record = _record(folder)
            del record[self.detail]
            _save_record(folder, record)
            names = ("calibration.json",)
        elif self.kind == "field-unknown":
            record = _record(folder)
            record[self.detail] = {"hostile": True}
            _save_record(folder, record)
            verdict = AMBIGUOUS
        elif self.kind == "format-version":
            record = _record(folder)
            record["format_version"] = self.detail
            _save_record(folder, record)
            names = ("calibration.json",)
            if self.detail == "2":
                verdict = AMBIGUOUS  # a JSON reader may take the string "2" for the number
        elif self.kind == "precision":  # the record says one precision; the build asks for int8
            record = _record(folder)
            record["precision"] = self.detail
            _save_record(folder, record)
            names = ("calibration.json",)
        elif self.kind == "asked-precision":  # the int8 folder, asked for another calibrated precision
            args = ("--precision", self.detail)
            names = ("calibration.json", "calibration")
        elif self.kind == "model-sha256":
            record = _record(folder)
            record["model_sha256"] = self.detail
            _save_record(folder, record)
            names = ("calibration.json",)
        elif self.kind == "files-sha256":
            record = _record(folder)
            record["files"]["model.onnx"] = self.detail
            _save_record(folder, record)
            names = ("model.onnx", "calibration.json")
        elif self.kind == "files-list":
            record = _record(folder)
            record["files"] = {"nothing": {}, "no-model": {k: v for k, v in record["files"].items()
                                                           if k != "model.onnx"},
                               "traversal": {**record["files"], "../../outside/x": "0" * 64}}[self.detail]
            if self.detail == "traversal":
                verdict = AMBIGUOUS
            _save_record(folder, record)
            names = ("calibration.json", "model.onnx")
        elif self.kind == "model-file":
            outside = box.outside / "model.onnx"
            if self.detail == "missing":
                model.unlink()
            elif self.detail == "directory":
                model.unlink()
                model.mkdir()
            elif self.detail == "fifo":
                model.unlink()
                make_fifo(model)
            elif self.detail == "symlink-out":
                model.rename(outside)
                model.symlink_to(outside)
            elif self.detail == "symlink-out-fifo":
                model.unlink()
                make_fifo(outside)
                model.symlink_to(outside)
            elif self.detail == "dangling":
                model.unlink()
                model.symlink_to(folder / "gone.onnx")
            elif self.detail == "hardlink-out":  # the same inode as a file outside: its bytes still match
                model.rename(outside)
                os.link(outside, model)
                verdict = AMBIGUOUS
            names = ("model.onnx", "calibration")
        elif self.kind == "record-link":
            record = folder / "calibration.json"
            target = box.outside / "calibration.json" if self.detail == "out" else folder / "real.json"
            record.rename(target)
            record.symlink_to(target)
            names = ("calibration.json",)
        elif self.kind == "not-a-folder":
            import shutil as _shutil

            _shutil.rmtree(folder)
            if self.detail == "file":
                folder.write_bytes(b"{}")
            elif self.detail == "fifo":
                make_fifo(folder)
            elif self.detail == "link-out":
                _shutil.copytree(source, box.outside / "calibration", symlinks=True)
                folder.symlink_to(box.outside / "calibration")
                verdict = VALID  # the folder itself may be a link: every file resolves inside its target
        elif self.kind == "extra-files":
            if self.detail == "notes":
                (folder / "notes.txt").write_text("extra\n")
                verdict = VALID
            elif self.detail == "subfolder":
                (folder / "old").mkdir()
                (folder / "old" / "model.onnx").write_bytes(b"junk")
                verdict = VALID
            elif self.detail == "stray-external-data":  # a model.onnx.data that model.onnx does not reference
                (folder / "model.onnx.data").write_bytes(b"\0" * 1024)
                verdict = AMBIGUOUS
            elif self.detail == "link-out":  # a stray link the build never reads: refusing it is within bounds
                (box.outside / "secret").write_text("secret\n")
                (folder / "secret").symlink_to(box.outside / "secret")
                verdict = AMBIGUOUS
        elif self.kind in ("damaged-model", "damaged-model-resigned"):
            data = model.read_bytes()
            how, amount = self.detail
            if how == "truncated":
                damaged = data[: amount % len(data)]
            elif how == "bit-flipped":
                damaged = flip_bits(data, [(amount, amount % 8), (amount * 31 + 7, (amount + 5) % 8)])
            else:  # another model entirely: the FP32 source
                damaged = model_bytes()
            model.write_bytes(damaged)
            if self.kind == "damaged-model-resigned":
                _resign(folder, "model.onnx")
                verdict = RESIGNED if model_verdict(damaged) != UNREADABLE else INVALID
            names = ("model.onnx", "calibration")
        elif self.kind == "damaged-other-file":  # files the build does not read; the record no longer matches them
            target = folder / self.detail
            target.write_bytes(b"damaged\n")
            verdict = AMBIGUOUS
        else:
            raise AssertionError(self.kind)
        return Made(folder, verdict, names, args)


def _field_type_cases() -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(sorted(RECORD_FIELD_TYPES)).flatmap(
        lambda key: st.tuples(st.just(key), st.sampled_from(WRONG_VALUES[RECORD_FIELD_TYPES[key].rstrip("?")])))


def calibration_recipes(kind: str) -> st.SearchStrategy[CalibrationFolder]:
    build = functools.partial(st.builds, CalibrationFolder, st.just(kind))
    return {
        "intact": build(),
        "record-bytes": build(st.sampled_from(["deep-object", "empty", "random", "truncated", "array", "null", "string",
                                               "deep", "missing", "nan-literal", "utf16", "huge-number",
                                               "giant"]), st.integers(0, 2**16)),
        "field-type": build(_field_type_cases()),
        "field-missing": build(st.sampled_from(sorted(RECORD_FIELD_TYPES))),
        "field-unknown": build(st.sampled_from(["extra", "__class__", "report", ""])),
        "format-version": build(st.sampled_from([2**64, 1, 3, -1, 0, 2.5, "2", None])),
        "precision": build(st.sampled_from(["int8\n", "fp16", "fp32", "INT8", "int4", "", "fp8"])),
        "asked-precision": build(st.sampled_from(["fp8"])),
        "model-sha256": build(st.sampled_from(["0" * 64, "", "z" * 64, "57c4" * 16])),
        "files-sha256": build(st.sampled_from(["0" * 64, "", "../../etc/passwd", "A" * 64])),
        "files-list": build(st.sampled_from(["nothing", "no-model", "traversal"])),
        "model-file": build(st.sampled_from(["symlink-out-fifo", "directory", "fifo", "symlink-out", "missing",
                                             "dangling", "hardlink-out"])),
        "record-link": build(st.sampled_from(["out", "inside"])),
        "not-a-folder": build(st.sampled_from(["fifo", "file", "missing", "link-out"])),
        "extra-files": build(st.sampled_from(["stray-external-data", "subfolder", "notes", "link-out"])),
        "damaged-model": build(st.tuples(st.sampled_from(["bit-flipped", "truncated", "fp32-source"]),
                                         st.integers(0, 2**20))),
        "damaged-model-resigned": build(st.tuples(st.sampled_from(["bit-flipped", "truncated", "fp32-source"]),
                                                  st.integers(0, 2**20))),
        "damaged-other-file": build(st.sampled_from(["report.json", "calibration.cache"])),
    }[kind]


CALIBRATION_KINDS = ("intact", "record-bytes", "field-type", "field-missing", "field-unknown", "format-version",
                     "precision", "asked-precision", "model-sha256", "files-sha256", "files-list", "model-file",
                     "record-link", "not-a-folder", "extra-files", "damaged-model", "damaged-model-resigned",
                     "damaged-other-file")


# --- option values ---------------------------------------------------------------------------------------------


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
    for number in sorted({low - 1, low - 2**31, -1, 0, low, *extra_valid, 2**63, 2**64, 10**30,
                          *((high, high + 1, 2 * high) if high is not None else ())}):
        if number < low or (high is not None and number > high):
            verdict = INVALID
        else:
            verdict = AMBIGUOUS if high is None and number > 2**20 else VALID
        values.append((str(number), verdict))
    values += [("x", INVALID), ("", INVALID), ("1.5", INVALID), ("nan", INVALID), ("0x10", INVALID),
               ("1e3", INVALID), ("--json", INVALID)]
    return values


def _float_values(valid, *, extra: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    values = ["nan", "NaN", "inf", "-inf", "-1", "0", "0.5", "1", "1.5", "2", "98", "1e308", "1e-320", "x", "",
              *extra]
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
    "--sku": [("rtx4090", INVALID), ("", INVALID), ("RTX-4090", INVALID), ("rtx-4090\n", INVALID),
              ("rtx\x1b[2J", INVALID), ("rtx-4090\u202e", INVALID), ("h100", ENVIRONMENT), ("a100", ENVIRONMENT),
              ("rtx-3090", VALID), ("rtx-5090", VALID), ("../skus", INVALID), ("*", INVALID)],
    "--precision": [("FP32", INVALID), ("int4", INVALID), ("", INVALID), ("fp32 ", INVALID), ("bf16", INVALID),
                    ("int8", INVALID), ("fp8", INVALID), ("fp16", VALID), ("fp32\x1b[31m", INVALID)],
    "--backend": [("tensorrt-rtx", VALID), ("tensorrt", ENVIRONMENT), ("cuda", INVALID), ("", INVALID),
                  ("TensorRT", INVALID), ("tensorrt-rtx\n", INVALID)],
    "--method": [("minmax", INVALID), ("entropy", INVALID), ("kl", INVALID)],
    "--cache-dir": [("@file", INVALID), ("@under-file", INVALID), ("/dev/null", INVALID), ("@fresh", VALID)],
    "--out": [("@file", INVALID), ("@under-file", INVALID), ("/dev/null", INVALID), ("@fresh", VALID)],
}
"""``compile build``'s options (docs/build.md): int8/fp8 without --calibration or --data, and --method without
--data, are refused; ``@file`` is a path that is a file, ``@under-file`` a path below one."""

CALIBRATE_OPTIONS: dict[str, list[tuple[str, str]]] = {
    "--holdout": [(v, _holdout(v)) for v in ("nan", "inf", "-inf", "-1", "0", "1e-9", "0.5", "0.999999", "1",
                                             "2", "2.5", "23", "24", "1e300", "x")],
    "--percentile": _float_values(_in(50, 100, low_open=True), extra=("50", "50.0001", "99.9", "100", "100.0001")),
    "--samples": _int_values(1, None, extra_valid=(5, 10**6)),
    "--batch-size": _int_values(1, None, extra_valid=(3, 10**6)),
    "--num-bins": [*_int_values(256, 1 << 14, extra_valid=(512,)), ("255", INVALID), (str(10**6), INVALID)],
    "--chunk-mb": _int_values(1, None, extra_valid=(2, 10**6)),
    "--seed": [("-1", INVALID), ("0", VALID), ("7", VALID), (str(2**32), VALID), (str(2**64), AMBIGUOUS),
               (str(2**128), AMBIGUOUS), ("x", INVALID), ("1.5", INVALID)],
    "--min-cosine": _float_values(_gate(-1, 1)),
    "--min-top1": _float_values(_gate(0, 1)),
    "--max-abs-error": _float_values(_gate(0, math.inf)),
    "--method": [("minmax", VALID), ("entropy", VALID), ("percentile", VALID), ("MinMax", INVALID), ("kl", INVALID),
                 ("", INVALID), ("minmax\x1b[2J", INVALID)],
    "--precision": [("int8", VALID), ("fp8", VALID), ("fp16", VALID), ("int4", INVALID), ("FP16", INVALID),
                    ("", INVALID), ("fp32", INVALID)],
    "--out": [("@model-folder", INVALID), ("@model-folder-link", INVALID), ("@model-file", INVALID),
              ("@data-file", INVALID), ("/dev/null", INVALID), ("@under-file", INVALID), ("@fresh", VALID)],
}
"""``compile calibrate``'s options (docs/calibrate.md). Gates take a threshold in their measure's range: a
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
