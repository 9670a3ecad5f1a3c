"""The shapes a model's own constants allow: a profile the model cannot run is refused before any build.

TensorRT builds an engine for a profile whose max sequence is longer than the model's position table (a Gather
past the table's end, or a broadcast of 512 positions against 128), with at most a warning; the engine then
fails or computes garbage at those shapes. Here each profile's min, opt and max shapes are fixed into a
weightless copy of the graph, ONNX shape inference runs in strict mode, and the small integer tensors that
shapes are made of (Shape, Gather, Range, Concat, …) are evaluated and folded into constants until nothing new
is known, so Slice, Reshape and broadcasts see real sizes. What it finds: an elementwise broadcast or a reshape
that cannot hold, and a Gather whose indices reach past its table. When a dynamic dim is at fault, the largest
value the model takes is found by bisection and named.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from compiler.core.profiles import Dim, ProfileSet, ShapeProfile
from compiler.data.model import STUB_BYTES, node_name, value_dims

FOLD_ELEMENTS = 1 << 16
"""The largest tensor evaluated and folded: shape arithmetic is tiny; weights are never touched."""
_PASS_THROUGH = {"Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Cast", "Flatten", "Tile"}
"""Ops that keep the values (so the bounds) of a Range too long to evaluate."""
STUB_LOCATION = "compile-limits-stub"
"""Where a weight left out of the skeleton claims to live: a name no file has, never read."""
_UNEVALUATED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


@dataclass(frozen=True)
class _Problem:
    node: str
    text: str


def weightless_model(path: Path, stub_bytes: int = STUB_BYTES) -> onnx.ModelProto:
    """The model at ``path`` as :func:`profile_limit_errors` needs it, read without parsing its weights' values where
    :func:`compiler.data.protobuf_inputs.skim_weightless` vouches for the file (BERT-base: 0.03 s against 0.75 s):
    each initializer whose values are one raw, float or double field over ``stub_bytes`` without them, marked as
    external data at :data:`STUB_LOCATION` (the limit check's skeleton leaves out the same values). Else the full
    safe load, values and all, which names what is wrong with the file. The fast path checks no more than the limit
    check needs: the build's own full load of the file (its digest's validation) is what refuses a bad one."""
    from google.protobuf.message import DecodeError

    from compiler.data.model import load_model
    from compiler.data.protobuf_inputs import skim_weightless

    skimmed = skim_weightless(path, stub_bytes)
    if skimmed is not None:
        rest, graph_parts = skimmed
        try:
            model = onnx.ModelProto.FromString(rest)
            for is_weight, payload in graph_parts:
                if is_weight:
                    _mark_external(model.graph.initializer.add(), payload)
                else:
                    model.graph.MergeFromString(payload)
            return model
        except DecodeError:
            pass  # the full load says what is wrong
    return load_model(path, infer_shapes=False, check=False, digest=False).proto


def _mark_external(tensor: onnx.TensorProto, fields: bytes = b"") -> None:
    """``tensor`` (with ``fields`` parsed into it) marked as external data no file has."""
    tensor.MergeFromString(fields)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=STUB_LOCATION)


def profile_limit_errors(proto: onnx.ModelProto, profiles: ProfileSet) -> list[str]:
    """Every profile shape the model's constants cannot run, one message per profile, naming the input and dim
    (and the largest size the model takes) where one dynamic dim is at fault. Empty when every shape can run.
    Call after :func:`compiler.core.profiles.validate_profiles` found the profiles valid."""
    skeleton = _skeleton(proto)
    inputs = {v.name: v for v in skeleton.graph.input}
    groups = _dynamic_groups(skeleton)
    errors = []
    for profile in profiles.profiles:
        for key in ("max", "min", "opt"):
            shapes = {name: list(getattr(r, key)) for name, r in profile.shapes.items() if name in inputs}
            problem = _problem_at(skeleton, shapes)
            if problem is not None:
                errors.append(_describe(skeleton, profile, key, shapes, problem, groups))
                break
    return errors


def _describe(
    skeleton: onnx.ModelProto,
    profile: ShapeProfile,
    key: str,
    shapes: dict[str, list[int]],
    problem: _Problem,
    groups: dict[str, list[tuple[str, int]]],
) -> str:
    where = f"profile '{profile.name}'"
    if key == "max":
        for label, uses in groups.items():
            name, axis = uses[0]
            if name not in shapes:
                continue
            low = profile.shapes[name].min[axis]
            high = shapes[name][axis]
            if low == high or _problem_at(skeleton, _with(shapes, uses, low)) is not None:
                continue
            while high - low > 1:  # the largest size that runs, everything else at max
                middle = (low + high) // 2
                if _problem_at(skeleton, _with(shapes, uses, middle)) is None:
                    low = middle
                else:
                    high = middle
            symbol = f" ('{label}')" if not label.startswith(f"{name}:") else ""
            shared = [n for n, _ in uses[1:] if n != name]
            also = f" (and {', '.join(dict.fromkeys(shared))}, same dim)" if shared else ""
            return (
                f"{where}: input '{name}' dim {axis}{symbol}{also} max {shapes[name][axis]} is more than the "
                f"model can run: {problem.text}; the largest it takes is {low}: lower the max to {low} or less"
            )
    given = ", ".join(f"{name} {list(dims)}" for name, dims in shapes.items())
    return f"{where}: the model cannot run at the {key} shapes ({given}): {problem.text}; change those shapes"


def _with(shapes: dict[str, list[int]], uses: list[tuple[str, int]], value: int) -> dict[str, list[int]]:
    changed = {name: list(dims) for name, dims in shapes.items()}
    for name, axis in uses:
        if name in changed:
            changed[name][axis] = value
    return changed


def _dynamic_groups(model: onnx.ModelProto) -> dict[str, list[tuple[str, int]]]:
    """Dynamic dims of the inputs, grouped: one group per symbolic name (the inputs that share it move
    together), one per unnamed dim (``input:axis``)."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for value in model.graph.input:
        for axis, dim in enumerate(_dims(value)):
            if not isinstance(dim, int):
                groups.setdefault(dim if isinstance(dim, str) else f"{value.name}:{axis}", []).append(
                    (value.name, axis)
                )
    return groups


