"""A model's run-time inputs, and its graph without the weights' bytes, read straight from its protobuf bytes, for
`compile build`.

Parsing a model with onnx copies every inline weight into new memory (as much again as the
file: 0.06 s for ResNet-50, 0.2 s for BERT-base on the CI machine, seconds and GBs for bigger
models) and needs onnx imported (0.08 s), when all a build needs before it starts is the input
shapes and the certainty that no weights live in other files. This reader walks the messages on
the way to the graph's inputs and initializers and steps over weight bytes by their length. The
profile-limit check, which needs the graph and its small constants but no weight's values, gets the
model's fields with each big initializer's values left out in the same way, for protobuf to parse
(BERT-base: 0.03 s against 0.75 s to parse the whole model and strip the copy).

It is a fast path only: whenever the model may reference external data, or holds anything it
does not expect, it answers None and the caller does the full safe load
(:func:`compiler.data.model.load_model`), which stays the authority on what is valid and safe.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from compiler.core.profiles import Dim

PROTOBUF_LIMIT = 2**31 - 1
"""Protobuf cannot parse more than 2 GiB; bigger models keep weights as external data."""

Dims = list[Dim] | None
_Fields = dict[int, list[Any]]
"""Field number -> values in file order: an int (varint) or a (start, end) span of a length-delimited field."""
Entry = tuple[int, Any, int, int]
"""One field in file order: (number, value as in :data:`_Fields`, where the field begins, where it ends)."""

# field numbers from onnx.proto (unchanged since IR version 3)
_MODEL_IR_VERSION, _MODEL_GRAPH, _MODEL_OPSET_IMPORT = 1, 7, 8
_GRAPH_INITIALIZER, _GRAPH_INPUT = 5, 11
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
_TENSOR_EXTERNAL = frozenset({_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION})
"""The fields that place a tensor's values in another file."""
_TENSOR_VALUES = frozenset({4, 5, 6, 7, 9, 10, 11})
"""float_data, int32_data, string_data, int64_data, raw_data, double_data, uint64_data."""
_FIXED_WIDTH_VALUES = frozenset({4, 9, 10})
"""float_data, raw_data, double_data: packed, their length is what protobuf holds (varints may be written longer
than protobuf writes them; a field written twice keeps only its last)."""
_VALUE_INFO_NAME, _VALUE_INFO_TYPE = 1, 2
_TYPE_TENSOR = 1
_TENSOR_TYPE_SHAPE = 2
_SHAPE_DIM = 1
_DIM_VALUE, _DIM_PARAM = 1, 2

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_EXTERNAL_DATA_KEY = b"location"
"""Every external-data reference names its file under this key, so bytes without it reference none."""


class _Unexpected(Exception):
    """Something the fast path leaves to the full load."""


def skim_inputs(path: Path) -> dict[str, Dims] | None:
    """Input name -> dims (None: unknown rank), as :meth:`compiler.data.model.OnnxModel.input_dims` gives them
    after a full load; None when the full load must decide (possible external data, anything
    malformed or unusual).

    External data is ruled out without reading weights: graph initializers must not carry the
    external-data fields, and every other part of the model (nodes with their attribute tensors and
    subgraphs, sparse initializers, functions, training graphs) must not contain the key that names
    an external file.
    """
    try:
        with open(path, "rb") as handle:
            if not 0 < os.fstat(handle.fileno()).st_size <= PROTOBUF_LIMIT:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _model_inputs(data)
    except (_Unexpected, IndexError, UnicodeDecodeError, OSError, ValueError):
        return None


def skim_weightless(path: Path, stub_bytes: int) -> tuple[bytes, list[tuple[bool, bytes]]] | None:
    """The model's bytes split for a parse without its weights' values: every field but the graph, then the graph's
    fields in order, each run of them whole (False, bytes) except every initializer whose values are one raw, float
    or double field over ``stub_bytes``, given as its fields but its values (True, bytes) for the caller to mark as
    external data. None when the full load must decide, as for :func:`skim_inputs` (any external data anywhere)."""
    try:
        with open(path, "rb") as handle:
            if not 0 < os.fstat(handle.fileno()).st_size <= PROTOBUF_LIMIT:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _weightless(data, stub_bytes)
    except (_Unexpected, IndexError, OSError, ValueError):
        return None


def _weightless(data: mmap.mmap, stub_bytes: int) -> tuple[bytes, list[tuple[bool, bytes]]]:
    top, graph = _model_and_graph(data)
    rest = b"".join(data[begin:end] for number, _, begin, end in top if number != _MODEL_GRAPH)
    parts: list[tuple[bool, bytes]] = []
    run: list[bytes] = []  # graph fields kept whole, between two stripped initializers
    for number, value, begin, end in graph:
        stripped = _without_values(data, _span(value), stub_bytes) if number == _GRAPH_INITIALIZER else None
        if stripped is None:
            run.append(data[begin:end])
            continue
        parts += [(False, b"".join(run))] if run else []
        run = []
        parts.append((True, stripped))
    parts += [(False, b"".join(run))] if run else []
    return rest, parts


def _without_values(data: mmap.mmap, span: tuple[int, int], stub_bytes: int) -> bytes | None:
    """A TensorProto's fields but its values when they are a single raw, float or double field longer than
    ``stub_bytes`` (whose length in the file is what protobuf holds: the full load leaves such a tensor's values out
    of the limit check too); None to keep the tensor whole. External data is left to the full load."""
    fields = list(_entries(data, *span))
    if not _TENSOR_EXTERNAL.isdisjoint(number for number, _, _, _ in fields):
        raise _Unexpected
    values = [value for number, value, _, _ in fields if number in _TENSOR_VALUES]
    strippable = [value for number, value, _, _ in fields if number in _FIXED_WIDTH_VALUES]
    if len(values) != 1 or len(strippable) != 1 or not isinstance(strippable[0], tuple):
        return None
    start, stop = strippable[0]
    if stop - start <= stub_bytes:
        return None
    return b"".join(data[begin:end] for number, _, begin, end in fields if number not in _TENSOR_VALUES)


