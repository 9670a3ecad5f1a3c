"""The typed files stages hand each other, each with its format version.

One stage writes a record, a later one reads it, and neither imports the other: ``compile build`` writes
engine.json, layers.json and build.json; ``compile calibrate`` writes calibration.json and report.json.
A reader validates what it reads (``compiler.core.record_files``), so a damaged or foreign file is one
``error:`` line, never a crash in the stage that trusted it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, PrivateAttr, StrictInt, model_validator

from compiler.core.profiles import MAX_DIM, ShapeProfile
from compiler.core.runtimes import FAMILY_NAMES, PLAN_MAGIC, Runtime, runtime_of

Progress = Callable[[str, int, int], None]
"""How a long stage reports: (phase, steps done, steps total). Builds report TensorRT's phases, calibration
its samples."""


SKU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
COMPUTE_CAPABILITY_NAME = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")


def _sku_name(value: str) -> str:
    if not SKU_NAME.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{value[:80]!r} is not a SKU name (1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit, no '..')"
        )
    return value


def _compute_capability(value: str) -> str:
    if not COMPUTE_CAPABILITY_NAME.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not a compute capability (<major>.<minor>, e.g. 8.9)")
    return value


def _sha256(value: str) -> str:
    if not SHA256_HEX.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not a sha256 (64 lower-case hex digits)")
    return value


Sha256 = Annotated[str, AfterValidator(_sha256)]
"""A content digest; it becomes a key (``blobs/sha256/<digest>``) and a file name."""
ByteSize = Annotated[StrictInt, Field(ge=0, lt=2**63)]
"""A file's size: what a filesystem, S3 or a registry can hold (a 10**4000 in a manifest is not a size)."""
SkuName = Annotated[str, AfterValidator(_sku_name)]
"""A SKU as records name it; it becomes a folder and file name (build folders, Triton plan files)."""
ComputeCapability = Annotated[str, AfterValidator(_compute_capability)]
"""``<major>.<minor>``, exactly as Triton's ``cc_model_filenames`` keys it."""


class Precision(StrEnum):
    """What an engine computes in. Strongly typed TensorRT takes it from the model: fp16 from a converted
    model, int8/fp8 from a calibrated Q/DQ model."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    FP8 = "fp8"

    @property
    def calibrated(self) -> bool:
        return self in (Precision.INT8, Precision.FP8)


PRECISIONS = tuple(p.value for p in Precision)
CALIBRATE_PRECISIONS = ("int8", "fp8", "fp16")
"""What ``compile calibrate`` makes: a Q/DQ model (int8, fp8) or a converted one (fp16)."""


class Status(StrEnum):
    """The outcome of one target or step, in Triton Model Navigator's spirit."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Not run, with the reason (no backend, no compatible GPU, invalid profiles)."""
    CANCELLED = "cancelled"
    """Stopped by the user (Ctrl-C, SIGTERM) before it finished."""


class StepStatus(BaseModel):
    """A step's outcome and, unless ok, why."""

    status: Status
    detail: str = ""


class Reformats(BaseModel):
    """The precision-boundary reformat kernels of a built engine: kernels that only convert a tensor between
    precisions (a Q/DQ/Cast left alone in a kernel of its own, or TensorRT's reformat/copy layers) instead of
    riding in a compute kernel's prologue or epilogue. A proxy for the fusions a mixed-precision engine loses."""

    count: int
    layers: list[str] = []
    """The first few, by the ONNX nodes they cover (or the kernel's name when it names none)."""


class BuildProof(StepStatus):
    """The one real build ``compile calibrate`` makes of its model, the reformat kernels that build got, and the
    nodes given Q/DQ that it computes in float."""

    reformats: Reformats | None = None
    float_nodes: list[str] = []


# --- compile build ---------------------------------------------------------------------------------------

BUILD_FORMAT = 3
"""Of engine.json, layers.json and build.json, and part of every build cache key: 2 added each kernel's
precision, 3 each kernel's shape profile and the untyped-kernel count."""


