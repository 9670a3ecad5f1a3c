"""FP16 range, which needs no GPU: the FP32 model's intermediate values against FP16's range.

onnxruntime's CPU provider has no FP16 kernel for many ops and computes them in FP32 (``InsertedPrecisionFreeCast``
nodes), so an FP16 model that overflows on a GPU reads ~1.0 cosine there. What a GPU would do is found from the FP32
model's intermediate values instead: any |x| > 65504 becomes inf in FP16, and non-zero values below its smallest
subnormal (2**-24) become zero. The reference pass (:func:`reference_pass`) runs the FP32 model once with every
float intermediate as an output, in chunks of samples (and of tensors) bounded by ``chunk_mb``; its final outputs
are the accuracy check's reference, so the FP32 model runs once for both.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from compiler.core.errors import InvalidInput
from compiler.core.records import CheckResult, OutputReport, Status
from compiler.data.agreement import Agreement, Limits, describe, judge, limits
from compiler.data.batchnorm_folding import FP16_MAX, fold_unrepresentable_batchnorms, inline_float32
from compiler.data.datasets import Dataset
from compiler.data.model import OnnxModel, first_line, node_name, readers
from compiler.data.sampling import batches
from compiler.data.session import session

FP16_TINY = 2.0**-24
FP16_NORMAL = 2.0**-14
"""FP16's smallest normal value (6.1e-5): below it, values keep fewer significant bits."""
"""FP16's smallest subnormal: a non-zero value below half of it rounds to zero."""
UNDERFLOW_FRACTION = 0.01
"""A tensor is reported as flushing when more than this fraction of its non-zero values is below FP16_TINY."""
MAX_EVIDENCE = 20
COVERAGE = (
    "onnxruntime on CPU computes many FP16 ops in FP32, so the comparison with the FP16 model measures "
    "weight rounding, not FP16 arithmetic; the FP16 range check covers overflow and underflow of every "
    "intermediate tensor of the FP32 model on the same samples, not accumulation inside TensorRT's kernels"
)
"""What an FP16 comparison in onnxruntime could and could not see, said in every report that makes one."""


SHAPE_ONLY = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Expand", "Flatten"})
"""Ops that move values without computing on them: a saturated value passes through them unchanged."""


@dataclass
class TensorStats:
    node: str
    abs_max: float = 0.0
    overflow: int = 0
    flushed: int = 0
    nonzero: int = 0
    elements: int = 0
    nonfinite: int = 0
    positive_overflow: bool = False
    """Some value beyond +65504 (or NaN): +inf in FP16, which no Softmax absorbs."""
    readers: tuple[str, ...] = ()
    """The nodes that read the tensor: an overflow is only gone when they, too, read it in FP32."""
    into_softmax: bool = False
    """Every reader of the tensor is a Softmax (through shape-only ops): an additive mask saturated to -inf there is
    exp(-inf) = 0, the weight the mask meant to give."""

    def add(self, values: np.ndarray) -> None:
        """Count one batch of a tensor's values. The common case (all finite, none above FP16's range) takes four
        passes over the values: |x| in place, its max, the non-zeros, those below FP16's smallest subnormal (each
        count taken over a comparison's booleans: numpy counts non-zero floats several times slower)."""
        owned = values.dtype == np.float32 and values.flags.writeable  # a fresh onnxruntime output, used once
        top = float(values.max()) if values.size else 0.0
        if not top <= FP16_MAX:  # +inf in FP16, or NaN
            self.positive_overflow = True
        magnitude = np.abs(values, out=values) if owned else np.abs(values, dtype=np.float32)
        peak = float(magnitude.max()) if magnitude.size else 0.0
        if not math.isfinite(peak):
            finite = np.isfinite(magnitude)
            self.nonfinite += int(magnitude.size - np.count_nonzero(finite))
            magnitude = np.where(finite, magnitude, 0)
            peak = float(magnitude.max())
        self.abs_max = max(self.abs_max, peak)
        if peak > FP16_MAX:
            self.overflow += int(np.count_nonzero(magnitude > FP16_MAX))
        nonzero = int(np.count_nonzero(magnitude > 0))  # on booleans: ~5x faster than on the floats themselves
        self.flushed += int(np.count_nonzero(magnitude < FP16_TINY)) - (magnitude.size - nonzero)
        self.nonzero += nonzero
        self.elements += int(magnitude.size)