def _dims(value: onnx.ValueInfoProto) -> list[Dim]:
    return value_dims(value) or []


def _skeleton(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The graph without its weights' bytes (big tensors keep only name, type and dims) and without the value
    info of an earlier inference: cheap to infer again and again."""
    skeleton = onnx.ModelProto(ir_version=proto.ir_version, opset_import=proto.opset_import)
    graph = skeleton.graph
    graph.name = proto.graph.name
    graph.node.extend(proto.graph.node)
    graph.input.extend(proto.graph.input)
    graph.output.extend(proto.graph.output)
    for value in (*graph.input, *graph.output):  # -1 (Paddle2ONNX's "dynamic") is no size inference may hold to
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.Clear()
    graph.sparse_initializer.extend(proto.graph.sparse_initializer)
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.ByteSize() > STUB_BYTES:
            _mark_external(graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims))
        else:
            graph.initializer.append(tensor)
    return skeleton


def _problem_at(skeleton: onnx.ModelProto, shapes: dict[str, list[int]]) -> _Problem | None:
    """Why the model cannot run with inputs of these shapes, or None when nothing here says it cannot."""
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    for value in model.graph.input:
        if value.name in shapes:
            for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name], strict=False):
                dim.Clear()
                dim.dim_value = size
    for _ in range(len(model.graph.node) + 1):  # each round folds at least one node, or ends
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        except onnx.shape_inference.InferenceError as exc:
            return _Problem("", _inference_text(exc))
        except Exception:
            return None
        folded, problem = _fold(model, _shapes(inferred))
        if problem is not None or not folded:
            return problem
    return None


_FIRST_ERROR = re.compile(
    r"\(op_type:(?P<op>[^,]*), node name: (?P<node>.*?)\): \[\w+\] (?P<text>.*?)(?= \(op_type:|$)"
)


def _inference_text(exc: Exception) -> str:
    """The first error of an inference failure (the ones after it follow from it), as ``node 'x' (Add): …``."""
    text = " ".join(str(exc).split())
    first = _FIRST_ERROR.search(text)
    if first is None:
        return text[:300]
    return f"node '{first['node']}' ({first['op']}): {first['text'][:300]}"


def _shapes(model: onnx.ModelProto) -> dict[str, list[Dim]]:
    graph = model.graph
    shapes = {
        v.name: _dims(v)
        for v in (*graph.input, *graph.value_info, *graph.output)
        if v.type.tensor_type.HasField("shape")
    }
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    return shapes


def _fold(model: onnx.ModelProto, shapes: dict[str, list[Dim]]) -> tuple[bool, _Problem | None]:
    """Evaluate what can be evaluated from constants and static shapes, check every Gather's indices against
    its table, and replace the evaluated nodes by constants (True when any was)."""
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    values: dict[str, np.ndarray] = {
        t.name: numpy_helper.to_array(t) for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL
    }
    bounds: dict[str, tuple[int, int]] = {}
    kept, folded = [], []
    for node in graph.node:
        result = None
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            result = _shape_value(node, shapes.get(node.input[0]))
        elif _evaluable(node, values, shapes):
            try:
                result = ReferenceEvaluator(node).run(None, {name: values[name] for name in node.input if name})
            except Exception:
                result = None
        elif node.op_type == "Range" and all(name in values for name in node.input):
            start, limit, delta = (values[name].item() for name in node.input)
            if delta and limit != start:
                last = start + (math.ceil((limit - start) / delta) - 1) * delta
                bounds[node.output[0]] = (int(min(start, last)), int(max(start, last)))
        elif node.op_type in _PASS_THROUGH and node.input and node.input[0] in bounds:
            bounds[node.output[0]] = bounds[node.input[0]]
        problem = _CHECKS[node.op_type](node, values, bounds, shapes) if node.op_type in _CHECKS else None
        if problem is not None:
            return False, problem
        if result is not None and all(isinstance(r, np.ndarray) and r.size <= FOLD_ELEMENTS for r in result):
            values.update(zip(node.output, result, strict=False))
            folded.extend(
                numpy_helper.from_array(np.asarray(r), name)
                for name, r in zip(node.output, result, strict=False)
                if name
            )
        else:
            kept.append(node)
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
        graph.initializer.extend(folded)
    return bool(folded), None


def _shape_value(node: onnx.NodeProto, dims: list[Dim] | None) -> list[np.ndarray] | None:
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(dims))
    return [np.array(dims[start:end] if end else dims[start:], dtype=np.int64)]


def _evaluable(node: onnx.NodeProto, values: dict[str, np.ndarray], shapes: dict[str, list[Dim]]) -> bool:
    """A standard op with no subgraph whose inputs are all known and whose outputs are known to be small."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _UNEVALUATED:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    if not all(name in values for name in node.input if name) or not any(node.input):
        return node.op_type == "Constant"
    if node.op_type == "Range":  # its length is the data's, unknown to shape inference: evaluate only short ones
        start, limit, delta = (values[name] for name in node.input)
        return bool(delta.item()) and math.ceil((limit.item() - start.item()) / delta.item()) <= FOLD_ELEMENTS
    for name in node.output:
        dims = shapes.get(name)
        if name and (dims is None or not all(isinstance(d, int) for d in dims) or math.prod(dims) > FOLD_ELEMENTS):
            return False
    return True


def _reshape_problem(
    node: onnx.NodeProto,
    values: dict[str, np.ndarray],
    bounds: dict[str, tuple[int, int]],
    shapes: dict[str, list[Dim]],
) -> _Problem | None:
    """A reshape of a known number of elements into a known shape that cannot hold them (ONNX's inference lets
    it pass)."""
    dims, target = shapes.get(node.input[0]), values.get(node.input[1])
    if not dims or not all(isinstance(d, int) for d in dims) or target is None or target.dtype.kind not in "iu":
        return None
    allow_zero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
    wanted = [dims[i] if v == 0 and not allow_zero and i < len(dims) else int(v) for i, v in enumerate(target)]
    known = math.prod(v for v in wanted if v != -1)
    elements = math.prod(dims)
    if (elements % known == 0) if -1 in wanted and known else elements == known:
        return None
    return _Problem(
        node.name,
        f"node '{node_name(node)}' (Reshape) cannot put {elements} elements "
        f"({list(dims)}) into shape {[int(v) for v in target]}",
    )


def _gather_problem(
    node: onnx.NodeProto,
    values: dict[str, np.ndarray],
    bounds: dict[str, tuple[int, int]],
    shapes: dict[str, list[Dim]],
) -> _Problem | None:
    data, indices = node.input[0], node.input[1]
    table = shapes.get(data)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not table or not -len(table) <= axis < len(table) or not isinstance(table[axis], int):
        return None
    if indices in values:
        found = values[indices]
        if found.size == 0 or found.dtype.kind not in "iu":
            return None
        low, high = int(found.min()), int(found.max())
    elif indices in bounds:
        low, high = bounds[indices]
    else:
        return None
    size = table[axis]
    if high < size and low >= -size:
        return None
    index = high if high >= size else low
    return _Problem(
        node.name,
        f"node '{node_name(node)}' (Gather) reads index {index} of the {size} along axis {axis} of '{data}'",
    )


_CHECKS = {"Gather": _gather_problem, "Reshape": _reshape_problem}
"""What a node needs of the sizes it sees, beyond what ONNX's inference checks."""