class EngineRecord(BaseModel):
    """engine.json: exactly what one plan file is."""

    format_version: int = BUILD_FORMAT
    sha256: Sha256
    size_bytes: ByteSize
    model_sha256: str
    built_model_sha256: str
    calibration_sha256: str | None
    sku: SkuName
    compute_capabilities: list[ComputeCapability]
    precision: Precision
    backend: dict[str, str]
    profiles: list[ShapeProfile]
    builder_options: dict[str, Any]
    build_seconds: float
    cache_hit: bool
    cache_key: str
    plan_header: dict[str, Any] | None
    builder_warnings: list[str] = []
    """The builder's warnings (also in build.log); kept here so a cache hit reports them too."""
    excluded: list[str] = []
    """Nodes the calibration kept in higher precision (``--exclude``, ``--fallback auto``): calibration.json's
    ``excluded``."""


QUANTIZED = ("Int8", "FP8", "Int4", "FP4")
"""Kernel precisions (TensorRT's names) that compute quantized."""


class Kernel(BaseModel):
    """One final kernel of an engine, from the builder's DETAILED ``Layers:`` log."""

    name: str
    type: str
    precision: str | None
    """The narrowest type among its activations and weights (Int8 for an INT8 convolution); None for kernels
    with no typed tensors (shape arithmetic)."""
    input_types: list[str]
    constant_types: list[str]
    output_types: list[str]
    onnx_nodes: list[str]
    profile: int | None = None
    """The shape profile (index into engine.json's ``profiles``) the kernel belongs to: TensorRT builds each
    profile's kernels apart and marks a later profile's names ``[profile N]`` or, in a Myelin-compiled engine,
    ``_myl<N>_<i>`` with one graph N per profile; None where neither tells."""


class LayersRecord(BaseModel):
    """layers.json: every final kernel, with how many compute in each precision (kernels without one are
    counted as ``none``, so the counts add up to ``kernels``) and how many write each output type."""

    format_version: int = BUILD_FORMAT
    kernels: int
    kernel_precisions: dict[str, int]
    output_precisions: dict[str, int]
    layers: list[Kernel]


class CacheOutcome(BaseModel):
    """Where a cached result came from: ``hit`` (the local cache or folder), ``remote`` (the remote cache) or
    ``miss`` (made here), and why it was a miss (with ``--explain``: which input of the key changed)."""

    source: str = "miss"
    reason: str | None = None
    warning: str | None = Field(None, exclude=True)
    """A damaged remote entry or a remote that did not answer, said once by whoever made the result."""


class TargetStatus(BaseModel):
    """One SKU x precision of a build run."""

    sku: str
    precision: Precision
    status: Status
    path: str
    cache_hit: bool = False
    cache: CacheOutcome | None = None
    seconds: float = 0.0
    errors: list[str] = []
    warnings: list[str] = []
    """What went wrong without costing the result (an engine the build cache could not keep)."""
    refused: bool = False
    """The failure is the input's, not the build's: TensorRT found the profiles' shapes not self-consistent
    (the model cannot run at them). Reported as bad input (exit 2)."""


class BuildReport(BaseModel):
    """build.json: the status file of one `compile build` run."""

    format_version: int = BUILD_FORMAT
    model: str
    model_sha256: str
    out: str
    targets: list[TargetStatus]

    @property
    def failed(self) -> list[TargetStatus]:
        return [t for t in self.targets if t.status != Status.OK]


# --- compile calibrate -----------------------------------------------------------------------------------

CALIBRATION_FORMAT = 2
"""Of calibration.json and report.json: 2 records every file of the folder with its sha256, always."""

FP16_CONVERSION = 4
"""What the conversion writes, by version: part of every cache key of a converted model (2: a Cast from an integer
is never taken for a round trip; the model is loaded by onnxruntime before it is kept; 3: a BatchNormalization whose
constants FP16 cannot hold is computed in FP32 first, compiler/data/batchnorm_folding.py, and a Constant node read only
by nodes kept in FP32 stays FP32; 4: what computes a shape input stays in its types, :func:`shape_arithmetic`)."""