@dataclass
class ConvertedConstants:
    """What the FP16 conversion does to the model's constants; the ranges are measured with them so."""

    clamped: dict[str, float] = field(default_factory=dict)
    """Constants beyond FP16's range, clamped to +-65504 (their |x| before)."""
    clamped_readers: dict[str, list[str]] = field(default_factory=dict)
    """Each clamped constant's readers: kept in FP32 (``--exclude``), they keep the constant FP32 as well."""
    subnormal: dict[str, list[int]] = field(default_factory=dict)
    """Constants the FP16 model holds with values below FP16's normal range: [how many, of how many non-zero]."""
    folded: list[str] = field(default_factory=list)
    """BatchNormalizations computed in FP32 before conversion (their constants beyond FP16's range)."""


@dataclass
class Reference:
    """The FP32 model's outputs on the samples (in sample order) and, when asked for, its intermediate ranges."""

    outputs: dict[str, np.ndarray]
    ranges: dict[str, TensorStats] = field(default_factory=dict)
    skipped_tensors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    constants: ConvertedConstants = field(default_factory=ConvertedConstants)
    clamped_outputs: list[OutputReport] = field(default_factory=list)
    """The outputs of the FP32 model with the constants FP16 clamps, against its own: what clamping moves."""


def _float_intermediates(model: OnnxModel) -> tuple[dict[str, onnx.ValueInfoProto], dict[str, str], list[str]]:
    """Float32 tensors that nodes produce (shape-inferred types), who produces each, and those of unknown type."""
    graph = model.proto.graph
    typed = {v.name: v for v in graph.value_info}
    outputs = {o.name for o in graph.output}
    producers, wanted, unknown = {}, {}, []
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name or name in outputs:
                continue
            producers[name] = node.name or f"{node.op_type} #{index}"
            value = typed.get(name)
            if value is None or not value.type.HasField("tensor_type"):
                unknown.append(name)
            elif value.type.tensor_type.elem_type == TensorProto.FLOAT:
                wanted[name] = value
    return wanted, producers, unknown


def clamp_constants(proto: onnx.ModelProto, kept: frozenset[str] = frozenset()) -> dict[str, float]:
    """Clamp float32 constants (initializers, Constant nodes) beyond FP16's range to +-65504 in place, as
    onnxruntime's FP16 converter writes them; returns each clamped constant's largest |x| before. The FP16 model
    holds the clamped value, so the range check evaluates the model with it: a Hugging Face mask bias of
    (1 - mask) * -3.4e38 is -65504 there, not an overflow. Infinities and external data are left as they are
    (the converter keeps infinities too). Constants in ``kept`` (by initializer or Constant output name) stay FP32
    in the converted model: ``--exclude`` of their readers kept them."""
    from onnx import numpy_helper

    clamped = {}
    for name, tensor in _fp16_constants(proto, kept):
        values = numpy_helper.to_array(tensor)
        finite = np.isfinite(values)
        beyond = finite & (np.abs(values) > FP16_MAX)
        if beyond.any():
            clamped[name] = float(np.abs(values[beyond]).max())
            tensor.CopyFrom(
                numpy_helper.from_array(
                    np.where(beyond, np.clip(values, -FP16_MAX, FP16_MAX), values).astype(np.float32), tensor.name
                )
            )
    return clamped


