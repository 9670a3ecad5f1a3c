"""ONNX models: truncated, bit-flipped, foreign bytes, not files, external data, huge dims, hostile names."""

from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import external_data_helper

from tests.hostile.generators.common import (
    AMBIGUOUS,
    CHECKER_REJECTS,
    LOADS,
    UNREADABLE,
    VALID,
    Made,
    bit_flips,
    digits_samples,
    flip_bits,
    hostile_text,
    make_fifo,
    model_bytes,
    model_proto,
)
from tests.hostile.generators.images import png_bytes


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


EXTERNAL_KINDS = (
    "link-loop",
    "dotdot",
    "symlink-out",
    "missing",
    "too-short",
    "directory",
    "nul-in-name",
    "empty-name",
    "negative-offset",
    "huge-length",
    "text-offset",
    "absolute",
    "dotdot-inside",
    "nested-inside",
    "link-inside",
)
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
        onnx.save_model(
            model,
            folder / "model.onnx",
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="weights.bin",
            size_threshold=0,
        )
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
            info.CopyFrom(
                onnx.helper.make_tensor_value_info(
                    graph.node[0].output[0], onnx.TensorProto.FLOAT, ["B", self.value, 8, 8]
                )
            )
        else:  # a Reshape whose shape constant asks for the value
            flatten = next(n for n in graph.node if n.op_type == "Flatten")
            shape_name = "hostile_shape"
            graph.initializer.append(
                onnx.numpy_helper.from_array(np.array([self.value, -1], dtype=np.int64), shape_name)
            )
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


BIG_WEIGHTS = ("features.3.weight", "classifier.weight")
"""The digits model's initializers over STUB_BYTES: those the profile-limit check reads without their values."""


@dataclass(frozen=True)
class DamagedWeightsModel:
    """A big weight's values damaged where only a full parse looks: its raw bytes (``extra`` bytes longer) turned
    into packed float_data whose length is no multiple of 4, which protobuf refuses; the framing of every other
    field stays intact, so the build's skims read the file and only the full parse can refuse it."""

    tensor: str
    extra: int

    def write(self, box) -> Made:
        model = model_proto()
        weight = next(t for t in model.graph.initializer if t.name == self.tensor)
        marker = bytes([0xAB]) * (len(weight.raw_data) + self.extra)
        weight.raw_data = marker
        data = model.SerializeToString()
        at = data.index(marker)
        key = data.rindex(b"\x4a", 0, at)  # raw_data (field 9, length-delimited), then the varint length
        data = data[:key] + b"\x22" + data[key + 1 :]  # float_data (field 4), packed
        return Made(_model_file(box.inputs, data), model_verdict(data), ("model.onnx",))


def model_recipes(kind: str) -> st.SearchStrategy[Any]:
    size = len(model_bytes())
    return {
        "truncated": st.builds(TruncatedModel, st.integers(0, size - 1)),
        "bit-flipped": st.builds(BitFlippedModel, bit_flips().map(tuple)),
        "foreign-bytes": st.builds(ForeignModel, st.sampled_from(FOREIGN_KINDS), st.binary(min_size=0, max_size=512)),
        "not-a-file": st.builds(NotAModelFile, st.sampled_from(NOT_A_FILE)),
        "external-data": st.builds(
            ExternalDataModel, st.sampled_from(EXTERNAL_KINDS), st.sampled_from(["fifo", "file"]), st.integers(0, 2**20)
        ),
        "huge-dims": st.builds(
            HugeDimsModel, st.sampled_from(DIM_PLACES), st.integers(0, 3), st.sampled_from(HUGE_DIMS)
        ),
        "hostile-names": st.builds(HostileNamesModel, st.sampled_from(["input", "output", "node"]), hostile_text()),
        "damaged-weights": st.builds(DamagedWeightsModel, st.sampled_from(BIG_WEIGHTS), st.integers(1, 3)),
    }[kind]


MODEL_KINDS = (
    "truncated",
    "bit-flipped",
    "foreign-bytes",
    "not-a-file",
    "external-data",
    "huge-dims",
    "hostile-names",
    "damaged-weights",
)