CALIBRATION_VERDICT = "verdict.json"
"""What the gates said of a calibration folder, each time ``compile calibrate`` judged it (``passed`` and the failed
gates, one line each): outside the record, so a verdict under other thresholds changes no digest; ``compile build
--calibration`` refuses a folder whose last verdict failed."""
CALIBRATION_RECORD = "calibration.json"
"""The record of a calibration folder, written last: a folder without it is unfinished."""
CALIBRATION_FILES = ("model.onnx", "model.onnx.data", "calibration.cache", "report.json")
"""The files of a calibration folder besides calibration.json, which records each one present by sha256
(model.onnx.data: the weights of a model beyond protobuf's 2 GiB limit)."""


class TensorRange(BaseModel):
    min: float
    max: float
    amax: float
    scale: float
    """The symmetric scale written in the Q/DQ model for this tensor (amax/127 int8, amax/448 fp8)."""


class OutputReport(BaseModel):
    name: str
    kind: str
    """``class-scores`` ([batch, classes] float output), ``sequence`` ([batch, steps, classes]: a CTC recogniser) or
    ``tensor`` when inferred; a declared kind (``logits``, ``embedding``, ``dense``, ``detection``...) otherwise.
    Scores are judged shift-invariantly (SQNR after each sample's or step's mean is taken off: softmax ignores a
    common shift) and by top-1 agreement, per sample or per step."""
    samples: int
    cosine_mean: float
    cosine_min: float
    max_abs_error: float
    mean_abs_error: float
    top1_agreement: float | None = None
    """A fraction (0.97 is 97 %), like every other figure here."""
    cosine_low: float | None = None
    """The 5 % quantile of the per-sample cosines (what ``min-cosine-low`` gates; None in older reports)."""
    sqnr_db: float | None = None
    """Signal to quantization-noise ratio: the reference's spread (sum of squares about its mean) over the squared
    error, in dB (200 for an exact match)."""
    top5_agreement: float | None = None
    """Class scores with more than 5 classes: how often the candidate's top-1 is among the reference's top 5."""
    nonfinite: int = 0
    """NaN/Inf values in the candidate's output."""
    declared: str | None = None
    """The ``--output NAME:KIND[,...]`` declaration this output was judged by (None: its kind was inferred)."""
    recall: float | None = None
    """``detection``: the fraction of FP32's detections the candidate finds (same class, IoU at least the
    declaration's ``iou``); None when FP32 detects nothing in the samples."""
    precision: float | None = None
    """``detection``: the fraction of the candidate's detections that are FP32's."""
    reference_detections: int | None = None
    """``detection``: how many boxes FP32 detects over the samples (what recall rests on)."""
    iou: float | None = None
    """``dense``: IoU of the candidate's and FP32's maps thresholded at the declaration's ``threshold``."""
    note: str | None = None
    """What the report could not judge by itself (a Concat of scores and other values with no declaration)."""
    intervals: dict[str, list[float]] | None = None
    """95 % bootstrap intervals (resampling the samples) of ``cosine_mean``, ``sqnr_db`` and ``top1_agreement``:
    how far the figure could move on other samples of the same data."""


