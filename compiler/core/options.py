"""Option groups: each stage takes one typed, validated options object, made once by the CLI (or a caller of the
Python API) and passed whole, so adding an option touches its group and the CLI only.

Values are checked here against the range their consumer accepts, so nothing a user types reaches TensorRT or
onnxruntime as a value it would reject with a type error; a bad one is one ``error:`` line naming the option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from compiler.core import flags
from compiler.core.errors import InvalidInput
from compiler.core.output_kind import check_declarations

MAX_WORKSPACE_MB = 1 << 20
"""1 TiB: above any GPU's memory, and far below where MiB << 20 overflows TensorRT's 64-bit pool size."""
MAX_JOBS = 64
METHODS = ("minmax", "entropy", "percentile")
"""How calibration turns activations into ranges."""
QUANTIZERS = ("onnxruntime", "modelopt")
"""Who places Q/DQ and calibrates: onnxruntime here (the default), or NVIDIA ModelOpt in its own interpreter."""


class OptionGroup(BaseModel):
    """A frozen group of options; a bad value is InvalidInput naming it as its flag (``--jobs 0: give 1 to 64``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    declarations: ClassVar[dict[str, flags.Flag]] = {}
    """The group's options as compiler/core/flags.py declares them."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise InvalidInput(self._describe(exc.errors()[0], values)) from None

    @classmethod
    def _describe(cls, error: Any, values: dict[str, Any]) -> str:
        name = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        field = cls.model_fields.get(name)
        if field is not None and error["type"] in ("greater_than_equal", "less_than_equal"):
            bounds = {type(m).__name__: m for m in field.metadata}
            low, high = getattr(bounds.get("Ge"), "ge", None), getattr(bounds.get("Le"), "le", None)
            message = f"give {low} to {high}" if high is not None else f"give at least {low}"
        return f"--{name.replace('_', '-')} {values.get(name)}: {message}"

    @classmethod
    def given(cls, options: Self | None, keywords: dict[str, Any]) -> Self:
        """The group a stage runs with: the one passed, or one made of the keywords of a Python API call (the
        documented examples of pull and export triton name their options as keywords)."""
        if options is not None and keywords:
            raise TypeError(f"give a {cls.__name__} or its keywords ({', '.join(keywords)}), not both")
        return options if options is not None else cls(**keywords)

    def keyed_values(self) -> dict[str, Any]:
        """The values that enter a reuse key (JSON): every option declared ``keyed``, so an option added to the
        group is part of the key unless its declaration says why not."""
        return self.model_dump(mode="json", exclude={n for n, f in self.declarations.items() if not f.keyed})


def declared(declarations: dict[str, flags.Flag]):
    """The fields of a group as its declarations (compiler/core/flags.py) give them: ``field("samples", ge=1)`` is
    the field with the declared default and help, and the bounds its consumer accepts."""

    def field(name: str, **bounds: Any) -> Any:
        flag = declarations[name]
        default = flag.field_default
        if isinstance(default, dict):
            return Field(default_factory=dict, description=flag.help, **bounds)
        return Field(default, description=flag.help, **bounds)

    return field


_build, _calibrate, _check = declared(flags.BUILD), declared(flags.CALIBRATE), declared(flags.CHECK)


class BuildOptions(OptionGroup):
    """How ``compile build`` prepares, builds and caches its targets (the SKUs, precisions and profiles are the
    targets themselves, not options)."""

    declarations = flags.BUILD

    calibration: tuple[Path, ...] = _build("calibration")
    allow_failed: bool = _build("allow_failed")
    data: Path | None = _build("data")
    method: str | None = _build("method")
    dim: tuple[str, ...] = _build("dim")
    """Input dims renamed (INPUT:AXIS=NAME); the renamed copy's digest keys the engines."""
    cache_dir: Path | None = _build("cache_dir")
    use_cache: bool = _build("use_cache")
    remote_cache: str | None = _build("remote_cache")
    explain: bool = _build("explain")
    backend: str | None = _build("backend")
    skus: Path | None = _build("skus")
    """Its SKUs' compute capability and backend enter every engine's key; the file's path does not."""
    workspace_mb: StrictInt | None = _build("workspace_mb", ge=1, le=MAX_WORKSPACE_MB)
    optimization_level: StrictInt | None = _build("optimization_level", ge=0, le=5)
    jobs: StrictInt = _build("jobs", ge=1, le=MAX_JOBS)

    @field_validator("calibration", mode="before")
    @classmethod
    def _folders(cls, value: Any) -> Any:
        """One folder (the Python API's ``calibration=path``) or several, one per calibrated precision."""
        if value is None:
            return ()
        return (value,) if isinstance(value, str | Path) else value

    def model_post_init(self, context: Any) -> None:
        """The rules that join options (the field bounds are in the fields)."""
        if self.calibration and self.data is not None:
            raise InvalidInput(
                "--calibration and --data both given: pass --calibration DIR to build from a "
                "finished calibration, or --data DATA.npz to calibrate now"
            )
        if self.method is not None and self.data is None:
            raise InvalidInput(
                f"--method {self.method} chooses how --data is calibrated; pass --data DATA.npz or drop --method"
            )
        if self.method is not None and self.method not in METHODS:
            raise InvalidInput(f"--method {self.method}: choose from {', '.join(METHODS)}")
        from compiler.core.plugins import backend_names

        if self.backend is not None and self.backend not in backend_names():
            raise InvalidInput(f"--backend {self.backend!r}: choose from {', '.join(backend_names())}")


def one_or_many(value: Any) -> Any:
    """One value in the pipeline YAML (``output: output0:detection``) is a list of one."""
    return (value,) if isinstance(value, str) else value


def parse_sample_axes(texts: tuple[str, ...]) -> dict[str, int]:
    """``("h=1",)`` -> ``{"h": 1}``: each INPUT=AXIS once, a whole axis of at least 0 (checked against the model's
    inputs when it is read)."""
    axes: dict[str, int] = {}
    for text in texts:
        name, sep, given = str(text).partition("=")
        if not sep or not name.strip() or not given.strip().isdigit() or int(given) > 32:
            raise InvalidInput(f"--sample-axis {text}: give INPUT=AXIS, a whole axis from 0 (e.g. --sample-axis h0=1)")
        if name in axes:
            raise InvalidInput(f"--sample-axis {text}: input {name!r} is given twice; give each input once")
        axes[name] = int(given)
    return axes


MAX_NUM_BINS = 1 << 14
"""Entropy's threshold search grows with the bins (digits CNN: 2048 bins ~3 s, 16384 ~110 s, 65536 ~400 s) and
numpy allocates them per tensor: 8x TensorRT's own 2048 is plenty."""
MAX_CHUNK_MB = 1 << 20


class CalibrationOptions(OptionGroup):
    """How ``compile calibrate`` turns data into ranges (int8/fp8) or converts (fp16), and the gates on the held-out
    accuracy. NaN and infinity are refused everywhere; whole numbers must be whole."""

    declarations = flags.CALIBRATE

    precision: str = _calibrate("precision")
    method: str = _calibrate("method")
    samples: StrictInt | None = _calibrate("samples", ge=1)
    batch_size: StrictInt = _calibrate("batch_size", ge=1)
    holdout: float = _calibrate("holdout", gt=0)
    seed: StrictInt = _calibrate("seed", ge=0)
    percentile: float = _calibrate("percentile", gt=50, le=100)
    num_bins: StrictInt = _calibrate("num_bins", ge=256, le=MAX_NUM_BINS)
    chunk_mb: StrictInt = _calibrate("chunk_mb", ge=1, le=MAX_CHUNK_MB)
    min_cosine: float | None = _calibrate("min_cosine", ge=-1, le=1)
    min_top1: float | None = _calibrate("min_top1", ge=0, le=1)
    max_abs_error: float | None = _calibrate("max_abs_error", ge=0)
    min_sqnr: float | None = _calibrate("min_sqnr", ge=-200, le=200)
    exclude: tuple[str, ...] = _calibrate("exclude")
    fallback: str | None = _calibrate("fallback")
    quantizer: str = _calibrate("quantizer")
    output: tuple[str, ...] = _calibrate("output")
    sample_axis: tuple[str, ...] = _calibrate("sample_axis")
    _one_or_many = field_validator("output", "sample_axis", mode="before")(one_or_many)

    metric: str | None = _calibrate("metric")
    min_metric: float | None = _calibrate("min_metric")
    min_samples: StrictInt = _calibrate("min_samples", ge=0)
    gate_on: Literal["estimate", "lower-bound"] = _calibrate("gate_on")
    labels: Path | None = _calibrate("labels")
    reuse: bool = _calibrate("reuse")

    @field_validator("exclude", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, str):  # one name in the pipeline YAML
            return (value,)
        if isinstance(value, list | tuple) and not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError("give node names or op types (non-empty text)")
        return value

    @field_validator(
        "holdout", "percentile", "min_cosine", "min_top1", "max_abs_error", "min_sqnr", "min_metric", mode="before"
    )
    @classmethod
    def _not_a_flag(cls, value: Any) -> Any:
        if isinstance(value, bool):  # True is 1 to Python, not a number anyone meant
            raise ValueError("give a number, not true/false")
        return value

    def model_post_init(self, context: Any) -> None:
        from compiler.core.records import CALIBRATE_PRECISIONS

        if self.precision not in CALIBRATE_PRECISIONS:
            raise InvalidInput(f"--precision {self.precision}: choose from {', '.join(CALIBRATE_PRECISIONS)}")
        if self.method not in METHODS:
            raise InvalidInput(f"--method {self.method}: choose from {', '.join(METHODS)}")
        if self.quantizer not in QUANTIZERS:
            raise InvalidInput(f"--quantizer {self.quantizer}: choose from {', '.join(QUANTIZERS)}")
        check_declarations(self.output)
        parse_sample_axes(self.sample_axis)
        if self.fallback not in (None, "auto"):
            raise InvalidInput(f"--fallback {self.fallback}: the only search is auto (or leave it out)")
        if self.holdout >= 1 and self.holdout != int(self.holdout):
            raise InvalidInput(
                f"--holdout {self.holdout}: give a fraction below 1 (0.2) or a whole count of samples (300)"
            )

    @property
    def gates(self) -> dict[str, float | int | str | None]:
        """The thresholds given (the unset ones take the precision's defaults, compiler.data.agreement) and what
        they hold."""
        return {
            "min_cosine": self.min_cosine,
            "min_top1": self.min_top1,
            "max_abs_error": self.max_abs_error,
            "min_sqnr": self.min_sqnr,
            "min_metric": self.min_metric,
            "min_samples": self.min_samples,
            "gate_on": self.gate_on,
        }


ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
"""Polygraphy's error statistics: which figure of the absolute/relative error is held to atol/rtol."""
MAX_CHECK_SAMPLES = 1 << 16
SKIPPABLE = ("accuracy",)
"""Checks that fail when they cannot be measured, unless ``--allow-skip`` names them."""


class CheckOptions(OptionGroup):
    """What ``compile check`` looks at and the gates it holds the build to. Accuracy thresholds are per output:
    the key ``""`` is every output not named; unset ones take the precision's defaults (docs/check.md)."""

    declarations = flags.CHECK

    data: Path | None = _check("data")
    samples: StrictInt = _check("samples", ge=1, le=MAX_CHECK_SAMPLES)
    batch_size: StrictInt = _check("batch_size", ge=1, le=1024)
    model: Path | None = _check("model")
    dim: tuple[str, ...] = _check("dim")
    """The renames the build was given (INPUT:AXIS=NAME): the model is read renamed, as the build read it."""
    profiles: Path | None = _check("profiles")
    rules: Path | None = _check("rules")
    skus: Path | None = _check("skus")
    headroom: float = _check("headroom", ge=0, lt=1)
    min_low_precision: float = _check("min_low_precision", ge=0, le=1)
    max_partitions: StrictInt | None = _check("max_partitions", ge=1)
    max_unsupported: StrictInt | None = _check("max_unsupported", ge=0)
    max_boundary_mb: float | None = _check("max_boundary_mb", ge=0)
    atol: dict[str, float] = _check("atol")
    rtol: dict[str, float] = _check("rtol")
    error_stat: dict[str, str] = _check("error_stat")
    error_quantile: dict[str, float] = _check("error_quantile")
    min_cosine: dict[str, float] = _check("min_cosine")
    min_top1: dict[str, float] = _check("min_top1")
    min_sqnr: dict[str, float] = _check("min_sqnr")
    calibration: tuple[Path, ...] = _check("calibration")
    allow_skip: tuple[str, ...] = _check("allow_skip")
    output: tuple[str, ...] = _check("output")
    sample_axis: tuple[str, ...] = _check("sample_axis")
    _one_or_many = field_validator("output", "sample_axis", mode="before")(one_or_many)

    metric: str | None = _check("metric")
    min_metric: float | None = _check("min_metric")
    min_samples: StrictInt = _check("min_samples", ge=0)
    gate_on: Literal["estimate", "lower-bound"] = _check("gate_on")
    labels: Path | None = _check("labels")
    chunk_mb: StrictInt = _check("chunk_mb", ge=1, le=MAX_CHUNK_MB)
    lint: bool = _check("lint")
    reuse: bool = _check("reuse")
    cache_dir: Path | None = _check("cache_dir")

    @field_validator("headroom", "max_boundary_mb", "min_metric", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("give a number, not true/false")
        return value

    def model_post_init(self, context: Any) -> None:
        bounds = {
            "atol": (0, None),
            "rtol": (0, None),
            "error_quantile": (0, 1),
            "min_cosine": (-1, 1),
            "min_top1": (0, 1),
            "min_sqnr": (-200, 200),
        }
        for name, (low, high) in bounds.items():
            for output, value in getattr(self, name).items():
                flag = f"--{name.replace('_', '-')} {f'{output}=' if output else ''}{value}"
                if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                    raise InvalidInput(f"{flag}: give a number")
                if value < low or (high is not None and value > high):
                    raise InvalidInput(
                        f"{flag}: give {low} to {high}" if high is not None else f"{flag}: give at least {low}"
                    )
        check_declarations(self.output)
        parse_sample_axes(self.sample_axis)
        for name in self.allow_skip:
            if name not in SKIPPABLE:
                raise InvalidInput(f"--allow-skip {name}: choose from {', '.join(SKIPPABLE)}")
        for output, stat in self.error_stat.items():
            if stat not in ERROR_STATS:
                raise InvalidInput(
                    f"--error-stat {f'{output}=' if output else ''}{stat}: choose from {', '.join(ERROR_STATS)}"
                )


_publish, _promote, _pull = declared(flags.PUBLISH), declared(flags.PROMOTE), declared(flags.PULL)
_triton, _rtx = declared(flags.EXPORT_TRITON), declared(flags.EXPORT_RTX)


class PublishOptions(OptionGroup):
    """How ``compile publish`` treats a build that partly failed and a store holding damaged blobs (the build
    folders, the release's name and version are what is published, not options)."""

    declarations = flags.PUBLISH

    allow_failed: bool = _publish("allow_failed")
    repair: bool = _publish("repair")
    golden: bool = _publish("golden")


class PromoteOptions(OptionGroup):
    """Which versions ``compile promote`` lets a channel point at, and whether it replaces a damaged channel."""

    declarations = flags.PROMOTE

    allow_yanked: bool = _promote("allow_yanked")
    repair: bool = _promote("repair")
    allow_failed: bool = _promote("allow_failed")


class PullOptions(OptionGroup):
    """Which plan ``compile pull`` picks beside the SKU, whom it trusts and what it writes beside the plan."""

    declarations = flags.PULL

    precision: str | None = _pull("precision")
    tensorrt_version: str | None = _pull("tensorrt_version")
    verify_key: str | Path | None = _pull("verify_key")
    use_cache: bool = _pull("use_cache")
    allow_yanked: bool = _pull("allow_yanked")
    golden: bool = _pull("golden")


class TritonOptions(OptionGroup):
    """Which Triton ``compile export triton`` writes for, the model folder's name and version, and whom it
    trusts (the values are checked where they are used, with the messages of docs/triton.md)."""

    declarations = flags.EXPORT_TRITON

    triton_release: str | None = _triton("triton_release")
    triton_tensorrt: str | None = _triton("triton_tensorrt")
    model_name: str | None = _triton("model_name")
    model_version: StrictInt | None = _triton("model_version")
    triton_version: StrictInt | None = _triton("triton_version")
    precision: str | None = _triton("precision")
    default_plan: str | None = _triton("default_plan")
    verify_key: str | Path | None = _triton("verify_key")
    use_cache: bool = _triton("use_cache")
    allow_yanked: bool = _triton("allow_yanked")


class RtxOptions(OptionGroup):
    """Which engines ``compile export rtx`` writes, for which TensorRT-RTX, under what name, and whom it trusts."""

    declarations = flags.EXPORT_RTX

    runtime_version: str | None = _rtx("runtime_version")
    model_name: str | None = _rtx("model_name")
    precision: str | None = _rtx("precision")
    verify_key: str | Path | None = _rtx("verify_key")
    use_cache: bool = _rtx("use_cache")
    allow_yanked: bool = _rtx("allow_yanked")
