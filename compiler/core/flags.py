"""Every option of the option groups, declared once: its flag, metavar, help panel, default, help and whether it is
part of the reuse key. The groups (:mod:`compiler.core.options`) take their fields' defaults and descriptions from
here and the CLI generates its parameters from it (:func:`compiler.cli.params.with_options`), so the two cannot
drift. Plain data: the CLI reads it at start-up without importing pydantic."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.core.plugins import backend_names, store_forms

INPUTS, TARGETS, CALIBRATION, GATES, CACHE, STORE, OUTPUT = (
    "Inputs",
    "Targets",
    "Calibration",
    "Gates",
    "Cache",
    "Store",
    "Output",
)
"""Help panels, in the order a command's options are read."""

PRECISIONS = "[fp32|fp16|int8|fp8]"
CALIBRATE_PRECISIONS = "[int8|fp8|fp16]"
METHODS = "[minmax|entropy|percentile]"
QUANTIZERS = "[onnxruntime|modelopt]"
BACKENDS = "[" + "|".join(backend_names()) + "]"
"""Closed sets as the help shows them (the values are checked by the option groups, with their own message)."""


@dataclass(frozen=True)
class Flag:
    """One option of an option group.

    ``kind`` says how the command line maps to the field: ``value`` (``--samples 64``), ``many`` (repeated, a
    tuple), ``per_output`` (``X`` for every output or ``OUTPUT=X`` for one, repeated: a dict), ``off`` (a boolean
    field that is on unless ``--no-…`` is given). ``keyed`` is False for what does not enter a reuse key as a value:
    files keyed by their content instead, and switches that do not change the result."""

    help: str
    metavar: str = ""
    panel: str = INPUTS
    default: Any = None
    type: type = str
    kind: str = "value"
    switch: str | None = None
    """The flag of an ``off`` option (``--no-lint``)."""
    keyed: bool = True
    envvar: str | None = None
    """The environment variable the command line reads when the option is not given."""
    hidden: bool = False
    """A deprecated name still read but no longer shown."""

    @property
    def field_default(self) -> Any:
        """The group field's default: what the command line gives when the option is not used."""
        return {"many": (), "per_output": {}, "off": True}.get(self.kind, self.default)


REMOTE_CACHE = Flag(
    f"Remote cache shared by runners: {store_forms()}; a local miss asks it first and what is made is sent there "
    "(default $COMPILE_REMOTE_CACHE; '' for none).",
    "URI",
    CACHE,
)
EXPLAIN = Flag(
    "For each cache miss, say which input of its key changed against the nearest cached entry.",
    panel=CACHE,
    type=bool,
    default=False,
)