class AccuracyReport(BaseModel):
    """report.json: how far the calibrated or converted model drifts from FP32 on held-out samples."""

    format_version: int = CALIBRATION_FORMAT
    reference: str = "fp32"
    candidate: str
    holdout_samples: int
    outputs: list[OutputReport]
    seconds: float
    coverage: str | None = None
    """What the comparison could and could not see (fp16: onnxruntime on CPU computes many FP16 ops in FP32)."""
    quantized_nodes: int | None = None
    """int8/fp8: how many nodes of the model run quantized (Q/DQ on their inputs); None for fp16."""
    metric: dict[str, Any] | None = None
    """``--metric``: ``{"name": "module:function", "value": score}`` over the held-out samples."""
    sensitivity: list[dict[str, Any]] | None = None
    """int8/fp8: every quantized node, most damaging first: ``rank``, ``node`` (the Q/DQ model's name), ``exclude``
    (the name ``--exclude`` takes), ``op``, ``sqnr_db`` (the node's output when it alone is quantized, fed the FP32
    model's activations, against FP32's: lower hurts more) and ``tensors`` (its quantized activation inputs)."""
    sensitivity_error: str | None = None
    """Why ``sensitivity`` could not be computed, when it could not."""
    fp16_range: dict[str, Any] | None = None
    """fp16: the FP32 model's intermediate tensors on the held-out samples against FP16's range (the figures of
    ``compile check``'s fp16-range check: ``overflow``, ``underflow``, ``keep_fp32``...)."""


class Gate(BaseModel):
    name: str
    output: str
    value: float
    threshold: float
    passed: bool
    interval: list[float] | None = None
    """The figure's 95 % bootstrap interval over the samples judged: a threshold inside it is within sampling
    noise of the verdict (more held-out samples would tell)."""


class CalibrationRecord(BaseModel):
    """calibration.json: what a calibration folder holds and how it was made; written last, so a folder
    without it is unfinished."""

    format_version: int = CALIBRATION_FORMAT
    precision: str
    method: str | None
    """Range method (minmax, entropy, percentile); None for fp16, which converts without ranges."""
    model: str
    model_sha256: str
    data: str
    data_kind: str
    data_sha256: str
    samples: int
    """Calibration samples used (after the held-out split and ``samples`` cap)."""
    holdout_samples: int
    batch_size: int
    seed: int
    options: dict[str, Any]
    versions: dict[str, str]
    cache_key: str
    ranges: dict[str, TensorRange]
    trt_cache_header: str | None
    files: dict[str, str]
    """File name -> sha256 of every file of the folder but this one; model.onnx is always among them."""
    out: str
    seconds: float
    phases: dict[str, float] = {}
    """Seconds of each phase of ``seconds`` that calibrate times apart: ``quantize`` (range collection and the Q/DQ
    model, or the FP16 conversion), ``build proof``, ``sensitivity``, ``held-out comparison``, ``fp16 range``; the
    rest is loading and checking the inputs and writing the folder."""
    quantized_nodes: int | None = None
    """int8/fp8: how many nodes run quantized (TensorRT's quantized ops, Conv, ConvTranspose, Gemm and MatMul,
    with Q/DQ on their inputs); a calibration that quantizes none is refused. None for fp16."""
    quantized_ops: dict[str, int] | None = None
    """int8/fp8: ``quantized_nodes`` by op type."""
    excluded: list[str] = []
    """Nodes kept out of the lower precision (``--exclude``: by name, or every node of an op type)."""
    exclusions: list[dict[str, Any]] = []
    """``excluded`` with why: ``{"node", "reason": "given"}`` for ``--exclude``, ``{"node", "reason": "found",
    "tensor", "sqnr_db"}`` (int8/fp8) or ``{..., "why": "overflows FP16"}`` (or ``"reads a constant FP16 clamps"``)
    for ``--fallback auto``, ``{"node", "reason": "build-proof", "why"}`` for a node given Q/DQ that the build
    proof computed in float anyway."""
    fallback: dict[str, Any] | None = None
    """``--fallback auto``: whether it was needed, the regions ranked and kept, the nodes kept, the fraction of
    Conv/MatMul/Gemm work still in the low precision, the precision-boundary reformat kernels of the result's
    and the plain calibration's build proofs (``reformats``, ``plain_reformats``), the tied sets weighed by their
    reformats (``alternatives``, when any), evaluations, seconds, and whether the gates passed."""
    build_proof: str | None = None
    """int8/fp8: the one real build that proved the Q/DQ model builds (backend, compute capability, shapes), or why
    none could be tried here (no TensorRT backend installed). None for fp16."""
    reformats: Reformats | None = None
    """int8/fp8: the precision-boundary reformat kernels of that build; None when no build could be made here."""


