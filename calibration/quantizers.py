"""The three ways a calibration makes its model, behind one interface: onnxruntime's ``quantize_static`` (int8/fp8
Q/DQ from ranges collected here), NVIDIA ModelOpt's PTQ in its own interpreter (:mod:`calibration.modelopt`), and
FP16 conversion (:mod:`calibration.convert`), one class each. :func:`quantizer_for` picks one by ``--precision`` and
``--quantizer``; everything around them (the key, the build proof, the held-out report) is :mod:`calibration.steps`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import onnx

from calibration import calibrators, modelopt, rewire
from calibration.calibrators import HistogramOptions
from calibration.convert import convert_fp16
from compiler.core.errors import CheckFailed
from compiler.core.modelopt import versions as modelopt_versions
from compiler.core.options import CalibrationOptions
from compiler.core.progress import counter
from compiler.core.records import Progress
from compiler.data.datasets import Dataset
from compiler.data.model import OnnxModel

if TYPE_CHECKING:
    from onnxruntime.quantization.calibrate import TensorsData

    from calibration.fallback_reuse import Reuse


@dataclass(frozen=True)
class Job:
    """What a quantizer is given: the model, its calibration samples, the choices, and where to write."""

    source: OnnxModel
    dataset: Dataset
    samples: np.ndarray  # the calibration samples' indices
    precision: str
    method: str | None  # None for fp16
    batch_size: int
    options: CalibrationOptions
    keep_nodes: frozenset[str]  # --exclude, as node names and op types of the source
    keep_ops: frozenset[str]
    out: Path  # the model to write
    work: Path  # scratch, removed afterwards
    progress: Progress | None
    reuse: Reuse | None  # --fallback auto's first calibration, whose work a later one takes as is
    fixed_batch: int | None = None  # the batch size the model's inputs fix: every run takes exactly it


@dataclass(frozen=True)
class Quantized:
    """What a quantizer gives back: the model it wrote, the activation ranges, the nodes kept out, and the nodes
    that run quantized by op type with the float model they were made from (both None for a conversion)."""

    model: Path
    ranges: dict[str, tuple[float, float]]
    excluded: list[str]
    quantized_ops: dict[str, int] | None
    float_model: Path | None  # what the sensitivity pass compares each quantized node against


class Quantizer(Protocol):
    """One way of making the calibrated model. Another is a class here with an entry in :data:`QUANTIZERS` and its
    name among ``--quantizer``'s choices (:mod:`compiler.core.options`, :mod:`compiler.core.flags`)."""

    def refuse(self, options: CalibrationOptions) -> None:
        """What it cannot do is exit 2 before any work."""

    def key(self) -> tuple[dict[str, str], dict[str, str]]:
        """What enters the content key beyond the options: (options entries, tool versions); a broken tool is
        refused here, before any work."""

    def quantize(self, job: Job) -> Quantized:
        """Write ``job.out``."""


NONE_TO_QUANTIZE = "the model has none to quantize"
SELECTED_NONE = "ModelOpt selected none of them"
"""Why a quantizer's Q/DQ model has no quantized node when no ``--exclude`` explains it."""


class OnnxRuntime:
    """onnxruntime's path: pre-process, collect the ranges of the tensors TensorRT quantizes, write Q/DQ with
    ``quantize_static`` from them. A fallback's later calibrations take the first one's pre-processed model, ranges
    and Q/DQ model (:class:`calibration.fallback_reuse.Reuse`)."""

    def refuse(self, options: CalibrationOptions) -> None:
        pass

    def key(self) -> tuple[dict[str, str], dict[str, str]]:
        return {}, {}

    def quantize(self, job: Job) -> Quantized:
        reuse = job.reuse
        prepared = (reuse.prepare if reuse else calibrators.prepare)(job.source.path, job.work)
        excluded = matching(onnx.load_model(prepared, load_external_data=False), job.keep_nodes, job.keep_ops)
        calibrators.refuse_bad_weights(prepared, job.precision, frozenset(excluded))
        tensors = self.collect(job, prepared, frozenset(excluded))
        value_ranges = calibrators.ranges(tensors)
        if not (reuse and reuse.write_without(job.out, frozenset(excluded))):
            calibrators.quantize(prepared, tensors, job.precision, job.method, job.out, job.work, frozenset(excluded))
            rewire.keep_float_consumers(job.out, frozenset(excluded))
            rewire.keep_float_weights(job.out, prepared, frozenset(excluded))
            if reuse:
                reuse.keep_model(job.out)
        return Quantized(job.out, value_ranges, excluded, counted(job, excluded, NONE_TO_QUANTIZE), prepared)

    @staticmethod
    def collect(job: Job, prepared: Path, excluded: frozenset[str]) -> TensorsData:
        """onnxruntime's TensorsData of the tensors to calibrate: the fallback's first ones when it has them all."""
        wanted = calibrators.tensors_to_calibrate(prepared, excluded)
        tensors = job.reuse.ranges(wanted) if job.reuse else None
        if tensors is None:
            tensors = calibrators.collect_ranges(
                prepared,
                job.dataset,
                job.samples,
                job.method,
                job.batch_size,
                HistogramOptions(num_bins=job.options.num_bins, percentile=job.options.percentile),
                job.options.chunk_mb,
                job.work,
                counter("calibrate", len(job.samples), job.progress),
                wanted,
                job.fixed_batch,
                f"{job.source.path}'s range collection",
            )
            if job.reuse:
                job.reuse.keep(tensors)
        return tensors