def subnormal_constants(proto: onnx.ModelProto, kept: frozenset[str] = frozenset()) -> dict[str, list[int]]:
    """Constants the FP16 model holds with more than UNDERFLOW_FRACTION of their non-zero values below FP16's
    normal range (6.1e-5): [how many, of how many non-zero]. Subnormals keep fewer bits, and the converter raises
    values below 6e-8 to 6e-8: weights a folded BatchNormalization shrank ~10^4x can end there."""
    from onnx import numpy_helper

    found = {}
    for name, tensor in _fp16_constants(proto, kept):
        magnitude = np.abs(numpy_helper.to_array(tensor))
        nonzero = int(np.count_nonzero(magnitude))
        small = int(np.count_nonzero((magnitude > 0) & (magnitude < FP16_NORMAL)))
        if small > UNDERFLOW_FRACTION * nonzero:  # a few tiny weights in a layer are ordinary
            found[name] = [small, nonzero]
    return found


def _fp16_constants(proto: onnx.ModelProto, kept: frozenset[str]) -> list[tuple[str, onnx.TensorProto]]:
    """(name, tensor) of each float32 constant, initializer or Constant node (by its output), that the FP16
    model converts: not in ``kept``, not external."""
    tensors = [(t.name, t) for t in proto.graph.initializer]
    tensors += [
        (node.output[0], a.t)
        for node in proto.graph.node
        if node.op_type == "Constant"
        for a in node.attribute
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR
    ]
    return [(name, tensor) for name, tensor in tensors if name not in kept and inline_float32(tensor)]


def _as_converted(model: OnnxModel, fp32_constants: frozenset[str]) -> tuple[onnx.ModelProto, ConvertedConstants]:
    """The FP32 model with the constants the FP16 model holds (``model.proto`` itself when the conversion changes
    none of them), and what it changed."""
    base = onnx.ModelProto()
    base.CopyFrom(model.proto)
    folded = fold_unrepresentable_batchnorms(base)
    clamped = clamp_constants(base, fp32_constants)
    readers_of = readers(base.graph)
    constants = ConvertedConstants(
        clamped,
        {name: [node_name(n) for n in readers_of.get(name, [])] for name in clamped},
        subnormal_constants(base, fp32_constants),
        folded,
    )
    return (base if clamped or folded else model.proto), constants


def _groups(sizes: dict[str, int], batch: int, budget: int) -> list[list[str]]:
    """Tensors in groups whose activations for one batch stay within ``budget`` bytes (one tensor at least)."""
    groups: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if groups[-1] and used + size * batch > budget:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += size * batch
    return groups


def _into_softmax(graph: onnx.GraphProto) -> set[str]:
    """Tensors read only by Softmax nodes, directly or through shape-only ops (and not graph outputs)."""
    readers_of = readers(graph)
    outputs = {o.name for o in graph.output}
    known: dict[str, bool] = {}

    def only_softmax(name: str, depth: int = 0) -> bool:
        if name not in known:
            nodes = readers_of.get(name, [])
            known[name] = (
                bool(nodes)
                and name not in outputs
                and depth < 16
                and all(
                    n.op_type == "Softmax"
                    or (n.op_type in SHAPE_ONLY and n.input[0] == name and only_softmax(n.output[0], depth + 1))
                    for n in nodes
                )
            )
        return known[name]

    return {name for name in readers_of if only_softmax(name)}


def _sample_bytes(value: onnx.ValueInfoProto, batch_dims: dict[str, int]) -> int:
    """Bytes of one sample of a float32 tensor (dynamic dims other than the batch taken from ``batch_dims``, or 1)."""
    dims = [
        d.dim_value if d.HasField("dim_value") else batch_dims.get(d.dim_param, 1)
        for d in value.type.tensor_type.shape.dim
    ]
    return 4 * prod(dims[1:]) if dims else 4