def _model_and_graph(data: mmap.mmap | bytes) -> tuple[list[Entry], list[Entry]]:
    """The model's fields and its one graph's, in file order, once no external-data key shows anywhere but in the
    graph's initializers (which the callers look at one by one)."""
    top = list(_entries(data, 0, len(data)))
    model = _grouped(top)
    _refuse_external_key(data, model, skip=_MODEL_GRAPH)
    graph = list(_entries(data, *_single(model, _MODEL_GRAPH)))
    _refuse_external_key(data, _grouped(graph), skip=_GRAPH_INITIALIZER)
    return top, graph


def _model_inputs(data: mmap.mmap | bytes) -> dict[str, Dims]:
    top, entries = _model_and_graph(data)
    model, graph = _grouped(top), _grouped(entries)
    if not _last_varint(model, _MODEL_IR_VERSION) or _MODEL_OPSET_IMPORT not in model:
        raise _Unexpected
    initializers = set()
    for span in graph.get(_GRAPH_INITIALIZER, []):
        tensor = _fields(data, *_span(span))
        if not _TENSOR_EXTERNAL.isdisjoint(tensor):
            raise _Unexpected
        initializers.add(_text(data, tensor, _TENSOR_NAME))
    inputs: dict[str, Dims] = {}
    for span in graph.get(_GRAPH_INPUT, []):
        value_info = _fields(data, *_span(span))
        name = _text(data, value_info, _VALUE_INFO_NAME)
        if name in initializers:
            continue
        if name in inputs:
            raise _Unexpected
        inputs[name] = _dims(data, value_info)
    return inputs


def _dims(data: mmap.mmap | bytes, value_info: _Fields) -> Dims:
    type_proto = _fields(data, *_single(value_info, _VALUE_INFO_TYPE, default=(0, 0)))
    if _TYPE_TENSOR not in type_proto:
        return None  # a non-tensor input: no shape to check profiles against
    tensor_type = _fields(data, *_single(type_proto, _TYPE_TENSOR))
    if _TENSOR_TYPE_SHAPE not in tensor_type:
        return None
    dims: list[Dim] = []
    for span in _fields(data, *_single(tensor_type, _TENSOR_TYPE_SHAPE)).get(_SHAPE_DIM, []):
        dim = _fields(data, *_span(span))
        if _DIM_VALUE in dim and _DIM_PARAM in dim:
            raise _Unexpected  # a oneof set twice: the later one wins, which needs file order
        if _DIM_VALUE in dim:
            value = _last_varint(dim, _DIM_VALUE)
            value = value - (1 << 64) if value >= 1 << 63 else value
            dims.append(value if value >= 0 else None)  # -1: dynamic, as Paddle2ONNX writes it and TensorRT reads it
        else:
            dims.append(_text(data, dim, _DIM_PARAM) or None)
    return dims


def _fields(data: mmap.mmap | bytes, start: int, end: int) -> _Fields:
    return _grouped(_entries(data, start, end))


def _grouped(entries: Iterable[Entry]) -> _Fields:
    fields: _Fields = {}
    for number, value, _, _ in entries:
        fields.setdefault(number, []).append(value)
    return fields


def _entries(data: mmap.mmap | bytes, start: int, end: int) -> Iterator[Entry]:
    """Each field of the message at ``start:end``, in file order."""
    position = start
    while position < end:
        begin = position
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, position = _varint(data, position)
        elif wire == _LENGTH:
            length, position = _varint(data, position)
            value, position = (position, position + length), position + length
        elif wire in (_FIXED64, _FIXED32):
            value, position = None, position + (8 if wire == _FIXED64 else 4)
        else:  # groups (long deprecated) or garbage
            raise _Unexpected
        if number == 0 or position > end:
            raise _Unexpected
        yield number, value, begin, position


def _varint(data: mmap.mmap | bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise _Unexpected


def _refuse_external_key(data: mmap.mmap | bytes, fields: _Fields, skip: int) -> None:
    for number, values in fields.items():
        for value in values if number != skip else ():
            if isinstance(value, tuple) and data.find(_EXTERNAL_DATA_KEY, *value) != -1:
                raise _Unexpected


def _span(value: Any) -> tuple[int, int]:
    if not isinstance(value, tuple):
        raise _Unexpected  # the wire type does not match the schema
    return value


def _single(fields: _Fields, number: int, default: tuple[int, int] | None = None) -> tuple[int, int]:
    """A singular message field; protobuf merges repeated occurrences, which is left to the full load."""
    values = fields.get(number, [])
    if len(values) > 1 or (not values and default is None):
        raise _Unexpected
    return _span(values[0]) if values else default


def _last_varint(fields: _Fields, number: int) -> int:
    values = fields.get(number, [])
    if values and not isinstance(values[-1], int):
        raise _Unexpected
    return values[-1] if values else 0


def _text(data: mmap.mmap | bytes, fields: _Fields, number: int) -> str:
    """A singular string field ('' when absent; the last occurrence wins, as in protobuf)."""
    values = fields.get(number, [])
    return data[slice(*_span(values[-1]))].decode("utf-8") if values else ""