class ModelOpt:
    """``--quantizer modelopt``: NVIDIA ModelOpt's PTQ in its own interpreter (:mod:`calibration.modelopt`); another
    quantizer, another result (its name and versions enter the key)."""

    def refuse(self, options: CalibrationOptions) -> None:
        modelopt.refuse_unsupported(options)

    def key(self) -> tuple[dict[str, str], dict[str, str]]:
        return {"quantizer": "modelopt"}, modelopt_versions()  # checked now: a broken venv is exit 3 before any work

    def quantize(self, job: Job) -> Quantized:
        excluded = matching(job.source.proto, job.keep_nodes, job.keep_ops)
        value_ranges = modelopt.quantize(
            job.source,
            job.dataset.read(job.samples),
            job.precision,
            job.method,
            job.out,
            job.work,
            job.keep_nodes,
            job.keep_ops,
        )
        twin = modelopt.float_twin(job.source, job.out, job.work)
        return Quantized(job.out, value_ranges, excluded, counted(job, excluded, SELECTED_NONE), twin)


class Fp16Conversion:
    """fp16: the model converted (onnxruntime's float16 converter); nothing is calibrated or quantized."""

    def refuse(self, options: CalibrationOptions) -> None:
        pass

    def key(self) -> tuple[dict[str, str], dict[str, str]]:
        from compiler.core.records import FP16_CONVERSION

        return {"fp16_conversion": str(FP16_CONVERSION)}, {}

    def quantize(self, job: Job) -> Quantized:
        excluded = matching(job.source.proto, job.keep_nodes, job.keep_ops)
        convert_fp16(job.source.path, job.out, job.keep_nodes, job.keep_ops)
        return Quantized(job.out, {}, excluded, None, None)


def counted(job: Job, excluded: list[str], none_reason: str) -> dict[str, int]:
    """The nodes of the written Q/DQ model that run quantized, by op type, with the source's metadata put back on
    it; a model with none is refused, saying why (``none_reason`` when no ``--exclude`` explains it)."""
    quantized_ops = calibrators.quantized_nodes(job.out)
    if not quantized_ops:
        options = job.options
        reason = f"every one of them is excluded (--exclude {' --exclude '.join(options.exclude)})"
        raise CheckFailed(
            f"{job.source.path}: {job.precision} calibration quantized no node: TensorRT runs "
            f"{job.precision.upper()} only in {', '.join(calibrators.TENSORRT_QUANTIZED_OPS)} with float "
            f"activations, and {reason if excluded else none_reason}; build it in fp16 (--precision fp16) instead"
        )
    calibrators.keep_metadata(job.source.proto, job.out)
    return quantized_ops


def matching(proto: onnx.ModelProto, keep_nodes: frozenset[str], keep_ops: frozenset[str]) -> list[str]:
    """Names of the nodes ``--exclude`` keeps in float: those named (also as onnxruntime's pre-processing renames a
    node it fuses, ``NAME/MatMulAddFusion``), and every node of the op types."""
    from calibration.sensitivity import source_name

    return sorted(
        {
            node.name
            for node in proto.graph.node
            if node.name and (source_name(node.name, keep_nodes) in keep_nodes or node.op_type in keep_ops)
        }
    )


QUANTIZERS: dict[str, Callable[[], Quantizer]] = {"onnxruntime": OnnxRuntime, "modelopt": ModelOpt}
"""``--quantizer``'s choices (:data:`compiler.core.options.QUANTIZERS`; a test holds them equal)."""


def quantizer_for(options: CalibrationOptions) -> Quantizer:
    """fp16 converts whatever ``--quantizer`` says (it quantizes nothing); int8 and fp8 by ``--quantizer``."""
    return Fp16Conversion() if options.precision == "fp16" else QUANTIZERS[options.quantizer]()
