"""Shape profiles and the GPU SKU catalog: schemas, loading, and validation against a model.

Profiles are checked against the model's inputs before any build, so a typo costs
a second, not a failed build matrix.
"""

from __future__ import annotations

from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from compiler.config import load_yaml
from compiler.errors import InvalidInput

Dim = int | str | None
"""A model dimension: fixed size, symbolic name (dynamic), or unknown (dynamic)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShapeRange(_Strict):
    min: list[int]
    opt: list[int]
    max: list[int]


class ShapeProfile(_Strict):
    name: str = Field(min_length=1)
    shapes: dict[str, ShapeRange] = Field(min_length=1)


class ProfileSet(_Strict):
    profiles: list[ShapeProfile] = Field(min_length=1)

    @field_validator("profiles")
    @classmethod
    def _unique_names(cls, profiles: list[ShapeProfile]) -> list[ShapeProfile]:
        names = [p.name for p in profiles]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"profile names must be unique; repeated: {', '.join(duplicates)}")
        return profiles


Backend = Literal["tensorrt-rtx", "tensorrt"]


class Sku(_Strict):
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    backend: Backend
    memory_gb: float = Field(gt=0)
    description: str = ""


class SkuCatalog(_Strict):
    skus: dict[str, Sku] = Field(min_length=1)

    def get(self, name: str) -> Sku:
        if name not in self.skus:
            raise InvalidInput(f"unknown SKU '{name}'; known SKUs: {', '.join(sorted(self.skus))}")
        return self.skus[name]


def load_profiles(path: str | Path) -> ProfileSet:
    return load_yaml(path, ProfileSet)


def load_sku_catalog(path: str | Path | None = None) -> SkuCatalog:
    """The given catalog, or the one bundled with the package (works from any directory)."""
    if path is None:
        with resources.as_file(resources.files("profiles") / "skus.yaml") as bundled:
            return load_yaml(bundled, SkuCatalog)
    return load_yaml(path, SkuCatalog)


def bundled_profiles_path(name: str) -> Path:
    return Path(str(resources.files("profiles") / name))


def validate_profiles(profiles: ProfileSet, inputs: dict[str, list[Dim]]) -> list[str]:
    """Every problem of every profile against the model's inputs (name -> dims); empty when valid."""
    errors: list[str] = []
    for profile in profiles.profiles:
        where = f"profile '{profile.name}'"
        for name in profile.shapes:
            if name not in inputs:
                errors.append(
                    f"{where}: input '{name}' is not a model input (model inputs: {', '.join(inputs)})"
                )
        symbols: dict[str, list[tuple[str, int, tuple[int, int, int]]]] = defaultdict(list)
        for name, dims in inputs.items():
            dynamic = [i for i, d in enumerate(dims) if not isinstance(d, int)]
            shape = profile.shapes.get(name)
            if shape is None:
                if dynamic:
                    errors.append(
                        f"{where}: dynamic input '{name}' (dims {_fmt(dims)}) has no shape; add min/opt/max"
                    )
                continue
            errors.extend(_check_input(where, name, dims, shape, symbols))
        for symbol, uses in symbols.items():
            first_input, first_axis, first_range = uses[0]
            for other_input, other_axis, other_range in uses[1:]:
                if other_range != first_range:
                    errors.append(
                        f"{where}: symbolic dim '{symbol}' is shared by {first_input}[{first_axis}] "
                        f"(min/opt/max {_fmt(first_range)}) and {other_input}[{other_axis}] "
                        f"({_fmt(other_range)}); give them the same range"
                    )
    return errors


def _check_input(where, name, dims, shape: ShapeRange, symbols) -> list[str]:
    errors = []
    ranks = {len(shape.min), len(shape.opt), len(shape.max)}
    if len(ranks) > 1:
        return [f"{where}: input '{name}': min, opt and max have different ranks ({_fmt(sorted(ranks))})"]
    rank = ranks.pop()
    if rank != len(dims):
        return [f"{where}: input '{name}': shapes have rank {rank} but the model's input has rank {len(dims)} "
                f"(dims {_fmt(dims)})"]
    for axis, dim in enumerate(dims):
        values = (shape.min[axis], shape.opt[axis], shape.max[axis])
        if isinstance(dim, int):
            if any(v != dim for v in values):
                errors.append(f"{where}: input '{name}' dim {axis} is static {dim} in the model, "
                              f"but the profile gives min/opt/max {_fmt(values)}")
            continue
        if not 1 <= values[0] <= values[1] <= values[2]:
            errors.append(f"{where}: input '{name}' dim {axis}: needs 1 <= min <= opt <= max, "
                          f"got min/opt/max {_fmt(values)}")
        if isinstance(dim, str):
            symbols[dim].append((name, axis, values))
    return errors


def _fmt(values) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in values) + "]"