DIM = Flag(
    "Rename a dynamic dim of an input, e.g. --dim x:2=H --dim x:3=W for an exporter that named both '?' "
    "(TensorRT parses a renamed copy in the cache; the model is not changed); profiles name H and W. Repeatable.",
    "INPUT:AXIS=NAME",
    INPUTS,
    kind="many",
)
"""``--dim``: build, check, and (through compiler/cli/params.py) inspect and calibrate."""
CONST = Flag(
    "Freeze an input that is not a batch of samples to a value, INPUT=NUMBER (a sample rate, a flag that picks a "
    "branch): it becomes a constant of the model, what it computes is folded (an If on it becomes its branch) and "
    "the engine no longer takes it. Repeat per input.",
    "INPUT=NUMBER",
    INPUTS,
    kind="many",
)
SAMPLE_AXIS = Flag(
    "The axis of an input that holds its samples, INPUT=AXIS (default 0): an RNN state [layers, batch, hidden] "
    "takes them on 1. The data file keeps samples on axis 0; outputs with the same dim name follow. Repeat per "
    "input.",
    "INPUT=AXIS",
    INPUTS,
    kind="many",
)
OUTPUT_KIND = Flag(
    "Judge an output as what it is: NAME:KIND[,KEY=VALUE...], KIND one of tensor, logits, sequence, embedding, "
    "dense (threshold=, min=), detection (boxes=0:4, scores=4:, axis=1, threshold=0.25, iou=0.5, nms=0.7|none, "
    "format=xywh|xyxy, min=): e.g. output0:detection. Repeat per output.",
    "NAME:KIND",
    GATES,
    kind="many",
)
"""``--output``, on calibrate and check alike: one verdict per output whichever stage judges it."""
MIN_SAMPLES = Flag(
    "Gate: fewest samples a verdict rests on (calibrate's held-out ones); below it the verdict is 'not enough "
    "held-out data' (exit 1), neither pass nor fail. 0 accepts any number.",
    "N",
    GATES,
    5,
    int,
)
"""``--min-samples``: figures and their intervals on 2 samples say nothing; calibrate and check hold the same."""
GATE_ON = Flag(
    "What a gate holds to its threshold: estimate (the figure itself; a failing figure whose 95 % interval holds the "
    "threshold is 'not enough held-out data to tell') or lower-bound (the interval's lower end: a passing figure "
    "whose interval holds the threshold is not enough data either). Exit 1 both ways.",
    "[estimate|lower-bound]",
    GATES,
    "estimate",
)
"""``--gate-on``: calibrate and check gate alike. The estimate by default: on the held-out sets of the project's
fixtures and the zoo (5 to 80 samples) the lower bound turned sound engines into 'not enough data' (docs/check.md)."""

BUILD = {
    "calibration": Flag(
        "Output folder of compile calibrate (int8/fp8, or fp16 to build its conversion); repeat for several "
        "precisions, each target takes the folder of its own.",
        "DIR",
        CALIBRATION,
        type=Path,
        kind="many",
    ),
    "allow_failed": Flag(
        "Build from a calibration that failed its accuracy gates (a --calibration folder, or the one --data makes).",
        panel=CALIBRATION,
        type=bool,
        default=False,
    ),
    "data": Flag(
        "Calibration data (.npz or image folder) to calibrate int8/fp8 now (kept in the cache) when --calibration "
        "is not given.",
        "DATA",
        CALIBRATION,
        type=Path,
    ),
    "method": Flag("Calibration method with --data: minmax (the default), entropy, percentile.", METHODS, CALIBRATION),
    "dim": DIM,
    "jobs": Flag("Builds at once, each in a process of its own (1-64).", "N", TARGETS, 1, int),
    "backend": Flag("Override the SKU's backend.", BACKENDS, TARGETS),
    "skus": Flag(
        "More SKUs for --sku, in the catalog's YAML format (compile skus --skus FILE shows them).",
        "FILE",
        TARGETS,
        type=Path,
        keyed=False,
    ),
    "workspace_mb": Flag("Builder workspace limit in MiB (1 to 1048576).", "MIB", TARGETS, type=int),
    "optimization_level": Flag("Builder optimization level (0-5).", "N", TARGETS, type=int),
    "cache_dir": Flag("Build cache (default $COMPILE_CACHE_DIR or ~/.cache/compile).", "DIR", CACHE, type=Path),
    "use_cache": Flag("Build everything anew.", panel=CACHE, kind="off", switch="--no-cache"),
    "remote_cache": REMOTE_CACHE,  # store_notes() is for --store's help
    "explain": EXPLAIN,
}

