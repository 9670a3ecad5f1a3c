"""FP16 by converting the model: TensorRT-RTX and TensorRT 11 take precision from the ONNX types."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from compiler.core.errors import InvalidInput
from compiler.data.model import first_line, load_model


def convert_fp16(src: Path, dst: Path) -> None:
    """Write an FP16 copy of ``src`` to ``dst``; inputs and outputs stay float32 (``keep_io_types``).

    Uses onnxruntime's float16 converter (its default block list keeps ops without FP16 kernels in FP32;
    values beyond FP16's range are clamped). The original metadata_props are kept.
    """
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from calibration.calibrators import quiet, save_model

    src, dst = Path(src), Path(dst)
    model = load_model(src, digest=False)
    proto = onnx.load_model(model.path)  # external data was validated by load_model
    metadata = [(p.key, p.value) for p in proto.metadata_props]
    try:
        with quiet():
            converted = convert_float_to_float16(proto, keep_io_types=True)
    except Exception as exc:
        raise InvalidInput(f"{src}: FP16 conversion failed ({first_line(exc)})") from None
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
