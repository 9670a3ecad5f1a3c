"""FP16 by converting the model: TensorRT-RTX and TensorRT 11 take precision from the ONNX types."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from compiler.core.errors import InvalidInput
from compiler.data.model import first_line, load_model, readers


def convert_fp16(
    src: Path, dst: Path, keep_nodes: frozenset[str] = frozenset(), keep_ops: frozenset[str] = frozenset()
) -> None:
    """Write an FP16 copy of ``src`` to ``dst``; inputs and outputs stay float32 (``keep_io_types``).

    Uses onnxruntime's float16 converter (its default block list keeps ops without FP16 kernels in FP32;
    values beyond FP16's range are clamped to +-65504). ``keep_nodes`` (names) and ``keep_ops`` (op types) stay in FP32
    too. The original metadata_props are kept.
    """
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    from calibration.calibrators import quiet, save_model

    src, dst = Path(src), Path(dst)
    model = load_model(src, digest=False)
    proto = onnx.load_model(model.path)  # external data was validated by load_model
    metadata = [(p.key, p.value) for p in proto.metadata_props]
    try:
        with quiet():
            converted = convert_float_to_float16(
                proto,
                keep_io_types=True,
                op_block_list=sorted(set(DEFAULT_OP_BLOCK_LIST) | keep_ops),
                node_block_list=sorted(keep_nodes),
            )
    except Exception as exc:
        raise InvalidInput(f"{src}: FP16 conversion failed ({first_line(exc)})") from None
    _drop_round_trips(converted.graph)
    _sort_topologically(converted.graph)
    del converted.metadata_props[:]
    for key, value in metadata:
        converted.metadata_props.add(key=key, value=value)
    dst.parent.mkdir(parents=True, exist_ok=True)
    staging = dst.with_name(f".{dst.name}.{os.getpid()}")
    try:
        save_model(converted, staging, data_name=dst.name + ".data")
        os.replace(staging, dst)
    except BaseException:  # a stop or a full disk mid-save: no half-written model stays in the cache
        staging.unlink(missing_ok=True)
        raise


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """The converter appends the input Casts at the end; the ONNX checker needs producers first."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(name in available for name in n.input)]
        if not ready:  # a cycle or an outer-scope name: keep the remaining order
            ordered.extend(pending)
            break
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        ready_ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ready_ids]
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in ordered]
    del graph.node[:]
    graph.node.extend(nodes)


def _cast_to(node: onnx.NodeProto) -> int | None:
    if node.op_type != "Cast":
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _drop_round_trips(graph: onnx.GraphProto) -> None:
    """Remove FP32 -> FP16 -> FP32 Cast pairs the converter puts between two nodes it keeps in FP32.

    onnxruntime's converter casts every blocked node's output to FP16 and back before the next blocked node, so a
    chain kept in FP32 (``--exclude``) still squeezes its values through FP16, and overflows there on a GPU. The
    readers of the round trip read the FP32 value itself instead.
    """
    readers_of = readers(graph)
    outputs = {o.name for o in graph.output}
    renamed: dict[str, str] = {}
    dropped: set[int] = set()
    removed_tensors: set[str] = set()
    for node in graph.node:
        if _cast_to(node) != onnx.TensorProto.FLOAT16 or node.output[0] in outputs:
            continue
        half = node.output[0]
        back = readers_of.get(half, [])
        if not back or any(_cast_to(r) != onnx.TensorProto.FLOAT or r.output[0] in outputs for r in back):
            continue
        for cast in back:
            renamed[cast.output[0]] = node.input[0]
            dropped.add(id(cast))
            removed_tensors.add(cast.output[0])
        dropped.add(id(node))
        removed_tensors.add(half)
    if not dropped:
        return
    kept = [n for n in graph.node if id(n) not in dropped]
    for node in kept:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
    del graph.node[:]
    graph.node.extend(kept)
    values = [v for v in graph.value_info if v.name not in removed_tensors]
    del graph.value_info[:]
    graph.value_info.extend(values)