class CalibrationResult(CalibrationRecord):
    """What ``calibrate()`` returns: the record, its accuracy report and the gates evaluated on it."""

    report: AccuracyReport
    gates: list[Gate] = []
    passed: bool = True
    reused: bool = False
    cache: CacheOutcome | None = None

    def record(self) -> CalibrationRecord:
        return CalibrationRecord.model_validate(
            self.model_dump(exclude={"report", "gates", "passed", "reused", "cache"})
        )


# --- compile check ---------------------------------------------------------------------------------------

CHECK_FORMAT = 1
"""Of check.json."""
CHECK_RECORD = "check.json"
"""The record of one ``compile check`` run, written into the build folder it checked."""


class CheckResult(BaseModel):
    """One check of a model or an engine: its verdict, a one-line summary (the figure, or why it was skipped) and
    the evidence behind it, one line per finding, each naming the node, tensor, output or SKU it is about."""

    name: str
    """fusions, partitions, memory, accuracy, engine-accuracy, fp16-range, lint."""
    status: Status
    """ok, failed (a gate failed) or skipped (with the reason in ``summary``; never counted as passed)."""
    summary: str
    evidence: list[str] = []
    figures: dict[str, Any] = {}
    """The measured numbers, for machines (per output, per tensor, bytes)."""


class EngineCheck(BaseModel):
    """Every check of one engine (one SKU x precision of the build)."""

    sku: str
    precision: Precision
    path: str
    engine_sha256: str | None
    """None for a target whose build did not produce an engine."""
    status: Status
    checks: list[CheckResult]


class CheckReport(BaseModel):
    """check.json: what ``compile check`` found in a build folder. ``passed`` is the verdict a release step reads:
    True only when no check failed (skipped checks do not fail it, and are listed in ``summary``)."""

    format_version: int = CHECK_FORMAT
    build_dir: str
    model: str
    model_sha256: str
    passed: bool
    status: Status
    summary: str
    counts: dict[str, int]
    """How many checks ended ok, failed and skipped, over the model and every engine."""
    model_checks: list[CheckResult]
    """Checks of the source model itself: lint, partitions."""
    engines: list[EngineCheck]
    options: dict[str, Any]
    versions: dict[str, str]
    seconds: float
    inputs_sha256: str = ""
    """Of everything the verdict depends on (see ``compile check``'s reuse): an equal digest, an equal report."""
    reused: bool = False
    """True in what ``check()`` returns when it took the folder's check.json instead of checking again."""
    cache: CacheOutcome | None = None
    golden: GoldenRecord | None = None
    """golden.npz written beside check.json (with --data): what publish stores with the release."""
    _built_models: list[str | None] = PrivateAttr(default_factory=list)
    """Where ``check()`` found each engine's built model (None: not found): what a remembered verdict stands on."""

    @property
    def failures(self) -> list[tuple[str, CheckResult]]:
        """(where, check) of every failed check: ``model`` or ``<sku>/<precision>``."""
        found = [("model", c) for c in self.model_checks if c.status == Status.FAILED]
        return found + [
            (f"{e.sku}/{e.precision}", c) for e in self.engines for c in e.checks if c.status == Status.FAILED
        ]


# --- the artifact store ---------------------------------------------------------------------------------

RELEASE_FORMAT = 2
"""Of a release manifest (``releases/<name>/<version>/manifest.json``) and a channel (``channels/<name>/<channel>``):
2 names each engine's runtime and adds the golden inputs. Format 1 is still read (each engine's runtime is then
derived from its backend and builder options, the way publish derives it)."""
READABLE_RELEASE_FORMATS = (1, 2)


class BlobRef(BaseModel):
    """A file in the store, by content: ``blobs/sha256/<sha256>``."""

    sha256: Sha256
    size_bytes: ByteSize


