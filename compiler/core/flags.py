"""What each option of the option groups means, written once: the groups (:mod:`compiler.core.options`) take their
field descriptions from here and the CLI its ``--help``, so the two cannot drift. Plain strings: the CLI reads them
at start-up without importing pydantic."""

BUILD = {
    "calibration": "Output folder of compile calibrate (int8/fp8, or fp16 to build its conversion); repeat for "
    "several precisions, each target takes the folder of its own.",
    "data": "Calibration data (.npz or image folder) to calibrate int8/fp8 now (kept in the cache) when "
    "--calibration is not given.",
    "method": "Calibration method with --data: minmax (the default), entropy, percentile.",
    "cache_dir": "Build cache (default $COMPILE_CACHE_DIR or ~/.cache/compile).",
    "use_cache": "Take engines from the build cache and add new ones to it (--no-cache builds everything anew).",
    "remote_cache": "Remote cache shared by runners (a folder, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY): a local "
    "miss asks it first, what is made is sent there (default $COMPILE_REMOTE_CACHE).",
    "explain": "Say for each cache miss which input of its key changed against the nearest cached entry.",
    "backend": "Override the SKU's backend.",
    "workspace_mb": "Builder workspace limit in MiB (1 to 1048576).",
    "optimization_level": "Builder optimization level (0-5).",
    "jobs": "Builds at once, each in a process of its own (1-64).",
}

CALIBRATE = {
    "precision": "int8, fp8 (Q/DQ model) or fp16 (converted model).",
    "method": "Range method: minmax, entropy or percentile.",
    "samples": "Cap on calibration samples.",
    "batch_size": "Samples per onnxruntime run.",
    "holdout": "Held-out samples for the accuracy report: a fraction (< 1) or a count.",
    "seed": "Seed of the calibration / held-out split.",
    "percentile": "Percentile kept by --method percentile.",
    "num_bins": "Histogram bins for entropy and percentile.",
    "chunk_mb": "Activation memory per onnxruntime chunk (MiB).",
    "min_cosine": "Gate: mean cosine similarity of every output (its 5 % quantile gets 5x the slack); default "
    "0.999 fp16, 0.98 int8, 0.96 fp8.",
    "min_top1": "Gate: top-1 agreement of class-score outputs (a fraction, 0.98 for 98 %); default 0.99 fp16, "
    "0.90 int8/fp8.",
    "max_abs_error": "Gate: max absolute error of every output (no default: it depends on the output's scale).",
    "min_sqnr": "Gate: signal to quantization-noise ratio of every output in dB, against the output's spread; "
    "default 30 fp16, 12 int8/fp8.",
    "exclude": "Keep a node (by name) or every node of an op type (Softmax) out of the lower precision: no Q/DQ "
    "for int8/fp8, FP32 for fp16. Repeat for more.",
    "metric": "Your own score, MODULE:FUNCTION (a dotted module or a .py file): function(outputs, reference, labels) "
    "-> float; reported, gated by --min-metric, the objective of --fallback auto.",
    "min_metric": "Gate: least score of --metric.",
    "labels": "An .npz of labels for --metric, one row per data sample (labels argument).",
    "fallback": "auto: when a gate fails, keep the fewest nodes in higher precision until the gates pass "
    "(ranked by sensitivity, then bisected; FP32 for fp16's overflowing nodes); recorded in "
    "calibration.json.",
    "reuse": "Reuse a folder that holds this very result (--no-reuse recomputes).",
    "quantizer": "Who places Q/DQ and calibrates (int8/fp8): onnxruntime (default) or modelopt (NVIDIA ModelOpt, "
    "run by the Python that $COMPILE_MODELOPT_PYTHON names; minmax/entropy, no --fallback auto).",
}

CHECK = {
    "data": "Samples for accuracy and FP16 range: .npz or an image folder with preprocess.yaml.",
    "samples": "Use the first N samples of DATA.",
    "batch_size": "Samples per onnxruntime run.",
    "model": "The FP32 model, if not where build.json says.",
    "cache_dir": "The build cache the build used (its --cache-dir; default $COMPILE_CACHE_DIR or ~/.cache/compile): "
    "where the model each engine was built from is kept.",
    "profiles": "Shape profiles to size partition boundaries with when no engine was built.",
    "rules": "Fusion rules YAML: extends the bundled rules (replace: true replaces them).",
    "skus": "SKU catalog for GPU memory (default: the bundled skus.yaml).",
    "headroom": "Fraction of GPU memory an engine must leave free.",
    "max_partitions": "Gate: most TensorRT partitions of the model.",
    "max_unsupported": "Gate: most nodes TensorRT does not take.",
    "max_boundary_mb": "Gate: most MiB crossing partition boundaries per inference.",
    "atol": "Gate (optional, off by default): absolute tolerance, with --rtol as Polygraphy compares",
    "rtol": "Gate (optional, off by default): relative tolerance",
    "error_stat": "With --atol/--rtol: elemwise (default), max, mean, median or quantile error",
    "error_quantile": "With --error-stat quantile: the quantile (0.99)",
    "min_cosine": "Gate: least mean cosine similarity (its 5 % quantile gets 5x the slack)",
    "min_top1": "Gate: least top-1 agreement (0.98: 98 %); top-5 gets half the slack",
    "min_sqnr": "Gate: least SQNR in dB against the output's spread",
    "calibration": "A calibration folder (compile calibrate --out) to find an int8/fp8 engine's Q/DQ model in, "
    "by digest, besides the build cache and the path recorded. Repeat for more.",
    "allow_skip": "Let a check that cannot be measured be skipped instead of failing (accuracy: the model an "
    "engine was built from is nowhere to be found).",
    "metric": "Your own score, MODULE:FUNCTION: function(outputs, reference, labels) -> float, per engine's model.",
    "min_metric": "Gate: least score of --metric.",
    "labels": "An .npz of labels for --metric, one row per data sample.",
    "chunk_mb": "Intermediate tensors held at once by the FP16 range check.",
    "lint": "Run the ONNX checker and Polygraphy lint (--no-lint skips them).",
    "reuse": "Return the folder's check.json when it was made from exactly these inputs (--no-reuse checks again).",
}
"""Per-output thresholds (atol ... min_top1) take X for every output or OUTPUT=X for one, repeated."""
