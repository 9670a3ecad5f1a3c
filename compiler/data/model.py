"""Safe loading of ONNX models: the first thing every stage does with a model.

The model's protobuf is parsed without its external data; every external-data
reference is validated to stay inside the model's folder before the ONNX checker,
shape inference or TensorRT's parser ever open it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import external_data_helper, helper

from compiler.core.digest import finish_model_digest, hash_beside
from compiler.core.errors import InvalidInput
from compiler.core.profiles import Dim, TensorInfo
from compiler.data.protobuf_inputs import PROTOBUF_LIMIT


def first_line(message: object) -> str:
    """Library errors are often multi-line dumps; our contract is one line."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(message).__name__


def node_name(node: onnx.NodeProto) -> str:
    """A node's name for ``--exclude`` and every report: its own, or, for a node without one (torch's old exporter
    names none), its first output's, which is unique in a graph. :func:`name_unnamed_nodes` writes it in."""
    return node.name or (node.output[0] if node.output else "")


def name_unnamed_nodes(graph: onnx.GraphProto) -> None:
    """Give each unnamed node of ``graph`` its :func:`node_name`, so onnxruntime's quantizer and converter, which
    exclude nodes by name, can exclude it."""
    for node in graph.node:
        node.name = node_name(node)


def readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name -> the nodes of ``graph`` that read it, in graph order, each node once."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):
            found.setdefault(name, []).append(node)
    return found


def _dtype_name(elem_type: int) -> str:
    return helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "undefined"


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    """A dim as exporters mean it: a size, a symbol, or None for dynamic (unset, or ``dim_value: -1``, which
    Paddle2ONNX writes for "dynamic" and TensorRT's parser reads as dynamic)."""
    if dim.HasField("dim_value"):
        return dim.dim_value if dim.dim_value >= 0 else None
    return dim.dim_param or None


def value_dims(value: onnx.ValueInfoProto) -> list[Dim] | None:
    """A value's declared dims (None when its rank is unknown), without the record :func:`tensor_info` makes: shape
    inference's thousands of values are read this way."""
    tensor_type = value.type.tensor_type
    return [_dim(d) for d in tensor_type.shape.dim] if tensor_type.HasField("shape") else None


def tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    dtype = _dtype_name(value.type.tensor_type.elem_type) if value.type.HasField("tensor_type") else "non-tensor"
    return TensorInfo(name=value.name, dtype=dtype, shape=value_dims(value))


@dataclass(frozen=True)
class OnnxModel:
    """A validated model: its path, its graph (weights left on disk) and the files it uses."""

    path: Path
    proto: onnx.ModelProto = field(repr=False)
    external_files: tuple[Path, ...] = ()
    sha256: str = ""
    """sha256 of the model file (what sha256sum prints); with external data, of the file followed by
    each external file's name and bytes in name order."""

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in (self.path, *self.external_files))

    def inputs(self) -> list[TensorInfo]:
        """Graph inputs that are fed at run time (older exporters also list initializers as inputs)."""
        initializers = {init.name for init in self.proto.graph.initializer}
        return [tensor_info(v) for v in self.proto.graph.input if v.name not in initializers]

    def outputs(self) -> list[TensorInfo]:
        return [tensor_info(v) for v in self.proto.graph.output]

    def input_dims(self) -> dict[str, list[Dim] | None]:
        """Input name -> dims (None when the rank is unknown), what profile validation checks against: the
        same mapping :func:`compiler.data.protobuf_inputs.skim_inputs` reads without parsing the model."""
        return {i.name: (list(i.shape) if i.shape is not None else None) for i in self.inputs()}


def sparse_tensors(graph: onnx.GraphProto) -> Iterator[onnx.SparseTensorProto]:
    """Sparse initializers and sparse attribute tensors of a graph and all its subgraphs
    (onnx's own tensor walk skips them)."""
    yield from graph.sparse_initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("sparse_tensor"):
                yield attribute.sparse_tensor
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from sparse_tensors(subgraph)


