"""Activation ranges with onnxruntime's calibrators, the Q/DQ model, and TensorRT's calibration cache.

Built on ``onnxruntime.quantization``: ``quant_pre_process`` (folds Constant weights and Conv+BatchNorm),
``create_calibrator`` fed in chunks (histograms merge across ``collect_data`` calls, so memory is bounded
by the chunk, not the sample count) and ``quantize_static`` (QDQ, symmetric, per-channel weights,
``QuantizeBias: False``) reading the ranges we computed instead of calibrating again.
"""

from __future__ import annotations

import contextlib
import io
import logging
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.data.datasets import Dataset
from compiler.data.footprint import Fit, sample_shapes
from compiler.data.model import first_line, name_unnamed_nodes, node_name
from compiler.data.sampling import batches
from compiler.data.session import session

PER_CHANNEL_OPSET = 13
"""DequantizeLinear's ``axis`` (per-channel weights) needs opset 13."""
FP8_MAX = 448.0
"""Largest finite float8 E4M3FN value: an FP8 scale maps a tensor's amax onto it (TensorRT's convention)."""
INT8_MAX = 127.0
TENSORRT_QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""The ops TensorRT runs in INT8/FP8 from Q/DQ on their inputs: the only ones quantized. onnxruntime would also
quantize Add, Mul, LayerNormalization, Gather, Softmax..., which puts quantized constants where TensorRT refuses
them (``Quantized constant ... is only allowed before DQ``) and costs accuracy for no speed."""
QUANTIZED_OUTPUTS_EXCLUDED = list(TENSORRT_QUANTIZED_OPS)
"""Q/DQ goes on the inputs of these ops, not their outputs (TensorRT fuses the epilogue; logits stay float)."""
BIAS_OPS = frozenset({"Conv", "ConvTranspose", "Gemm"})
"""Ops whose third input onnxruntime's quantizer quantizes as a bias (int32, scale from the node's other inputs)."""

Progress = Callable[[int], None]


@dataclass(frozen=True)
class HistogramOptions:
    num_bins: int = 2048
    """TensorRT's own histogram size; onnxruntime's entropy default (128, with 128 quantized bins) has one
    candidate threshold and so equals MinMax."""
    num_quantized_bins: int = 128
    percentile: float = 99.999


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """onnxruntime's quantization tools print to stdout and log warnings (and the sessions they make log through
    onnxruntime's default logger: "Removing initializer ... not used"): keep our streams clean."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def save_model(proto: onnx.ModelProto, path: Path, data_name: str | None = None) -> None:
    """Save, with weights as external data next to it (``data_name``) when beyond protobuf's limit. Serialised
    once and measured by its bytes: asking a large proto its ``ByteSize`` costs as much as serialising it."""
    from google.protobuf.message import EncodeError

    try:
        serialized: bytes | None = proto.SerializeToString()
    except EncodeError:  # over 2 GB: protobuf cannot hold it in one message
        serialized = None
    if serialized is not None and len(serialized) <= 2**31 - 2**26:
        path.write_bytes(serialized)
        return
    del serialized
    onnx.save_model(
        proto, path, save_as_external_data=True, location=data_name or path.name + ".data", all_tensors_to_one_file=True
    )