CALIBRATE = {
    "precision": Flag("int8, fp8 (Q/DQ model) or fp16 (converted model).", CALIBRATE_PRECISIONS, CALIBRATION, "int8"),
    "method": Flag("Range method: minmax, entropy or percentile.", METHODS, CALIBRATION, "minmax"),
    "samples": Flag("Cap on calibration samples.", "N", CALIBRATION, type=int),
    "batch_size": Flag("Samples per onnxruntime run.", "N", CALIBRATION, 32, int),
    "holdout": Flag(
        "Held-out samples for the accuracy report: a fraction (< 1) or a count.", "X", CALIBRATION, 0.2, float
    ),
    "seed": Flag("Seed of the calibration / held-out split.", "N", CALIBRATION, 0, int),
    "percentile": Flag("Percentile kept by --method percentile.", "X", CALIBRATION, 99.999, float),
    "num_bins": Flag("Histogram bins for entropy (percentile takes the exact tail).", "N", CALIBRATION, 2048, int),
    "chunk_mb": Flag(
        "Activation memory per onnxruntime run (MiB); runs take fewer samples to fit.", "MIB", CALIBRATION, 256, int
    ),
    "min_cosine": Flag(
        "Gate: mean cosine similarity of every output (its 5 % quantile gets 5x the slack); default 0.999 fp16, "
        "0.98 int8, 0.96 fp8.",
        "X",
        GATES,
        type=float,
    ),
    "min_top1": Flag(
        "Gate: top-1 agreement of class-score outputs (a fraction, 0.98 for 98 %); default 0.99 fp16, 0.90 int8/fp8.",
        "X",
        GATES,
        type=float,
    ),
    "max_abs_error": Flag(
        "Gate: max absolute error of every output (no default: it depends on the output's scale).",
        "X",
        GATES,
        type=float,
    ),
    "min_sqnr": Flag(
        "Gate: signal to quantization-noise ratio of every output in dB, against the output's spread; default 30 "
        "fp16, 12 int8/fp8.",
        "DB",
        GATES,
        type=float,
    ),
    "exclude": Flag(
        "Keep a node (by name; one without a name by its first output's) or every node of an op type (Softmax) "
        "out of the lower precision: no Q/DQ for int8/fp8, FP32 for fp16. Repeat for more.",
        "NODE|OP",
        CALIBRATION,
        kind="many",
    ),
    "fallback": Flag(
        "auto: when a gate fails, keep the fewest nodes in higher precision until the gates pass (ranked by "
        "sensitivity, then bisected; FP32 for fp16's overflowing nodes); recorded in calibration.json.",
        "auto",
        CALIBRATION,
    ),
    "quantizer": Flag(
        "Who places Q/DQ and calibrates (int8/fp8): onnxruntime (default) or modelopt (NVIDIA ModelOpt, run by the "
        "Python that $COMPILE_MODELOPT_PYTHON names; minmax/entropy, no --fallback auto).",
        QUANTIZERS,
        CALIBRATION,
        "onnxruntime",
    ),
    "metric": Flag(
        "Your own score, MODULE:FUNCTION (a dotted module or a .py file): function(outputs, reference, labels) -> "
        "float; reported, gated by --min-metric, the objective of --fallback auto.",
        "MODULE:FUNCTION",
        GATES,
    ),
    "output": OUTPUT_KIND,
    "sample_axis": SAMPLE_AXIS,
    "min_metric": Flag("Gate: least score of --metric.", "X", GATES, type=float),
    "min_samples": MIN_SAMPLES,
    "gate_on": GATE_ON,
    "labels": Flag(
        "An .npz of labels for --metric, one row per data sample (labels argument).", "FILE", INPUTS, type=Path
    ),
    "reuse": Flag("Recompute even if DIR holds this result.", panel=OUTPUT, kind="off", switch="--no-reuse"),
}

