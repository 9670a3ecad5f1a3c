"""Inputs that are not samples, frozen to a value: ``--const sr=16000`` (issue 40).

A voice-activity model takes a scalar sample rate beside its audio, an LSTM exporter leaves a flag input that picks
a branch: such an input is not a batch of samples, so it cannot be in a data file, and an ``If`` on it is control
flow TensorRT-RTX 1.7 may refuse. Frozen, the input becomes a constant of the model: onnx-graphsurgeon folds what
it computes (the ``If`` on it becomes its branch), and the engine no longer takes it, so a server no longer sends
it. The frozen model is a file of its own in the cache (``frozen/<digest>.onnx``, named by the source's digest and
the values), and carries what was frozen in its metadata (``compile.frozen_inputs``, ``compile.source_sha256``),
so every record that names it says what it was made from.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import onnx

from compiler.core.errors import InvalidInput
from compiler.core.files import default_cache_dir, write_atomic
from compiler.data.model import load_model

FROZEN_KEY = "compile.frozen_inputs"
SOURCE_KEY = "compile.source_sha256"
FREEZE_VERSION = 1
"""What freezing writes, by version: part of the frozen file's name."""
MAX_FROZEN_ELEMENTS = 1 << 16
"""A frozen input is a scalar or a small fixed tensor (a state initialised to one value), never a batch."""


def parse_consts(texts: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``("sr=16000",)`` -> ``{"sr": 16000.0}``: each INPUT=NUMBER once, a finite number."""
    values: dict[str, float] = {}
    for text in texts:
        name, sep, given = str(text).partition("=")
        try:
            value = float(given)
        except ValueError:
            value = math.nan
        if not sep or not name.strip() or not math.isfinite(value):
            raise InvalidInput(f"--const {text}: give INPUT=NUMBER, a finite number (e.g. --const sr=16000)")
        if name in values:
            raise InvalidInput(f"--const {text}: input {name!r} is frozen twice; give each input once")
        values[name] = value
    return values


def frozen_model(model: Path, consts: dict[str, float], cache_dir: Path | None = None) -> Path:
    """The model with each input of ``consts`` replaced by a constant of its type and shape, folded; ``model``
    itself when nothing is frozen. Written once per (source, values) into the cache."""
    if not consts:
        return Path(model)
    source = load_model(model)
    key = hashlib.sha256(json.dumps([FREEZE_VERSION, source.sha256, sorted(consts.items())]).encode()).hexdigest()
    path = (cache_dir or default_cache_dir()) / "frozen" / f"{key}.onnx"
    if path.is_file():
        return path
    proto = onnx.load_model(str(source.path))
    _replace_inputs(proto, consts, Path(model))
    folded = _fold(proto, Path(model))
    del folded.metadata_props[:]
    folded.metadata_props.extend(proto.metadata_props)
    for key_name, value in ((FROZEN_KEY, json.dumps(consts, sort_keys=True)), (SOURCE_KEY, source.sha256)):
        folded.metadata_props.add(key=key_name, value=value)
    write_atomic(path, folded.SerializeToString())
    return path


def _replace_inputs(proto: onnx.ModelProto, consts: dict[str, float], where: Path) -> None:
    graph = proto.graph
    inputs = {i.name: i for i in graph.input}
    initialized = {t.name for t in graph.initializer}
    for name, value in consts.items():
        given = inputs.get(name)
        if given is None or name in initialized:
            choices = ", ".join(n for n in inputs if n not in initialized)
            raise InvalidInput(f"--const {name}={value:g}: {where} has no input {name!r} (its inputs: {choices})")
        graph.initializer.append(_constant(given, value, where))
        graph.input.remove(given)


def _constant(given: onnx.ValueInfoProto, value: float, where: Path) -> onnx.TensorProto:
    """The value as a tensor of the input's element type and static shape."""
    tensor_type = given.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim]
    flag = f"--const {given.name}={value:g}"
    if not given.type.HasField("tensor_type") or None in dims:
        raise InvalidInput(
            f"{flag}: input {given.name!r} of {where} is not a tensor of fixed shape; only a scalar or a fixed-shape "
            f"input can be frozen (a batch of samples goes in --data)"
        )
    if int(np.prod(dims, dtype=np.int64)) > MAX_FROZEN_ELEMENTS:
        raise InvalidInput(
            f"{flag}: input {given.name!r} has {dims}: too large to be a constant (a batch goes in --data)"
        )
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    if dtype.kind in "iub" and value != int(value):
        raise InvalidInput(f"{flag}: input {given.name!r} is {dtype.name}; give a whole number")
    if dtype.kind in "iu" and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        raise InvalidInput(f"{flag}: input {given.name!r} is {dtype.name}; {value:g} is out of its range")
    array = np.full(dims, value, dtype=dtype)
    return onnx.numpy_helper.from_array(array, given.name)


def _fold(proto: onnx.ModelProto, where: Path) -> onnx.ModelProto:
    """Constant folding with onnx-graphsurgeon, subgraphs flattened: an ``If`` on a frozen input becomes its
    branch."""
    import onnx_graphsurgeon as gs

    try:
        graph = gs.import_onnx(proto)
        graph.fold_constants(flatten_subgraphs=True, error_ok=False).cleanup().toposort()
        folded = gs.export_onnx(graph)
    except Exception as exc:  # graphsurgeon's own errors: the model cannot be folded as given
        raise InvalidInput(f"{where}: folding the frozen inputs failed: {str(exc).splitlines()[0][:300]}") from None
    folded.ir_version = proto.ir_version
    del folded.opset_import[:]
    folded.opset_import.extend(proto.opset_import)
    return folded