class ReleaseEngine(BaseModel):
    """One plan of a release and what decides where it runs; a serving host resolves on these fields."""

    sku: SkuName
    compute_capabilities: list[ComputeCapability]
    precision: Precision
    profiles: list[ShapeProfile]
    backend: dict[str, str]
    """``name`` (tensorrt-rtx, tensorrt) and ``version``: the runtime must match it unless the plan is version
    compatible."""
    builder_options: dict[str, Any]
    """What the builder was told, including where recorded the options that bind a plan to hardware
    (hardware compatibility level) and to a runtime version (version compatibility)."""
    plan: BlobRef
    layers: BlobRef | None
    built_model_sha256: str
    calibration_sha256: str | None
    plan_header: dict[str, Any] | None
    runtime: Runtime
    """The runtime that loads the plan and which of its versions may (compiler.core.runtimes)."""
    low_precision_share: float | None = None
    """int8/fp8: the share of the engine's Conv/ConvTranspose/MatMul/Gemm nodes that compute in its precision, read
    from its kernels by ``compile check``'s precision-gain; None when unchecked (and for fp32/fp16)."""

    @model_validator(mode="before")
    @classmethod
    def _runtime_of_format_1(cls, data: Any) -> Any:
        """A manifest of format 1 names no runtime: it is what the backend and builder options say."""
        if isinstance(data, dict) and "runtime" not in data and isinstance(data.get("backend"), dict):
            data = {**data, "runtime": runtime_of(data["backend"], data.get("builder_options") or {})}
        return data

    @model_validator(mode="after")
    def _runtime_agrees(self) -> ReleaseEngine:
        """The runtime named is the one that built the plan: the backend's, and the one its header names."""
        if (self.runtime.family, self.runtime.version) != (self.backend.get("name"), self.backend.get("version")):
            raise ValueError(
                f"runtime {self.runtime.name} is not the backend that built the plan "
                f"({self.backend.get('name')} {self.backend.get('version')})"
            )
        magic = PLAN_MAGIC.get(str((self.plan_header or {}).get("magic")))
        if magic is not None and magic != self.runtime.family:
            raise ValueError(f"runtime {self.runtime.name}, but the plan's header is a {FAMILY_NAMES[magic]} plan's")
        return self


class ReleaseCheck(BaseModel):
    """What ``compile check`` said of the build, when it was run (check.json)."""

    passed: bool
    summary: dict[str, int]
    """Checks by status (ok, failed, skipped)."""


ModelDim = Annotated[StrictInt, Field(ge=-1, le=MAX_DIM)]
"""A fixed dim of a model's tensor as a manifest records it (-1: dynamic, as some exporters write it), no larger
than TensorRT takes: a manifest holding 10**100 is damaged (a Triton config's dims are int64)."""


class TensorSignature(BaseModel):
    """One input or output of the model, as a server declares it (the engine's I/O: conversion and calibration
    keep the model's I/O types)."""

    name: str
    dtype: str
    """numpy's name of the type (float32, int64), as ``compile inspect`` shows it."""
    shape: list[ModelDim | str | None] | None
    """A str entry is a symbolic dim, None an unknown one; None when the rank is unknown."""


GOLDEN_FILE = "golden.npz"
"""The golden inputs ``compile check`` writes into the build folder it checked (with --data)."""
GOLDEN_MAX_BYTES = 16 << 20
"""The most a release's golden inputs and reference outputs may weigh: a few samples, not a data set."""


class GoldenTensor(BaseModel):
    name: str
    dtype: str
    shape: list[Annotated[int, Field(ge=0, le=MAX_DIM)]]
    """The samples on axis 0, then the tensor's own dims."""


