"""Option groups: each stage takes one typed, validated options object, made once by the CLI (or a caller of the
Python API) and passed whole, so adding an option touches its group and the CLI only.

Values are checked here against the range their consumer accepts, so nothing a user types reaches TensorRT or
onnxruntime as a value it would reject with a type error; a bad one is one ``error:`` line naming the option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from compiler.core import flags
from compiler.core.errors import InvalidInput

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


def described(texts: dict[str, str]):
    """Give each field its option's help (compiler/core/flags.py) as its description: one text for both."""

    def describe(group: type[OptionGroup]) -> type[OptionGroup]:
        for name, text in texts.items():
            group.model_fields[name].description = text
        return group

    return describe


@described(flags.BUILD)
class BuildOptions(OptionGroup):
    """How ``compile build`` prepares, builds and caches its targets (the SKUs, precisions and profiles are the
    targets themselves, not options)."""

    calibration: tuple[Path, ...] = ()
    data: Path | None = None
    method: str | None = None
    cache_dir: Path | None = None
    use_cache: bool = True
    remote_cache: str | None = None
    explain: bool = False
    backend: str | None = None
    workspace_mb: StrictInt | None = Field(None, ge=1, le=MAX_WORKSPACE_MB)
    optimization_level: StrictInt | None = Field(None, ge=0, le=5)
    jobs: StrictInt = Field(1, ge=1, le=MAX_JOBS)

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
        from typing import get_args

        from compiler.core.profiles import Backend

        if self.backend is not None and self.backend not in get_args(Backend):
            raise InvalidInput(f"--backend {self.backend!r}: choose from {', '.join(get_args(Backend))}")


MAX_NUM_BINS = 1 << 14
"""Entropy's threshold search grows with the bins (digits CNN: 2048 bins ~3 s, 16384 ~110 s, 65536 ~400 s) and
numpy allocates them per tensor: 8x TensorRT's own 2048 is plenty."""
MAX_CHUNK_MB = 1 << 20


@described(flags.CALIBRATE)
class CalibrationOptions(OptionGroup):
    """How ``compile calibrate`` turns data into ranges (int8/fp8) or converts (fp16), and the gates on the held-out
    accuracy. NaN and infinity are refused everywhere; whole numbers must be whole."""

    precision: str = "int8"
    method: str = "minmax"
    samples: StrictInt | None = Field(None, ge=1)
    batch_size: StrictInt = Field(32, ge=1)
    holdout: float = Field(0.2, gt=0)
    seed: StrictInt = Field(0, ge=0)
    percentile: float = Field(99.999, gt=50, le=100)
    num_bins: StrictInt = Field(2048, ge=256, le=MAX_NUM_BINS)
    chunk_mb: StrictInt = Field(256, ge=1, le=MAX_CHUNK_MB)
    min_cosine: float | None = Field(None, ge=-1, le=1)
    min_top1: float | None = Field(None, ge=0, le=1)
    max_abs_error: float | None = Field(None, ge=0)
    min_sqnr: float | None = Field(None, ge=-200, le=200)
    exclude: tuple[str, ...] = ()
    fallback: str | None = None
    quantizer: str = "onnxruntime"
    metric: str | None = None
    min_metric: float | None = None
    labels: Path | None = None
    reuse: bool = True

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
        if self.fallback not in (None, "auto"):
            raise InvalidInput(f"--fallback {self.fallback}: the only search is auto (or leave it out)")
        if self.holdout >= 1 and self.holdout != int(self.holdout):
            raise InvalidInput(
                f"--holdout {self.holdout}: give a fraction below 1 (0.2) or a whole count of samples (300)"
            )

    @property
    def gates(self) -> dict[str, float | None]:
        """The thresholds given; the unset ones take the precision's defaults (compiler.data.agreement)."""
        return {
            "min_cosine": self.min_cosine,
            "min_top1": self.min_top1,
            "max_abs_error": self.max_abs_error,
            "min_sqnr": self.min_sqnr,
            "min_metric": self.min_metric,
        }


ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
"""Polygraphy's error statistics: which figure of the absolute/relative error is held to atol/rtol."""
MAX_CHECK_SAMPLES = 1 << 16
SKIPPABLE = ("accuracy",)
"""Checks that fail when they cannot be measured, unless ``--allow-skip`` names them."""


@described(flags.CHECK)
class CheckOptions(OptionGroup):
    """What ``compile check`` looks at and the gates it holds the build to. Accuracy thresholds are per output:
    the key ``""`` is every output not named; unset ones take the precision's defaults (docs/check.md)."""

    data: Path | None = None
    samples: StrictInt = Field(64, ge=1, le=MAX_CHECK_SAMPLES)
    batch_size: StrictInt = Field(8, ge=1, le=1024)
    model: Path | None = None
    profiles: Path | None = None
    rules: Path | None = None
    skus: Path | None = None
    headroom: float = Field(0.1, ge=0, lt=1)
    max_partitions: StrictInt | None = Field(1, ge=1)
    max_unsupported: StrictInt | None = Field(0, ge=0)
    max_boundary_mb: float | None = Field(None, ge=0)
    atol: dict[str, float] = {}
    rtol: dict[str, float] = {}
    error_stat: dict[str, str] = {}
    error_quantile: dict[str, float] = {}
    min_cosine: dict[str, float] = {}
    min_top1: dict[str, float] = {}
    min_sqnr: dict[str, float] = {}
    calibration: tuple[Path, ...] = ()
    allow_skip: tuple[str, ...] = ()
    metric: str | None = None
    min_metric: float | None = None
    labels: Path | None = None
    chunk_mb: StrictInt = Field(256, ge=1, le=MAX_CHUNK_MB)
    lint: bool = True
    reuse: bool = True
    cache_dir: Path | None = None

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
        for name in self.allow_skip:
            if name not in SKIPPABLE:
                raise InvalidInput(f"--allow-skip {name}: choose from {', '.join(SKIPPABLE)}")
        for output, stat in self.error_stat.items():
            if stat not in ERROR_STATS:
                raise InvalidInput(
                    f"--error-stat {f'{output}=' if output else ''}{stat}: choose from {', '.join(ERROR_STATS)}"
                )
