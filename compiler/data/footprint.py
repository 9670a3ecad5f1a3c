"""How many samples one onnxruntime run may take within ``--chunk-mb``: a model's activation footprint per sample.

onnxruntime's CPU arena keeps the high-water mark of every run for the session's life, so what a calibration holds
is the largest run of each of its sessions: samples per run x the activations alive at once for one sample. That,
not the sample count, is what grows with image size: the 480x480 text detector ran 32 samples per run in 2.6 GiB.
The footprint is computed from the model's shapes at the data's sample shape (ONNX shape inference), walking the
nodes in the graph's order (the order :func:`compiler.data.session.session` makes onnxruntime keep) and freeing
each tensor after its last reader; weights are not counted (they do not grow with samples).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from compiler.core.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np

    from compiler.data.datasets import Dataset

MIB = 1 << 20


Bounds = Callable[[Mapping[str, int | None]], Mapping[str, int]]
"""Bytes of tensors shape inference cannot size, bounded by their maker from the sizes it did find."""


def activation_bytes(
    model: Path | onnx.ModelProto, shapes: dict[str, tuple[int, ...]], bounds: Bounds | None = None
) -> int:
    """Peak bytes of the activations alive at once when ``model`` runs one sample whose inputs have
    ``shapes`` (with their sample axis, of length 1). A tensor whose shape inference leaves unknown counts as
    the largest known one, unless ``bounds`` gives its bytes: an estimate errs on the side of smaller runs."""
    proto = onnx.load_model(model, load_external_data=False) if isinstance(model, Path) else model
    sizes = tensor_bytes(proto, shapes)
    sizes |= dict(bounds(sizes)) if bounds else {}
    largest = max((size for size in sizes.values() if size is not None), default=0)
    graph = proto.graph
    weights = {i.name for i in graph.initializer}
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            last_use[name] = index
    kept = {o.name for o in graph.output}
    varying = {i.name for i in graph.input if i.name not in weights}
    for node in graph.node:
        if any(name in varying for name in node.input):
            varying.update(node.output)

    def size(name: str) -> int:
        """A tensor's bytes for one sample; none for what is computed from weights alone (a dequantized weight),
        which does not grow with the samples."""
        if name not in varying:
            return 0
        found = sizes.get(name)
        return largest if found is None else found

    live = {i.name: size(i.name) for i in graph.input if i.name not in weights}
    peak = sum(live.values())
    for index, node in enumerate(graph.node):
        for name in node.output:
            if name:
                live[name] = size(name)
        peak = max(peak, sum(live.values()))
        for name in (*node.input, *node.output):
            if name in live and last_use.get(name, -1) <= index and name not in kept:
                del live[name]
    return max(peak, 1)


def tensor_bytes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, int | None]:
    """Bytes of every tensor of ``proto`` for one sample, None where its shape stays unknown."""
    concrete = _without_weights(proto)
    for value in concrete.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, length in zip(dims, (1, *shapes[value.name][1:]), strict=False):
                dim.Clear()
                dim.dim_value = length
    try:
        inferred = onnx.shape_inference.infer_shapes(concrete, data_prop=True)
    except Exception:  # a model shape inference cannot follow: every tensor it would have sized is unknown
        inferred = concrete
    graph = inferred.graph
    sizes: dict[str, int | None] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        sizes[value.name] = _bytes(value.type)
    return sizes


SHAPE_CONSTANT_BYTES = 1024
"""Initializers up to this size keep their values in the copy shape inference reads (a Reshape's shape, a Resize's
scales); larger ones are weights, whose values no shape depends on."""


def _without_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose large initializers keep their type and dims but not their values: a model of
    hundreds of MiB is not copied to be measured."""
    copy = onnx.ModelProto(ir_version=proto.ir_version)
    copy.opset_import.extend(proto.opset_import)
    copy.functions.extend(proto.functions)
    graph, source = copy.graph, proto.graph
    for field in ("node", "input", "output", "value_info"):
        getattr(graph, field).extend(getattr(source, field))
    for tensor in source.initializer:
        if prod(tensor.dims) * 8 <= SHAPE_CONSTANT_BYTES:
            graph.initializer.append(tensor)
        else:
            graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    return copy


def _bytes(kind: onnx.TypeProto) -> int | None:
    tensor = kind.tensor_type
    if not tensor.HasField("shape") or not tensor.elem_type:
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if any(d is None for d in dims):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    except (KeyError, TypeError, ValueError):  # float8, int4 and other types numpy lacks: a byte or less
        itemsize = 1
    return itemsize * prod(dims)


