"""``--dim INPUT:AXIS=NAME``: rename a model's dynamic input dims without editing the model.

Exporters name dims as they please: Paddle2ONNX writes ``?`` for every dynamic dim (or ``dim_value: -1``), so
an image's H and W share a name and TensorRT (and profile validation) takes them for one size. A rename gives
such a dim a name of its own; the user's file is never changed: the renamed model is a copy in the cache,
named by its content, so every cache key built from the copy's digest includes the renames.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.core.errors import InvalidInput
from compiler.core.files import write_atomic

if TYPE_CHECKING:  # onnx is imported only where a model is renamed: a cached release renames nothing
    import onnx

    from compiler.data.model import OnnxModel

_DIM = re.compile(r"^(?P<input>.+):(?P<axis>-?\d+)=(?P<name>.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DimRenames = dict[str, dict[int, str]]
"""Input name -> axis -> the dim's new name."""


def parse_dims(values: list[str] | None, flag: str = "--dim") -> DimRenames:
    """``["x:2=H", "x:3=W"]`` -> ``{"x": {2: "H", 3: "W"}}``; a malformed value is a usage error."""
    renames: DimRenames = {}
    for value in values or []:
        match = _DIM.match(value)
        example = "(e.g. --dim x:2=H)" if flag == "--dim" else "(e.g. x:2=H)"
        if match is None:
            raise InvalidInput(f"{flag} {value!r}: expected INPUT:AXIS=NAME {example}")
        name, axis = match["name"], int(match["axis"])
        if not _NAME.match(name):
            raise InvalidInput(
                f"{flag} {value!r}: the dim name {name!r} must be a letter or _ followed by letters, digits or _ "
                f"{example}"
            )
        axes = renames.setdefault(match["input"], {})
        if axis in axes and axes[axis] != name:
            raise InvalidInput(f"{flag} {value!r}: {match['input']}:{axis} is already renamed to {axes[axis]!r}")
        axes[axis] = name
    return renames


def _rename(model: OnnxModel, renames: DimRenames, flag: str) -> onnx.ModelProto:
    """A copy of the model's proto with the renames applied; refuses what cannot be renamed."""
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    inputs = {value.name: value for value in proto.graph.input}
    fed = model.input_dims()
    for name, axes in renames.items():
        given = f"{flag} " + " ".join(repr(f"{name}:{axis}={new}") for axis, new in axes.items())
        if name not in fed:
            raise InvalidInput(f"{given}: '{name}' is not a model input (model inputs: {', '.join(fed)})")
        dims = inputs[name].type.tensor_type.shape.dim
        if fed[name] is None:
            raise InvalidInput(f"{given}: input '{name}' has an unknown rank; no axis can be named")
        for axis, new in axes.items():
            if not 0 <= axis < len(dims):
                raise InvalidInput(
                    f"{flag} {name}:{axis}={new}: axis {axis} is out of range for input '{name}' of rank {len(dims)} "
                    f"(axes 0 to {len(dims) - 1})"
                )
            if isinstance(fed[name][axis], int):
                raise InvalidInput(
                    f"{flag} {name}:{axis}={new}: dim {axis} of input '{name}' is static {fed[name][axis]}; "
                    "only dynamic dims can be renamed"
                )
            dims[axis].dim_param = new  # clears dim_value (-1, Paddle2ONNX's "dynamic"): a oneof
    return proto


def renamed_model(model: OnnxModel, renames: DimRenames, folder: Path, flag: str = "--dim") -> OnnxModel:
    """The model with its input dims renamed, written under ``folder`` (a cache), or the model itself without
    renames. A model with external weights is refused: its copy could not reach them."""
    if not renames:
        return model
    proto = _rename(model, renames, flag)
    if model.external_files:
        raise InvalidInput(
            f"{model.path}: {flag} cannot rename the dims of a model with external weights; rename them in the "
            "model (onnx.tools.update_model_dims.update_inputs_outputs_dims)"
        )
    from compiler.data.model import load_model

    content = proto.SerializeToString(deterministic=True)
    target = folder / "dims" / hashlib.sha256(content).hexdigest()[:32] / model.path.name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, content)
    return load_model(target)


def renamed_path(path: Path, values: list[str] | tuple[str, ...] | None, folder: Path, flag: str = "--dim") -> Path:
    """The file a stage reads for ``path`` given ``--dim`` values: the renamed copy under ``folder``, or ``path``
    itself when nothing is renamed."""
    if not values:
        return path
    from compiler.data.model import load_model

    return renamed_model(load_model(path, infer_shapes=False), parse_dims(list(values), flag), folder, flag).path