CHECK = {
    "data": Flag(
        "Samples for accuracy and FP16 range: .npz or an image folder with preprocess.yaml.",
        "DATA",
        type=Path,
        keyed=False,
    ),
    "samples": Flag("Use the first N samples of DATA.", "N", INPUTS, 64, int),
    "batch_size": Flag("Samples per onnxruntime run.", "N", INPUTS, 8, int),
    "model": Flag("The FP32 model, if not where build.json says.", "FILE", type=Path, keyed=False),
    "profiles": Flag(
        "Shape profiles to size partition boundaries with when no engine was built.", "FILE", type=Path, keyed=False
    ),
    "rules": Flag(
        "Fusion rules YAML: extends the bundled rules (replace: true replaces them).", "FILE", type=Path, keyed=False
    ),
    "skus": Flag(
        "More SKUs, or another memory for one, in the catalog's YAML format (added to the bundled catalog).",
        "FILE",
        type=Path,
        keyed=False,
    ),
    "headroom": Flag("Fraction of GPU memory an engine must leave free.", "X", GATES, 0.1, float),
    "min_low_precision": Flag(
        "Share of an int8/fp8 engine's Conv/MatMul/Gemm nodes that must compute in its precision.",
        "X",
        GATES,
        0.5,
        float,
    ),
    "max_partitions": Flag("Gate: most TensorRT partitions of the model.", "N", GATES, 1, int),
    "max_unsupported": Flag("Gate: most nodes TensorRT does not take.", "N", GATES, 0, int),
    "max_boundary_mb": Flag("Gate: most MiB crossing partition boundaries per inference.", "MIB", GATES, type=float),
    "atol": Flag(
        "Gate (optional, off by default): absolute tolerance, with --rtol as Polygraphy compares",
        panel=GATES,
        kind="per_output",
        type=float,
    ),
    "rtol": Flag("Gate (optional, off by default): relative tolerance", panel=GATES, kind="per_output", type=float),
    "error_stat": Flag(
        "With --atol/--rtol: elemwise (default), max, mean, median or quantile error", panel=GATES, kind="per_output"
    ),
    "error_quantile": Flag(
        "With --error-stat quantile: the quantile (0.99)", panel=GATES, kind="per_output", type=float
    ),
    "min_cosine": Flag(
        "Gate: least mean cosine similarity (its 5 % quantile gets 5x the slack)",
        panel=GATES,
        kind="per_output",
        type=float,
    ),
    "min_top1": Flag(
        "Gate: least top-1 agreement (0.98: 98 %); top-5 gets half the slack",
        panel=GATES,
        kind="per_output",
        type=float,
    ),
    "min_sqnr": Flag("Gate: least SQNR in dB against the output's spread", panel=GATES, kind="per_output", type=float),
    "calibration": Flag(
        "A calibration folder (compile calibrate --out) to find an int8/fp8 engine's Q/DQ model in, by digest, "
        "besides the build cache and the path recorded. Repeat for more.",
        "DIR",
        type=Path,
        kind="many",
        keyed=False,
    ),
    "metric": Flag(
        "Your own score, MODULE:FUNCTION: function(outputs, reference, labels) -> float, per engine's model.",
        "MODULE:FUNCTION",
        GATES,
    ),
    "output": OUTPUT_KIND,
    "sample_axis": SAMPLE_AXIS,
    "min_metric": Flag("Gate: least score of --metric.", "X", GATES, type=float),
    "min_samples": MIN_SAMPLES,
    "gate_on": GATE_ON,
    "labels": Flag("An .npz of labels for --metric, one row per data sample.", "FILE", type=Path, keyed=False),
    "allow_skip": Flag(
        "Let a check that cannot be measured be skipped instead of failing (accuracy: the model an engine was "
        "built from is nowhere to be found).",
        "CHECK",
        GATES,
        kind="many",
    ),
    "chunk_mb": Flag("Intermediate tensors held at once by the FP16 range check.", "MIB", INPUTS, 256, int),
    "lint": Flag("Skip the ONNX checker and Polygraphy lint.", kind="off", switch="--no-lint"),
    "reuse": Flag(
        "Check again even if check.json was made from the same inputs.",
        panel=OUTPUT,
        kind="off",
        switch="--no-reuse",
        keyed=False,
    ),
    "dim": DIM,
    "cache_dir": Flag(
        "The build cache the build used (its --cache-dir; default $COMPILE_CACHE_DIR or ~/.cache/compile): where "
        "the model each engine was built from is kept.",
        "DIR",
        CACHE,
        type=Path,
        keyed=False,
    ),
}


