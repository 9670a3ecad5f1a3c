"""Option groups: each stage takes one typed, validated options object, made once by the CLI (or a caller of the
Python API) and passed whole, so adding an option touches its group and the CLI only.

Values are checked here against the range their consumer accepts, so nothing a user types reaches TensorRT or
onnxruntime as a value it would reject with a type error; a bad one is one ``error:`` line naming the option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compiler.errors import InvalidInput

MAX_WORKSPACE_MB = 1 << 20
"""1 TiB: above any GPU's memory, and far below where MiB << 20 overflows TensorRT's 64-bit pool size."""
MAX_JOBS = 64
METHODS = ("minmax", "entropy", "percentile")
"""How calibration turns activations into ranges."""


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


class BuildOptions(OptionGroup):
    """How ``compile build`` prepares, builds and caches its targets (the SKUs, precisions and profiles are the
    targets themselves, not options)."""

    calibration: Path | None = None
    """A finished ``compile calibrate`` folder for int8/fp8."""
    data: Path | None = None
    """Calibration data to calibrate int8/fp8 now (the result is kept in the build cache)."""
    method: str | None = None
    """The range method with ``data`` (default minmax)."""
    cache_dir: Path | None = None
    """The build cache (default $COMPILE_CACHE_DIR or ~/.cache/compile)."""
    use_cache: bool = True
    backend: str | None = None
    """Overrides the SKU's backend."""
    workspace_mb: int | None = Field(None, ge=1, le=MAX_WORKSPACE_MB)
    optimization_level: int | None = Field(None, ge=0, le=5)
    jobs: int = Field(1, ge=1, le=MAX_JOBS)
    """Builds at once, each in a process of its own."""

    def model_post_init(self, context: Any) -> None:
        if self.calibration is not None and self.data is not None:
            raise InvalidInput("--calibration and --data both given: pass --calibration DIR to build from a "
                               "finished calibration, or --data DATA.npz to calibrate now")
        if self.method is not None and self.data is None:
            raise InvalidInput(f"--method {self.method} chooses how --data is calibrated; pass --data DATA.npz or "
                               f"drop --method")
        if self.method is not None and self.method not in METHODS:
            raise InvalidInput(f"--method {self.method}: choose from {', '.join(METHODS)}")