def default_opset(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def prepare(model_path: Path, work: Path) -> Path:
    """Opset upgrade (per-channel weights need 13) and onnxruntime's quantization pre-processing.

    Pre-processing turns Constant-node weights into initializers, folds Conv+BatchNormalization and runs
    shape inference so every tensor can be calibrated. Symbolic shape inference is skipped (it needs sympy,
    and ONNX shape inference already ran when the model was loaded).
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    proto = onnx.load_model(model_path)
    name_unnamed_nodes(proto.graph)
    unshare_biases(proto.graph)
    if default_opset(proto) < PER_CHANNEL_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, PER_CHANNEL_OPSET)
        except Exception as exc:
            raise InvalidInput(
                f"{model_path}: cannot upgrade opset {default_opset(proto)} to {PER_CHANNEL_OPSET} "
                f"for per-channel quantization ({first_line(exc)}); export with opset >= 13"
            ) from None
    upgraded = work / "upgraded.onnx"
    save_model(proto, upgraded)
    del proto
    prepared = work / "prepared.onnx"
    try:
        with quiet():
            quant_pre_process(
                str(upgraded),
                str(prepared),
                skip_symbolic_shape=True,
                save_as_external_data=upgraded.stat().st_size > 2**30,
            )
    except Exception as exc:
        raise InvalidInput(
            f"{model_path}: onnxruntime cannot pre-process the model for quantization ({first_line(exc)})"
        ) from None
    return prepared


def unshare_biases(graph: onnx.GraphProto) -> None:
    """Give each Conv/ConvTranspose/Gemm that shares its float bias initializer with other nodes a copy of its own.
    onnxruntime's quantizer copies a shared bias itself (a bias's scale is its node's input scale x weight scale),
    naming the copy by appending a number without looking at node outputs: with tf2onnx's names, ``conv1d_25`` and
    ``2`` is ``conv1d_252``, another Conv's output, and the bias then reads that activation, which TensorRT refuses
    ("dynamic shape is not supported for weights"). Our copies are named apart from every name in the graph."""
    initializers = {t.name: t for t in graph.initializer}
    readers = Counter(name for node in graph.node for name in node.input)
    taken = set(initializers) | {n for node in graph.node for n in (*node.input, *node.output)}
    taken |= {v.name for v in (*graph.input, *graph.output)}
    for node in graph.node:
        bias = initializers.get(node.input[2]) if node.op_type in BIAS_OPS and len(node.input) > 2 else None
        if bias is None or bias.data_type != onnx.TensorProto.FLOAT or readers[bias.name] < 2:
            continue
        name = next(n for k in range(len(taken) + 1) if (n := f"{bias.name}__bias_{k}") not in taken)
        copy = onnx.TensorProto()
        copy.CopyFrom(bias)
        copy.name = name
        graph.initializer.append(copy)
        node.input[2] = name
        readers[bias.name] -= 1
        taken.add(name)


def tensors_to_calibrate(prepared: Path, excluded: frozenset[str] = frozenset()) -> set[str]:
    """The float activations (not weights) around TensorRT's quantized ops, but for the nodes ``excluded`` (by name):
    their inputs, which Q/DQ goes on, and their outputs, which TensorRT <= 10 reads from the calibration cache to
    keep the op's output in INT8. Only these are calibrated: never a -3.4e38 mask bias or an index tensor."""
    proto = onnx.load_model(prepared, load_external_data=False)
    graph = proto.graph
    floats = {
        v.name
        for v in (*graph.input, *graph.value_info, *graph.output)
        if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    }
    weights = {i.name for i in graph.initializer}
    return {
        name
        for node in graph.node
        if node.op_type in TENSORRT_QUANTIZED_OPS and node.name not in excluded
        for name in (*node.input, *node.output)
        if name in floats and name not in weights
    }


def _ort_method(method: str):
    from onnxruntime.quantization import CalibrationMethod

    return {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[method]


def create(prepared: Path, method: str, options: HistogramOptions, work: Path, wanted: set[str]):
    """onnxruntime's calibrator for ``method`` (what ``create_calibrator`` makes: symmetric, with a meaningful
    histogram for entropy/percentile) that collects only the tensors ``wanted``: a mask bias of -3.4e38 or an
    index tensor never reaches a histogram (entropy's ``Too many bins for data range``), and memory is spent on
    the quantized tensors only."""
    from onnxruntime.quantization.calibrate import EntropyCalibrater, MinMaxCalibrater, PercentileCalibrater

    common = {
        "augmented_model_path": str(work / "augmented.onnx"),
        "use_external_data_format": prepared.stat().st_size > 2**30,
        "symmetric": True,
    }
    base, extra = {
        "minmax": (MinMaxCalibrater, {}),
        "entropy": (
            EntropyCalibrater,
            {"num_bins": options.num_bins, "num_quantized_bins": options.num_quantized_bins},
        ),
        "percentile": (PercentileCalibrater, {"num_bins": options.num_bins, "percentile": options.percentile}),
    }[method]

    class Selective(base):  # type: ignore[misc, valid-type]
        def select_tensors_to_calibrate(self, model):
            tensors, value_infos = super().select_tensors_to_calibrate(model)
            return tensors & wanted, value_infos

        def create_inference_session(self):
            """Our session's options (onnxruntime's own: no graph optimization, and a memory pattern that held
            eleven times the activations a run needs), its graph not optimized either."""
            self.infer_session = session(Path(self.augmented_model_path), "model", optimized=False)

    try:
        with quiet():
            calibrator = Selective(str(prepared), list(TENSORRT_QUANTIZED_OPS), **common, **extra)
            calibrator.augment_graph()
            calibrator.create_inference_session()
            return calibrator
    except Exception as exc:
        raise InvalidInput(f"onnxruntime cannot run the model for calibration: {first_line(exc)}") from None


class _Reader:
    """A CalibrationDataReader over a list of batches of sample indices."""

    def __init__(self, dataset: Dataset, chunk: list[np.ndarray], progress: Progress | None) -> None:
        self.dataset, self.batches, self.progress = dataset, iter(chunk), progress

    def get_next(self) -> dict[str, np.ndarray] | None:
        indices = next(self.batches, None)
        if indices is None:
            return None
        feed = self.dataset.read(indices)
        if self.progress:
            self.progress(len(indices))
        return feed


def chunks(indices: np.ndarray, batch_size: int, samples_per_chunk: int) -> list[list[np.ndarray]]:
    """Full batches grouped into chunks; a trailing partial batch is a chunk of its own (onnxruntime's
    histogram collector stacks one call's batches, so they must all have one size)."""
    full = [b for b in batches(indices, batch_size) if len(b) == batch_size]
    rest = [b for b in batches(indices[len(full) * batch_size :], batch_size)]
    per_chunk = max(1, samples_per_chunk // batch_size)
    grouped = [full[i : i + per_chunk] for i in range(0, len(full), per_chunk)]
    return grouped + [[b] for b in rest]


class _Weighed:
    """The calibrator's session, remembering what its last run's outputs weighed: the first batch, collected like
    the rest, sets the chunk size for the memory budget (no run of its own)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.nbytes = inner, 0

    def run(self, names: Any, feed: dict[str, np.ndarray]) -> list:
        outputs = self.inner.run(names, feed)
        self.nbytes = sum(getattr(o, "nbytes", 0) for o in outputs)
        return outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def collect_ranges(
    prepared: Path,
    dataset: Dataset,
    indices: np.ndarray,
    method: str,
    batch_size: int,
    options: HistogramOptions,
    chunk_mb: int,
    work: Path,
    progress: Progress | None = None,
    wanted: set[str] | None = None,
    fixed_batch: int | None = None,
    what: str = "the model",
):
    """Run the FP32 model over the calibration samples in chunks, collecting the tensors ``wanted`` (by default,
    those :func:`tensors_to_calibrate` names); returns onnxruntime's TensorsData. Each run takes as many samples
    (``batch_size`` at most) as ``chunk_mb`` holds of the calibration model's activations; entropy's
    ``collect_data`` call, which keeps every collected tensor, as many as ``chunk_mb`` holds of those. Entropy first
    collects min/max over the same samples: its histograms span that range (:mod:`calibration.histograms`), so their
    memory does not grow with the samples. Percentile takes each tensor's exact tail in the graph
    (:mod:`calibration.tails`)."""
    wanted = tensors_to_calibrate(prepared) if wanted is None else wanted
    fit = Fit(sample_shapes(dataset, indices), chunk_mb, batch_size, fixed_batch, what)
    if method == "percentile":
        return _percentile(prepared, dataset, indices, options.percentile, fit, progress, wanted)
    spans = None
    if method == "entropy":
        first = work / "ranges"
        first.mkdir(exist_ok=True)
        found = collect_ranges(prepared, dataset, indices, "minmax", batch_size, options, chunk_mb, first, None,
                               wanted, fixed_batch, what)  # fmt: skip
        spans = {name: amax(low, high) for name, (low, high) in ranges(found).items()}
    calibrator = create(prepared, method, options, work, wanted)
    if spans is not None:
        from calibration.histograms import FixedRangeCollector

        calibrator.collector = FixedRangeCollector(method, options.num_bins, options.num_quantized_bins, spans)
    run = fit.samples([Path(calibrator.augmented_model_path)])
    first, rest = indices[:run], indices[run:]
    weighed = calibrator.infer_session = _Weighed(calibrator.infer_session)
    try:
        with quiet():
            calibrator.collect_data(_Reader(dataset, [first], progress))
    except InvalidInput:  # the data's own problem (a damaged file), already named
        raise
    except Exception as exc:
        raise InvalidInput(f"onnxruntime cannot run the model on the data: {first_line(exc)}") from None
    samples_per_chunk = max(run, (chunk_mb << 20) // max(1, weighed.nbytes // len(first)))
    try:
        for chunk in chunks(rest, run, samples_per_chunk):
            with quiet():
                calibrator.collect_data(_Reader(dataset, chunk, progress))
        with quiet():
            tensors = calibrator.compute_data()
    except InvalidInput:
        raise
    except Exception as exc:
        raise InvalidInput(f"onnxruntime failed while calibrating: {first_line(exc)}") from None
    finally:
        del calibrator
    return tensors


def _percentile(
    prepared: Path, dataset: Dataset, indices: np.ndarray, percentile: float, fit: Fit, progress, wanted: set[str]
):
    """``--method percentile``: onnxruntime's TensorsData of each tensor's percentile of |x|, from its exact tail
    taken in the graph (:mod:`calibration.tails`), the model run in batches that ``chunk_mb`` holds."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorData, TensorsData

    from calibration.tails import augment, collect_tails, tail_bytes

    tensors = sorted(wanted)
    model = prepared.parent / "tails.onnx"  # beside the prepared model, whose external data it reads
    outputs = augment(prepared, tensors, model)
    proto = onnx.load_model(model, load_external_data=False)
    run = fit.samples([proto], lambda sizes: tail_bytes(outputs, sizes, percentile, len(indices)))
    sess = session(model, "model", optimized=False)
    try:
        tails = collect_tails(sess, dataset, indices, run, fit.fixed_batch, outputs, percentile, progress)
    except InvalidInput:
        raise
    except Exception as exc:
        raise InvalidInput(f"onnxruntime failed while calibrating: {first_line(exc)}") from None
    found = {tensor: np.float32(tails.threshold(tensor)) for tensor in tensors}
    data = {t: TensorData(lowest=np.array(-v, np.float32), highest=np.array(v, np.float32)) for t, v in found.items()}
    return TensorsData(CalibrationMethod.Percentile, data)


def ranges(tensors) -> dict[str, tuple[float, float]]:
    """Per-tensor (min, max) from onnxruntime's TensorsData."""
    out = {}
    for name, data in sorted(tensors.data.items()):
        low, high = data.range_value
        out[name] = (float(np.min(low)), float(np.max(high)))
    return out


def amax(low: float, high: float) -> float:
    return max(abs(low), abs(high))


SMALLEST_SCALE = float(np.finfo(np.float32).tiny)
"""No scale is written below float32's smallest normal (1.2e-38): TensorRT uses the model's scales as given, and a
zero or subnormal one (an all-zero or denormal weight channel: amax 3e-39) divides into NaN or infinity. A range
whose scale would fall below it gets 1.0, onnxruntime's own rule for int8: its values are zero at any such scale."""


def scale(low: float, high: float, precision: str) -> float:
    """The symmetric scale onnxruntime writes for a range: amax / 127 (int8) or amax / 448 (fp8); 1.0 when that is
    below :data:`SMALLEST_SCALE` (an all-zero or denormal range)."""
    value = amax(low, high) / (FP8_MAX if precision == "fp8" else INT8_MAX)
    return value if value >= SMALLEST_SCALE else 1.0


def _normal(value) -> np.ndarray:
    """``value`` (a scale or an array of them, in its dtype) with every finite scale below :data:`SMALLEST_SCALE`
    made 1.0; a non-finite one is left for onnxruntime's checks (our own refuse those earlier)."""
    value = np.asarray(value)
    return np.array(np.where(np.abs(value) < SMALLEST_SCALE, 1.0, value), dtype=value.dtype)


def _weight_params(original: Callable) -> Callable:
    """onnxruntime's ``compute_data_quant_params`` (one weight channel's zero point and scale) with TensorRT's
    scale for FP8, amax / 448 (onnxruntime derives it from the channel's standard deviation: 0 for a constant
    channel, which wrote NaN for an all-zero one and quantized a constant 0.25 to 5e-36, and clipping beyond 4.5
    sigma), and every scale normal."""
    from onnx import TensorProto

    def params(data, quant_type, *args, **kwargs):
        zero_point, value = original(data, quant_type, *args, **kwargs)
        if quant_type == TensorProto.FLOAT8E4M3FN:
            value = np.array(np.abs(data).max(initial=0.0) / FP8_MAX, dtype=np.asarray(value).dtype)
        return zero_point, _normal(value)

    return params


@contextlib.contextmanager
def normal_scales() -> Iterator[None]:
    """onnxruntime's scale functions, for the length of a quantization, writing only normal scales (and FP8 weight
    scales as TensorRT computes them, :func:`_weight_params`). Its per-channel FP8 weight scales have no floor: the
    scale of an all-zero channel was 0, which wrote NaN weights (``Initializer 'conv.w_quantized' has nan``). The
    weights themselves are not touched."""
    from onnxruntime.quantization import qdq_quantizer, quant_utils

    def floored(function: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            zero_point, value = function(*args, **kwargs)
            return zero_point, _normal(value)

        return wrapped

    originals = {
        name: getattr(quant_utils, name)
        for name in ("compute_data_quant_params", "compute_scale_zp", "compute_scale_zp_float8")
    }
    patched = {name: floored(function) for name, function in originals.items()}
    patched["compute_data_quant_params"] = _weight_params(originals["compute_data_quant_params"])
    try:
        for module in (quant_utils, qdq_quantizer):
            for name, function in patched.items():
                setattr(module, name, function)
        yield
    finally:
        for module in (quant_utils, qdq_quantizer):
            for name, function in originals.items():
                setattr(module, name, function)


def quantize(
    prepared: Path, tensors, precision: str, method: str, out: Path, work: Path, excluded: frozenset[str] = frozenset()
) -> None:
    """Write the Q/DQ model with ``quantize_static`` from the ranges we computed (no second calibration).

    FP8: onnxruntime only quantizes to float8 from its "distribution" statistics and derives the scale
    from a standard deviation (scale = std / std_f8). We give it the std that yields TensorRT's amax/448
    scale for our range, so the activation scale follows the chosen method.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data
    from onnxruntime.quantization.quant_utils import compute_scale_zp_float8

    refuse_bad_ranges(prepared, ranges(tensors), precision, excluded)
    calibrate_method = _ort_method(method)
    quant_type = QuantType.QInt8
    if precision == "fp8":
        quant_type, calibrate_method = QuantType.QFLOAT8E4M3FN, CalibrationMethod.Distribution
        unit = float(compute_scale_zp_float8(onnx.TensorProto.FLOAT8E4M3FN, np.array(1.0, np.float32))[1])
        data = {}
        for name, (low, high) in ranges(tensors).items():
            limit = np.float32(amax(low, high))
            data[name] = TensorData(
                lowest=np.array(-limit, np.float32),
                highest=np.array(limit, np.float32),
                avg=np.array(0.0, np.float32),
                std=np.array(scale(low, high, "fp8") / unit, np.float32),
            )
        tensors = TensorsData(CalibrationMethod.Distribution, data)
    ranges_file = work / "ranges.json"
    save_tensors_data(tensors, ranges_file)
    try:
        with quiet(), normal_scales():
            quantize_static(
                str(prepared),
                str(out),
                None,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(TENSORRT_QUANTIZED_OPS),
                nodes_to_exclude=sorted(excluded),
                per_channel=True,
                activation_type=quant_type,
                weight_type=quant_type,
                calibrate_method=calibrate_method,
                calibration_cache_path=ranges_file,
                use_external_data_format=prepared.stat().st_size > 2**30,
                extra_options={
                    "ActivationSymmetric": True,
                    "WeightSymmetric": True,
                    "QuantizeBias": False,
                    "QDQDisableWeightAdjustForInt32Bias": True,  # biases stay float: no int32 range to make room for
                    "OpTypesToExcludeOutputQuantization": QUANTIZED_OUTPUTS_EXCLUDED,
                },
            )
    except (OSError, MemoryError):  # the machine's doing, reported as such
        raise
    except Exception as exc:
        raise _quantizer_failure(exc, onnx.load_model(prepared, load_external_data=False).graph, precision) from exc


class QuantizerCrash(RuntimeError):
    """onnxruntime's quantizer failed on a model our checks passed: a bug (ours, or onnxruntime's that we must
    route around), reported as an internal error naming the node it was quantizing; the cause stays chained."""


def _quantizer_failure(exc: Exception, graph: onnx.GraphProto, precision: str) -> Exception:
    """What a failure inside ``quantize_static`` is: a refusal naming a tensor of the model (exit 1, naming the nodes
    that read it and their ``--exclude``), or else a crash of ours (:class:`QuantizerCrash`)."""
    text = str(exc)
    named = [name for name in _tensor_names(graph) if f"'{name}'" in text or f"'{name}_quantized'" in text]
    readers = [node for node in graph.node if set(node.input) & set(named)]
    if readers:
        return CheckFailed(
            f"onnxruntime could not write the {precision} Q/DQ model: {first_line(exc)} (read by "
            f"{', '.join(f'node {n.name} ({n.op_type})' for n in readers)}); keep "
            f"{'it' if len(readers) == 1 else 'them'} in float with {_excludes(readers)}, or calibrate another "
            "precision"
        )
    node = _node_in_flight(exc)
    where = f" on node {node.name} ({node.op_type})" if node is not None else ""
    advice = f"; --exclude {node.name} may avoid it" if node is not None and node.name else ""
    return QuantizerCrash(
        f"onnxruntime's {precision} quantizer crashed{where}: {type(exc).__name__}: {first_line(exc)}{advice}"
    )


def _node_in_flight(exc: BaseException) -> onnx.NodeProto | None:
    """The node onnxruntime's quantizer was working on when ``exc`` was raised: the innermost frame that holds one
    (a ``node`` of its loops, an op quantizer's ``self.node``)."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            try:
                node = value if isinstance(value, onnx.NodeProto) else getattr(value, "node", None)
            except Exception:  # an object whose attributes raise: it holds no node we can name
                continue
            if isinstance(node, onnx.NodeProto):
                return node
    return None


def _tensor_names(graph: onnx.GraphProto) -> set[str]:
    return {i.name for i in graph.initializer} | {name for node in graph.node for name in node.input if name}


def _excludes(nodes: Iterable[onnx.NodeProto]) -> str:
    return " ".join(f"--exclude {name}" for name in sorted({node_name(n) for n in nodes} - {""}))


def refuse_bad_weights(prepared: Path, precision: str, excluded: frozenset[str] = frozenset()) -> None:
    """Every quantized node whose weight holds NaN or infinity (no scale exists for it), in one error, before
    calibrating: its activations downstream would be named next, an effect of the same cause."""
    graph = onnx.load_model(prepared, load_external_data=False).graph
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    weights = {i.name: i for i in graph.initializer if i.data_type in floats}

    def why(name: str) -> str | None:
        if name not in weights:
            return None
        values = numpy_helper.to_array(weights[name], base_dir=str(prepared.parent))
        count = int(values.size - np.isfinite(values).sum())
        return f"weight {name} holds {count} NaN or infinite value(s)" if count else None

    _refuse(graph, precision, excluded, why)


def refuse_bad_ranges(
    prepared: Path, found: dict[str, tuple[float, float]], precision: str, excluded: frozenset[str] = frozenset()
) -> None:
    """Every node next to an activation whose calibrated range is not finite (no scale exists for it), in one
    error: the quantized nodes that read it, or the node that makes it when none does."""
    bad = {name: bounds for name, bounds in found.items() if not all(np.isfinite(bounds))}

    def why(name: str) -> str | None:
        return (
            f"tensor {name} has the calibrated range [{bad[name][0]:g}, {bad[name][1]:g}], which is not finite"
            if name in bad
            else None
        )

    if bad:
        _refuse(onnx.load_model(prepared, load_external_data=False).graph, precision, excluded, why, set(bad))


def _refuse(
    graph: onnx.GraphProto,
    precision: str,
    excluded: frozenset[str],
    why: Callable[[str], str | None],
    tensors: set[str] = frozenset(),
) -> None:
    """CheckFailed naming every quantized node (not ``excluded``) with an input ``why`` finds fault with, its op and
    the reasons, then the ``--exclude`` of them all; ``tensors`` no such node reads are named by the node that
    touches them first (their producer)."""
    problems: dict[str, tuple[onnx.NodeProto, list[str]]] = {}
    for node in graph.node:
        if node.op_type in TENSORRT_QUANTIZED_OPS and node.name not in excluded:
            for reason in filter(None, map(why, node.input)):
                problems.setdefault(node_name(node), (node, []))[1].append(reason)
    for name in sorted(set(tensors) - {n for node, _ in problems.values() for n in node.input}):
        node = next(n for n in graph.node if name in (*n.output, *n.input))
        problems.setdefault(node.name or name, (node, []))[1].append(why(name) or name)
    if problems:
        lines = [f"node {key} ({node.op_type}): {', '.join(whys)}" for key, (node, whys) in problems.items()]
        raise CheckFailed(
            f"{len(problems)} node(s) cannot be quantized to {precision}: {'; '.join(lines)}; keep them in float "
            f"with {_excludes(node for node, _ in problems.values())}"
        )


def quantized_nodes(path: Path) -> dict[str, int]:
    """Nodes of the Q/DQ model that run quantized, by op type: TensorRT's quantized ops with a DequantizeLinear
    feeding an input (their weights' or their activations')."""
    proto = onnx.load_model(path, load_external_data=False)
    dequantized = {o for node in proto.graph.node if node.op_type == "DequantizeLinear" for o in node.output}
    counts: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type in TENSORRT_QUANTIZED_OPS and any(name in dequantized for name in node.input):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def keep_metadata(source: onnx.ModelProto, path: Path) -> None:
    """Put the original model's metadata_props back on a written model (pre-processing drops them)."""
    proto = onnx.load_model(path, load_external_data=False)
    existing = {p.key for p in proto.metadata_props}
    changed = False
    for prop in source.metadata_props:
        if prop.key not in existing:
            proto.metadata_props.add(key=prop.key, value=prop.value)
            changed = True
    if changed:
        onnx.save_model(proto, path)


def tensor_names(proto: onnx.ModelProto) -> set[str]:
    names = {i.name for i in proto.graph.input}
    for node in proto.graph.node:
        names.update(node.output)
    return names


CALIBRATORS = {"minmax": "MinMaxCalibration", "entropy": "EntropyCalibration2", "percentile": "EntropyCalibration2"}
"""TensorRT's calibrator name for the cache header: TensorRT <= 10 only reads a cache whose algorithm
matches the IInt8Calibrator it is given (percentile has no TensorRT calibrator; use EntropyCalibrator2)."""
TRT_CACHE_VERSION = 100800
"""TensorRT 10.8.0 as TensorRT writes it (major * 10000 + minor * 100 + patch)."""


def trt_cache(value_ranges: dict[str, tuple[float, float]], names: set[str], method: str) -> str:
    """TensorRT's calibration cache text: ``TRT-<version>-<Calibrator>`` then ``tensor: <hex float32 scale>``.

    Only tensors of the original model are listed (TensorRT <= 10 parses the original model); the scale is
    amax / 127, as TensorRT's implicit INT8 computes it.
    """
    lines = [f"TRT-{TRT_CACHE_VERSION}-{CALIBRATORS[method]}"]
    for name, (low, high) in sorted(value_ranges.items()):
        if name in names:
            lines.append(f"{name}: {struct.pack('>f', scale(low, high, 'int8')).hex()}")
    return "\n".join(lines) + "\n"


def read_trt_cache(text: str) -> tuple[str, dict[str, float]]:
    """Parse a TensorRT calibration cache: (header, tensor -> scale)."""
    header, *rows = text.splitlines()
    scales = {}
    for row in rows:
        name, _, value = row.rpartition(": ")
        scales[name] = struct.unpack(">f", bytes.fromhex(value))[0]
    return header, scales
