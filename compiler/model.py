"""Safe loading of ONNX models: the first thing every stage does with a model.

The model's protobuf is parsed without its external data; every external-data
reference is validated to stay inside the model's folder before the ONNX checker,
shape inference or TensorRT's parser ever open it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import onnx
from onnx import external_data_helper

from compiler.errors import InvalidInput

PROTOBUF_LIMIT = 2**31 - 1
"""Protobuf cannot parse more than 2 GiB; bigger models keep weights as external data."""


def first_line(message: object) -> str:
    """Library errors are often multi-line dumps; our contract is one line."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(message).__name__


@dataclass(frozen=True)
class OnnxModel:
    """A validated model: its path, its graph (weights left on disk) and the files it uses."""

    path: Path
    proto: onnx.ModelProto = field(repr=False)
    external_files: tuple[Path, ...] = ()

    @cached_property
    def sha256(self) -> str:
        """Hash of the model file and its external data, in a stable order."""
        digest = hashlib.sha256()
        for file in (self.path, *sorted(self.external_files)):
            digest.update(file.name.encode() + b"\0")
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        return digest.hexdigest()

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in (self.path, *self.external_files))


def _external_files(model: onnx.ModelProto, path: Path) -> tuple[Path, ...]:
    """Validate every external-data reference; refuse anything that leaves the model's folder."""
    base = path.parent.resolve()
    files: dict[Path, int] = {}
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        where = f"{path}: tensor '{tensor.name}' external data '{location}'"
        if not location or os.path.isabs(location) or Path(location).drive:
            raise InvalidInput(f"{where} must be a path relative to the model's folder")
        target = (base / location).resolve()
        if not target.is_relative_to(base):
            raise InvalidInput(f"{where} points outside the model's folder {base}; refusing to read it")
        if not target.is_file():
            raise InvalidInput(f"{where} is missing; copy it next to the model")
        size = files.setdefault(target, target.stat().st_size)
        try:
            end = int(info.get("offset", 0)) + int(info.get("length", 0))
        except ValueError:
            raise InvalidInput(f"{where} has a non-numeric offset or length") from None
        if end > size:
            raise InvalidInput(f"{where} needs {end} bytes but the file has {size}; it is truncated")
    return tuple(files)


def load_model(path: str | os.PathLike[str]) -> OnnxModel:
    """Parse, validate and shape-infer an ONNX model; raise InvalidInput naming the problem."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: model file not found")
    if not path.is_file():
        raise InvalidInput(f"{path}: is not a file; pass the .onnx model file")
    size = path.stat().st_size
    if size == 0:
        raise InvalidInput(f"{path}: model file is empty")
    if size > PROTOBUF_LIMIT:
        raise InvalidInput(
            f"{path}: {size / 2**30:.1f} GiB exceeds protobuf's 2 GiB limit; save the weights as external data"
        )
    try:
        proto = onnx.load_model(path, load_external_data=False)
    except Exception as exc:
        raise InvalidInput(f"{path}: not a valid ONNX model ({first_line(exc)})") from None
    if not proto.HasField("graph") or not proto.opset_import or proto.ir_version <= 0:
        raise InvalidInput(f"{path}: not a valid ONNX model (no graph, opset or IR version)")
    external = _external_files(proto, path)
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:
        raise InvalidInput(f"{path}: ONNX checker rejected the model: {first_line(exc)}") from None
    try:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as exc:
        raise InvalidInput(f"{path}: ONNX shape inference failed: {first_line(exc)}") from None
    return OnnxModel(path=path, proto=proto, external_files=external)