VERIFY_KEY = Flag(
    "Refuse a release not signed by this public key (a PEM file or env://VAR; checked before anything is written); "
    "default $COMPILE_VERIFY_KEY.",
    "PUB.pem",
    type=str,  # not Path: it would turn env://VAR into env:/VAR
    envvar="COMPILE_VERIFY_KEY",
)
ALLOW_YANKED = Flag("Use the version even if it was withdrawn with compile yank.", type=bool, default=False)
PLANS_CACHE = Flag("Download even if the pull cache has the plans.", panel=CACHE, kind="off", switch="--no-cache")

PUBLISH = {
    "allow_failed": Flag(
        "Publish the targets that built even if others or the check failed.", type=bool, default=False
    ),
    "repair": Flag(
        "First read back every blob of the folder the store holds and replace damaged ones (what pull or ls --verify "
        "reported).",
        type=bool,
        default=False,
    ),
    "golden": Flag(
        "Ship no golden inputs (the held-out samples and FP32 outputs the check kept): for data that may not leave.",
        kind="off",
        switch="--no-golden",
    ),
}

PROMOTE = {
    "allow_yanked": ALLOW_YANKED,
    "repair": Flag(
        "Replace a damaged channel record (its history starts again at this move).", type=bool, default=False
    ),
    "allow_failed": Flag(
        "Promote a version whose check failed or that was published with --allow-failed.", type=bool, default=False
    ),
}

PULL = {
    "precision": Flag("The precision (when it has several).", PRECISIONS, TARGETS),
    "tensorrt_version": Flag(
        "Your runtime's version (TensorRT 10.8, TensorRT-RTX 1.7.1.116): only a plan it may load is picked.",
        "VERSION",
        TARGETS,
    ),
    "verify_key": VERIFY_KEY,
    "use_cache": Flag("Download even if the pull cache has the plan.", panel=CACHE, kind="off", switch="--no-cache"),
    "allow_yanked": ALLOW_YANKED,
    "golden": Flag(
        "Also write the release's golden inputs and FP32 reference outputs beside the plan (golden.npz), verified.",
        panel=OUTPUT,
        type=bool,
        default=False,
    ),
}

EXPORT_TRITON = {
    "triton_release": Flag(
        "The Triton release that serves it: its TensorRT must load every plan (docs/serving.md has the table).",
        "YY.MM",
        TARGETS,
    ),
    "triton_tensorrt": Flag(
        "The server's TensorRT version, for a Triton image the table does not list (wins over the table).",
        "VERSION",
        TARGETS,
    ),
    "model_name": Flag("The model's folder and name (default: the release name).", "N", OUTPUT),
    "model_version": Flag("The model's numeric version folder to write (default 1).", "N", OUTPUT, type=int),
    "triton_version": Flag("Deprecated: the old name of --model-version.", "N", OUTPUT, type=int, hidden=True),
    "precision": Flag("The precision to serve (when the release has several).", PRECISIONS, TARGETS),
    "default_plan": Flag(
        "Also set default_model_filename to this compute capability's plan (unset: an unknown GPU fails to load).",
        "CC",
        TARGETS,
    ),
    "verify_key": VERIFY_KEY,
    "use_cache": PLANS_CACHE,
    "allow_yanked": ALLOW_YANKED,
}

EXPORT_RTX = {
    "runtime_version": Flag(
        "The application's TensorRT-RTX version: every engine must load with it.", "VERSION", TARGETS
    ),
    "model_name": Flag("The model's folder name (default: the release name).", "N", OUTPUT),
    "precision": Flag("Only this precision's engines.", PRECISIONS, TARGETS),
    "verify_key": VERIFY_KEY,
    "use_cache": PLANS_CACHE,
    "allow_yanked": ALLOW_YANKED,
}