class GoldenRecord(BaseModel):
    """golden.npz: a few of the check's samples and the FP32 model's outputs for them (onnxruntime on CPU), so a
    host with the right GPU can run the exact plan on them and compare. Arrays ``input_<i>`` and ``output_<i>``,
    in the order listed here (names may hold any character; array keys stay plain)."""

    blob: BlobRef
    samples: int
    inputs: list[GoldenTensor]
    outputs: list[GoldenTensor]
    reference: str = "fp32 model, onnxruntime CPU"


class ReleaseContent(BaseModel):
    """Everything a release *is*; two publishes of one version agree when their contents are equal."""

    name: str
    version: str
    model_sha256: str
    model_name: str
    engines: list[ReleaseEngine]
    check: ReleaseCheck | None
    inputs: list[TensorSignature] | None = None
    outputs: list[TensorSignature] | None = None
    """The model's signature, read at publish time from the model build.json names when it is still there with
    the recorded sha256 (what `compile export triton` declares); None when it was not."""
    golden: GoldenRecord | None = None
    """The golden inputs and reference outputs (a blob of the release), when ``compile check --data`` wrote them."""


class Provenance(BaseModel):
    """Who published and when: recorded, but not part of what the release is."""

    by: str
    at: str
    host: str
    tool_version: str


class ReleaseManifest(BaseModel):
    """releases/<name>/<version>/manifest.json: immutable once written."""

    readable_formats: ClassVar = READABLE_RELEASE_FORMATS
    format_version: int = RELEASE_FORMAT
    content: ReleaseContent
    content_sha256: str
    """sha256 of ``content`` as canonical JSON: what "the same release" means."""
    published: Provenance
    check_reports: list[BlobRef] = []
    """Each build folder's check.json (their timings differ between runs of one check: evidence, not content)."""
    excluded: dict[str, list[str]] = {}
    """``sku/precision`` -> the nodes its calibration kept in higher precision (``--exclude``, ``--fallback auto``),
    for the engines that have any."""
    failed: list[str] = []
    """What was wrong when this version was published with ``--allow-failed``: each failed check (``rtx-4090/fp16
    fp16-range: ...``) and each target that did not build; empty for a clean release. ``promote`` refuses a
    release with failures (or whose ``content.check`` did not pass) unless ``--allow-failed``; pull and export
    warn."""

    @property
    def failures(self) -> list[str]:
        """:attr:`failed`, or the check's verdict for a manifest written before it was recorded."""
        if self.failed:
            return self.failed
        check = self.content.check
        return ["compile check failed"] if check is not None and not check.passed else []


class StagedPart(BaseModel):
    """staging/<name>/<version>/<job>.json: one CI job's engines of a release, their blobs already in the store,
    waiting for ``compile release --finalize`` to publish every job's parts as one manifest."""

    readable_formats: ClassVar = READABLE_RELEASE_FORMATS
    format_version: int = RELEASE_FORMAT
    job: str
    content: ReleaseContent
    check_reports: list[BlobRef] = []
    staged: Provenance
    pipeline_sha256: str | None = None
    """The pipeline file the job ran (``compile release``): finalize and a retried job take only a part of the
    same pipeline."""


class ChannelMove(BaseModel):
    version: str
    by: str
    at: str


class ChannelRecord(BaseModel):
    """channels/<name>/<channel>: the version a channel points at, and every move it made, oldest first."""

    readable_formats: ClassVar = READABLE_RELEASE_FORMATS
    format_version: int = RELEASE_FORMAT
    name: str
    channel: str
    version: str
    history: list[ChannelMove]
    sequence: int = 0
    """How many moves the channel made (its history keeps the latest only); 0 in records older than it."""
    signature: str | None = None
    """The move signed with ``promote --sign-key``: a Sigstore bundle (compiler.releases.channel_signing)."""


class YankRecord(BaseModel):
    """yanks/<name>/<version>.json: a version withdrawn (its manifest stays as published), why, by whom, when."""

    format_version: int = RELEASE_FORMAT
    name: str
    version: str
    reason: str
    by: str
    at: str


CheckReport.model_rebuild()  # its golden record is defined with the store's records, below it