def reference_pass(
    model: OnnxModel,
    dataset: Dataset,
    indices: np.ndarray,
    batch_size: int,
    with_ranges: bool,
    chunk_mb: int,
    progress: Callable[[int], None] | None = None,
    fp32_constants: frozenset[str] = frozenset(),
) -> Reference:
    """Run the FP32 model over ``indices`` once; with ``with_ranges`` every float intermediate is an output too,
    in groups whose activations for one batch stay within ``chunk_mb``, measured with the constants the FP16 model
    holds (those in ``fp32_constants`` it keeps in FP32)."""
    import time

    started = time.perf_counter()
    names = [o.name for o in model.proto.graph.output]
    wanted, producers, unknown = _float_intermediates(model) if with_ranges else ({}, {}, [])
    budget = chunk_mb << 20
    sizes = {name: _sample_bytes(v, {}) for name, v in wanted.items()}
    per_sample = sum(sizes.values())
    batch = max(1, min(batch_size, budget // max(per_sample, 1))) if wanted else batch_size
    groups = _groups(sizes, batch, budget)
    softmax_fed = _into_softmax(model.proto.graph) if wanted else set()
    # keyed by outputs (unique in ONNX), not id(): protobuf hands out a new wrapper object at each access
    label = {
        tuple(node.output): node.name or f"{node.op_type} #{index}" for index, node in enumerate(model.proto.graph.node)
    }
    readers_of = readers(model.proto.graph)
    stats = {
        name: TensorStats(
            producers[name],
            readers=tuple(label[tuple(n.output)] for n in readers_of.get(name, ())),
            into_softmax=name in softmax_fed,
        )
        for name in wanted
    }
    collected: dict[str, list[np.ndarray]] = {name: [] for name in names}
    # the ranges are FP16's: measured with the constants the FP16 model holds
    base, constants = _as_converted(model, fp32_constants) if wanted else (model.proto, ConvertedConstants())
    # what clamping alone does to the outputs: the clamped model's own outputs against FP32's, batch by batch
    moved = Agreement(names) if constants.clamped and groups else None
    with tempfile.TemporaryDirectory(prefix="compile-check-") as work:
        sessions = [
            _session_with_outputs(model, [wanted[n] for n in group], Path(work) / f"ranges-{i}.onnx", base)
            for i, group in enumerate(groups)
        ]
        if base is not model.proto:  # the outputs (the accuracy reference) stay the FP32 model's own
            sessions.insert(0, session(model.path, "model"))
            groups.insert(0, [])
        for chunk in batches(indices, batch):
            feed = dataset.read(chunk)
            for index, (sess, group) in enumerate(zip(sessions, groups, strict=True)):
                outputs = names if index == 0 or (index == 1 and moved) else []
                values = _run(sess, outputs + group, feed)
                for name, value in zip(group, values[len(outputs) :], strict=True):
                    stats[name].add(value)
                # samples on axis 0, as every comparison counts them
                got = dataset.batch_first(outputs, values[: len(outputs)], len(chunk))
                if index == 0:
                    for name, value in zip(names, got, strict=True):
                        collected[name].append(value)
                elif outputs:
                    moved.add([collected[name][-1] for name in names], got)
                del values
            if progress:
                progress(len(chunk))
    outputs = {name: np.concatenate(parts) if parts else np.empty(0) for name, parts in collected.items()}
    clamped_outputs = moved.reports() if moved else []
    return Reference(outputs, stats, unknown, round(time.perf_counter() - started, 3), constants, clamped_outputs)


def _run(sess, fetch: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    try:
        return sess.run(fetch, feed)
    except Exception as exc:
        raise InvalidInput(f"onnxruntime cannot run the model on the data: {first_line(exc)}") from None


def _session_with_outputs(
    model: OnnxModel, extra: list[onnx.ValueInfoProto], path: Path, base: onnx.ModelProto | None = None
):
    """An onnxruntime session of the model (or of ``base``, a changed copy of it) with ``extra`` tensors as outputs
    too (the model's own session if none and no copy)."""
    if not extra and (base is None or base is model.proto):
        return session(model.path, "model")
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto if base is None else base)
    proto.graph.output.extend(extra)
    # external data stays where it is: the copy is saved beside nothing, so point it at the model's folder
    if model.external_files:
        from onnx import external_data_helper

        for tensor in external_data_helper._get_all_tensors(proto):
            if external_data_helper.uses_external_data(tensor):
                for entry in tensor.external_data:
                    if entry.key == "location":
                        entry.value = str(model.path.parent.resolve() / entry.value)
    onnx.save_model(proto, path)
    return session(path, "model")


def fp32_constants(converted: onnx.ModelProto) -> frozenset[str]:
    """The float32 constants an FP16 model still holds (initializers, Constant outputs by their source names):
    those its FP32 nodes alone read. The converter renames a kept node's output ``<name>_cast_to_fp16`` (the Cast
    to FP16 it adds after it, which no FP16 node needs here, is removed again)."""
    graph = converted.graph
    return frozenset(t.name for t in graph.initializer if t.data_type == TensorProto.FLOAT) | {
        node.output[0].removesuffix("_cast_to_fp16")
        for node in graph.node
        if node.op_type == "Constant"
        and any(a.name == "value" and a.t.data_type == TensorProto.FLOAT for a in node.attribute)
    }


def fp16_tensors(built: OnnxModel | None) -> set[str] | None:
    """Tensors the FP16 model computes in float16 (the converter keeps some ops, and the inputs and outputs, in
    FP32); None when the built model is not at hand, so every float tensor counts."""
    if built is None:
        return None
    graph = built.proto.graph
    return {v.name for v in graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16} | {
        name
        for node in graph.node
        for name in (*node.input[:1], *node.output)
        if node.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.FLOAT16 for a in node.attribute)
    }
    # a Cast's input counts too: a tensor kept in FP32 whose reader computes in FP16 is converted, and overflows there


def check_ranges(
    reference: Reference, samples: int, in_fp16: set[str] | None, limit_of: Callable[[str], Limits] | None = None
) -> CheckResult:
    """The gate: no tensor computed in FP16 leaves its range, and the constants FP16 clamps do not move the outputs
    beyond their accuracy gates (``limit_of`` an output, FP16's defaults unless given); flushing is reported, not
    gated."""
    overflow, flushed, saturated = [], [], []
    for name, stat in reference.ranges.items():
        if in_fp16 is not None and name not in in_fp16:
            continue
        if stat.overflow and stat.into_softmax and not stat.positive_overflow:
            saturated.append((name, stat))
        elif stat.overflow:
            overflow.append((name, stat))
        elif stat.nonzero and stat.flushed / stat.nonzero > UNDERFLOW_FRACTION:
            flushed.append((name, stat))
    overflow.sort(key=lambda item: -item[1].abs_max)

    evidence = _tensor_evidence(overflow, saturated, flushed, reference.constants)
    checked = len(reference.ranges) if in_fp16 is None else len([n for n in reference.ranges if n in in_fp16])
    figures: dict[str, Any] = {
        "samples": samples,
        "tensors_checked": checked,
        "tensors_of_unknown_type": reference.skipped_tensors,
        "overflow": {n: {"node": s.node, "abs_max": s.abs_max, "count": s.overflow} for n, s in overflow},
        "underflow": {n: {"node": s.node, "flushed": s.flushed, "nonzero": s.nonzero} for n, s in flushed},
        "keep_fp32": sorted({name for _, s in overflow for name in _keep(s)}),
        "coverage": COVERAGE,
        "saturated_into_softmax": {
            n: {"node": s.node, "abs_max": s.abs_max, "count": s.overflow} for n, s in saturated
        },
        "clamped_constants": reference.constants.clamped,
        "clamped_readers": reference.constants.clamped_readers,
        "subnormal_constants": reference.constants.subnormal,
        "folded_batchnorms": reference.constants.folded,
    }
    peak = max((s.abs_max for n, s in reference.ranges.items() if in_fp16 is None or n in in_fp16), default=0.0)
    failure = None
    if overflow:
        name, stat = overflow[0]
        keep = figures["keep_fp32"][:5]
        failure = (
            f"{len(overflow)} tensor(s) overflow FP16; first: node {stat.node} output {name} reaches "
            f"{stat.abs_max:.6g} (> {FP16_MAX:g}): keep {', '.join(keep)} in FP32 (compile calibrate --exclude "
            f"{' --exclude '.join(keep)})"
        )
    elif moved := _moved_by_clamping(reference, limit_of or (lambda _: limits("fp16"))):
        figures["moved_by_clamping"] = moved
        readers = sorted({r for found in reference.constants.clamped_readers.values() for r in found})
        constants = ", ".join(f"{n} (|x| {v:.6g})" for n, v in reference.constants.clamped.items())
        failure = (
            f"clamping constant(s) {constants} to {FP16_MAX:g} moves the outputs: {moved[0]}; keep their "
            f"reader(s) in FP32 (compile calibrate --exclude {' --exclude '.join(readers)}, or --fallback auto)"
        )
    note = f"; {len(flushed)} tensor(s) lose values to underflow" if flushed else ""
    if saturated:
        note += f"; {len(saturated)} additive mask tensor(s) saturate before a Softmax (harmless)"
    return CheckResult(
        name="fp16-range",
        status=Status.FAILED if failure else Status.OK,
        evidence=evidence,
        figures=figures,
        summary=failure or f"{checked} FP16 tensors within range on {samples} samples (|x| up to {peak:.6g}){note}",
    )


def _keep(stat: TensorStats) -> list[str]:
    """What keeps an overflowing tensor out of FP16: its node and every reader of it."""
    return [stat.node, *(r for r in stat.readers if r != stat.node)]


def _tensor_evidence(overflow: list, saturated: list, flushed: list, constants: ConvertedConstants) -> list[str]:
    """A line per tensor that overflows, saturates into a Softmax or underflows, and per constant changed."""

    def advice(stat: TensorStats) -> str:
        readers = f" and its reader(s) {', '.join(_keep(stat)[1:])}" if len(_keep(stat)) > 1 else ""
        return f"keep {stat.node}{readers} in FP32 (compile calibrate --exclude {' --exclude '.join(_keep(stat))})"

    evidence = [
        f"overflow: node {s.node} output {n}: |x| up to {s.abs_max:.6g} > {FP16_MAX:g} ({s.overflow} of "
        f"{s.elements} values); {advice(s)}"
        for n, s in overflow[:MAX_EVIDENCE]
    ]
    evidence += [
        f"saturated: node {s.node} output {n}: down to -{s.abs_max:.6g} ({s.overflow} of {s.elements} values "
        f"beyond -65504 in FP16), read only by Softmax, where exp(-inf) is 0: a saturated additive mask, "
        f"harmless"
        for n, s in saturated[:MAX_EVIDENCE]
    ]
    evidence += _constant_evidence(constants)
    return evidence + [
        f"underflow: node {s.node} output {n}: {s.flushed} of {s.nonzero} non-zero values below FP16's "
        f"smallest subnormal {FP16_TINY:.3g} become 0"
        for n, s in flushed[:MAX_EVIDENCE]
    ]


def _moved_by_clamping(reference: Reference, limit_of: Callable[[str], Limits]) -> list[str]:
    """Each accuracy gate the FP32 model fails once it holds the constants FP16 clamps: the clamping alone moved
    its outputs (the FP16 model cannot do better)."""
    return [
        describe(gate)
        for output in reference.clamped_outputs
        for gate in judge(output, limit_of(output.name))
        if not gate.passed
    ]


def _constant_evidence(constants: ConvertedConstants) -> list[str]:
    """A line per constant the conversion clamps, folds or leaves subnormal."""
    lines = [
        f"clamped: constant {n}: |x| {v:.6g} is written as {FP16_MAX:g} in the FP16 model and judged at that value; "
        f"if the outputs move, keep its reader(s) in FP32 (compile calibrate --exclude "
        f"{' --exclude '.join(constants.clamped_readers.get(n, []))})"
        for n, v in list(constants.clamped.items())[:MAX_EVIDENCE]
    ]
    lines += [
        f"folded: BatchNormalization {n} is computed in FP32 before conversion (a constant of it is beyond FP16's "
        "range) and folded into the Conv before it, or into a Mul and an Add"
        for n in constants.folded[:MAX_EVIDENCE]
    ]
    return lines + [
        f"subnormal: constant {n}: {small} of {nonzero} non-zero values below FP16's normal range "
        f"{FP16_NORMAL:.2g} keep fewer bits (below 6e-08 they become 6e-08)"
        for n, (small, nonzero) in list(constants.subnormal.items())[:MAX_EVIDENCE]
    ]