def _referenced_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor that can hold weights: initializers, attribute tensors and sparse initializers, in all graphs."""
    yield from external_data_helper._get_all_tensors(model)
    for sparse in sparse_tensors(model.graph):
        yield sparse.values
        yield sparse.indices


def _external_files(model: onnx.ModelProto, path: Path) -> tuple[Path, ...]:
    """Validate every external-data reference; refuse anything that leaves the model's folder.

    Only names are resolved and sizes taken from the directory entries: nothing outside the folder is opened.
    """
    base = path.parent.resolve()
    files: dict[Path, int] = {}
    for tensor in _referenced_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        where = f"{path}: tensor '{tensor.name}' external data '{location}'"
        if not location or "\0" in location or os.path.isabs(location) or Path(location).drive:
            raise InvalidInput(f"{where} must be a path relative to the model's folder")
        try:
            target = (base / location).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise InvalidInput(f"{where} cannot be resolved ({exc})") from None
        if not target.is_relative_to(base):
            raise InvalidInput(f"{where} points outside the model's folder {base}; refusing to read it")
        if not target.is_file():
            missing = "is not a regular file" if target.exists() else "is missing"
            raise InvalidInput(f"{where} {missing}; copy the weights file next to the model")
        size = files.setdefault(target, target.stat().st_size)
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", 0))
        except ValueError:
            raise InvalidInput(f"{where} has a non-numeric offset or length") from None
        if offset < 0 or length < 0:
            raise InvalidInput(f"{where} has a negative offset or length")
        if offset + length > size or offset > size:
            raise InvalidInput(f"{where} needs {offset + length} bytes but the file has {size}; it is truncated")
    return tuple(files)


STUB_BYTES = 4096
"""Shape inference never needs the values of tensors this big; it only needs their shapes."""


def _infer_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference without copying the weights through it (BERT-base: ~5 s -> well under 1 s).

    Big inline tensors are marked as external data for the duration of the call, so the inferencer sees
    their types and shapes but not their bytes; small ones (shape constants) keep their values for data
    propagation. The bytes are put back into both the input and the inferred model.
    """
    stashed: list[tuple[onnx.TensorProto, tuple[bytes, bool]]] = []
    for tensor in external_data_helper._get_all_tensors(proto):
        big = tensor.HasField("raw_data") and tensor.ByteSize() > STUB_BYTES
        if big and tensor.data_location != onnx.TensorProto.EXTERNAL:
            stashed.append((tensor, (tensor.raw_data, tensor.HasField("data_location"))))
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", "compile-shape-inference-stub"
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    finally:
        for tensor, data in stashed:
            _unstub(tensor, data)
    if stashed:
        stubs = [
            t
            for t in external_data_helper._get_all_tensors(inferred)
            if t.data_location == onnx.TensorProto.EXTERNAL
            and any(e.value == "compile-shape-inference-stub" for e in t.external_data)
        ]
        if [t.name for t in stubs] != [t.name for t, _ in stashed]:
            return onnx.shape_inference.infer_shapes(proto, data_prop=True)  # unexpected layout: the slow way
        for tensor, (_, data) in zip(stubs, stashed, strict=True):
            _unstub(tensor, data)
    return inferred


def _unstub(tensor: onnx.TensorProto, state: tuple[bytes, bool]) -> None:
    data, had_location = state
    del tensor.external_data[:]
    if had_location:
        tensor.data_location = onnx.TensorProto.DEFAULT
    else:
        tensor.ClearField("data_location")
    tensor.raw_data = data


def load_model(
    path: str | os.PathLike[str], infer_shapes: bool = True, check: bool = True, digest: bool = True
) -> OnnxModel:
    """Parse, validate and (optionally) check and shape-infer an ONNX model; raise InvalidInput naming the problem.

    The file is mapped once and hashed on a second core while protobuf parses it. The ONNX
    checker and shape inference cost seconds on BERT-sized models: `compile build` skips
    both (TensorRT's parser reports a broken graph itself) and keeps only the safety checks.
    With ``digest=False`` ``sha256`` is left empty for a caller that hashes on its own
    (:func:`compiler.core.digest.hash_model_file`).
    """
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
        with ThreadPoolExecutor(1) as pool:
            hashing = hash_beside(pool, path) if digest else None
            with (
                open(path, "rb") as handle,
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as view,
            ):
                try:
                    proto = onnx.ModelProto.FromString(view)
                except Exception as exc:
                    raise InvalidInput(f"{path}: not a valid ONNX model ({first_line(exc)})") from None
            hasher = hashing.result() if hashing else None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the model file ({exc.strerror or exc})") from None
    if not proto.HasField("graph") or not proto.opset_import or proto.ir_version <= 0:
        raise InvalidInput(f"{path}: not a valid ONNX model (no graph, opset or IR version)")
    external = _external_files(proto, path)
    if check:
        try:
            onnx.checker.check_model(str(path))
        except Exception as exc:
            raise InvalidInput(f"{path}: ONNX checker rejected the model: {first_line(exc)}") from None
    if infer_shapes:
        try:
            proto = _infer_shapes(proto)
        except Exception as exc:
            raise InvalidInput(f"{path}: ONNX shape inference failed: {first_line(exc)}") from None
    sha256 = finish_model_digest(hasher, external) if digest else ""
    return OnnxModel(path=path, proto=proto, external_files=external, sha256=sha256)