ARENA_SLACK = 2
"""What onnxruntime holds for a run, over the footprint computed here: its arena grows in large steps and its planner
does not free every tensor at its last reader (measured on the 480x480 text detector: 1.0-1.1x for the FP32 model,
up to 1.9x for the sensitivity model)."""


def samples_per_run(per_sample: int, chunk_mb: int, batch_size: int, fixed_batch: int | None, what: str) -> int:
    """Samples each onnxruntime run takes: ``batch_size`` (a model's fixed batch) or fewer, so that ``per_sample``
    bytes of activations (every session that runs at once, summed; :data:`ARENA_SLACK` times that is what
    onnxruntime holds) times the samples stay within ``chunk_mb``; at least one run (one sample, or the fixed batch),
    over the budget by at most that slack. When even one run's activations alone do not fit, exit 2 saying how much
    ``--chunk-mb`` the model needs (a field model, ddddocr's LSTM recogniser, needs 161 MiB for one sample: the
    default 256 must take it)."""
    budget = chunk_mb * MIB
    least = fixed_batch or 1
    refused = least * per_sample > budget  # the activations alone: onnxruntime's slack above them is a margin
    per_sample *= ARENA_SLACK
    if refused:
        needed = -(-least * per_sample // MIB)
        unit = f"a run of its fixed batch of {fixed_batch}" if fixed_batch else "one sample"
        raise InvalidInput(
            f"--chunk-mb {chunk_mb}: {what} needs {needed} MiB of activations for {unit} at the data's shape; "
            f"give --chunk-mb {needed} or more, or smaller inputs"
        )
    if fixed_batch:
        return fixed_batch
    return max(1, min(batch_size, budget // per_sample))


def early_order(graph: onnx.GraphProto, first_added: int) -> None:
    """Move the nodes appended to ``graph`` (from index ``first_added`` on) to where each can first run, right after
    what it reads is made, the others keeping their order: appended statistics then free the activations they read
    at once instead of holding every one until the end of the graph."""
    nodes = [onnx.NodeProto() for _ in graph.node]
    for copy, node in zip(nodes, graph.node, strict=True):
        copy.CopyFrom(node)
    original, added = nodes[:first_added], nodes[first_added:]
    produced = {name for node in nodes for name in node.output}
    missing = [sum(1 for name in set(node.input) if name in produced) for node in added]
    waiting: dict[str, list[int]] = {}
    for index, node in enumerate(added):
        for name in set(node.input) & produced:
            waiting.setdefault(name, []).append(index)
    result: list[onnx.NodeProto] = []

    def run(node: onnx.NodeProto) -> None:
        result.append(node)
        ready = []
        for name in node.output:
            for index in waiting.pop(name, ()):
                missing[index] -= 1
                if not missing[index]:
                    ready.append(index)
        for index in sorted(ready):
            run(added[index])

    for node in [node for index, node in enumerate(added) if not missing[index]]:  # read only inputs or weights
        run(node)
    for node in original:
        run(node)
    result.extend(node for index, node in enumerate(added) if missing[index])  # reads what nothing makes: kept last
    del graph.node[:]
    graph.node.extend(result)


def sample_shapes(dataset: Dataset, indices: np.ndarray) -> dict[str, tuple[int, ...]]:
    """The shape of one sample of every input (its sample axis of length 1), from the first of ``indices``."""
    return {name: array.shape for name, array in dataset.read(indices[:1]).items()}


@dataclass(frozen=True)
class Fit:
    """What a run is fitted with: one sample's input shapes, ``--chunk-mb``, the batch size asked (or the model's
    fixed one), and what runs (named in the error when not one sample fits)."""

    shapes: dict[str, tuple[int, ...]]
    chunk_mb: int
    batch_size: int
    fixed_batch: int | None
    what: str

    def samples(self, models: list[Path | onnx.ModelProto], bounds: Bounds | None = None) -> int:
        """Samples per run when ``models`` run each batch side by side (each session keeps its own high-water
        mark, so their footprints add up); ``bounds``: as :func:`activation_bytes` takes them."""
        per_sample = sum(activation_bytes(model, self.shapes, bounds) for model in models)
        return samples_per_run(per_sample, self.chunk_mb, self.batch_size, self.fixed_batch, self.what)
