"""Shape profiles and the GPU SKU catalog: schemas, loading, and validation against a model.

Profiles are checked against the model's inputs before any build, so a typo costs
a second, not a failed build matrix.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from importlib import resources
from math import prod
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from compiler.core.errors import InvalidInput
from compiler.core.plugins import spoken_list
from compiler.core.text import and_more, printable
from compiler.core.yaml import describe_validation_error, load_yaml

Dim = int | str | None
"""A model dimension: fixed size, symbolic name (dynamic), or unknown (dynamic)."""


class TensorInfo(BaseModel):
    """A graph input's or output's declared type and shape."""

    name: str
    dtype: str
    shape: list[Dim] | None
    """None when the rank is unknown; a str entry is a symbolic dim, None an unknown dim."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


MAX_DIM = 2**31 - 1
"""The largest dim TensorRT takes in a profile. ``Dims`` holds int64, but ``IOptimizationProfile.set_shape``
(TensorRT-RTX 1.7, measured) refuses 2**31 ("inconsistent with other shapes"), accepts 2**32 yet not 2**63-1,
and a value past int64 is a TypeError of the bindings: dims are int32 in practice, as TensorRT documents for
shape tensors. A bound of our own keeps a typo from reaching the builder."""
MAX_VOLUME = 2**40
"""The most elements one shape may hold: TensorRT-RTX's builder reports "Profile kMAX values are not
self-consistent ... tensor volume exceeds 1099511627776" (2**40) past it and builds an engine that cannot run
at that shape."""


def _within_tensorrt(dim: int) -> int:
    if dim > MAX_DIM:
        raise ValueError(f"{dim} is beyond the largest dim TensorRT takes ({MAX_DIM} = 2**31-1)")
    return dim


Size = Annotated[StrictInt, AfterValidator(_within_tensorrt)]


class ShapeRange(_Strict):
    """One input's shapes: every dim an integer (true/false or 4.0 are typos, not sizes) that TensorRT can hold
    (at most :data:`MAX_DIM`), and no shape of more than :data:`MAX_VOLUME` elements."""

    min: list[Size]
    opt: list[Size]
    max: list[Size]

    @model_validator(mode="after")
    def _volume(self) -> ShapeRange:
        for key in ("min", "opt", "max"):
            dims = getattr(self, key)
            if all(d >= 0 for d in dims) and prod(dims) > MAX_VOLUME:
                raise ValueError(
                    f"{key} {list(dims)} holds {prod(dims)} elements, more than TensorRT's limit of "
                    f"{MAX_VOLUME} (2**40) per tensor"
                )
        return self


class ShapeProfile(_Strict):
    name: StrictStr = Field(min_length=1)
    shapes: dict[StrictStr, ShapeRange] = Field(min_length=1)


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
"""The backends' names (compiler.core.plugins; a test holds the two equal)."""


class Sku(_Strict):
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    backend: Backend
    memory_gb: float = Field(gt=0)
    description: str = Field("", max_length=200)
    architecture: str = Field("", max_length=40)
    """The GPU architecture (Ampere, Ada, Hopper, Blackwell, Orin…), for people."""
    platform: Literal["x86_64", "aarch64"] = "x86_64"
    """The CPU of the machines carrying this GPU: where datacenter TensorRT, which builds on the GPU itself, runs
    (Jetson and Grace systems are aarch64). TensorRT-RTX builds ahead of time anywhere."""
    tensorrt: str | None = Field(None, pattern=r"^>=\d+(\.\d+){0,3}$")
    """The oldest datacenter TensorRT that knows this GPU, as ``>=10.8``; None where any supported one does."""

    def host_problem(self, machine: str, tensorrt_version: str) -> str | None:
        """Why a datacenter TensorRT build for this SKU cannot run on this host, or None."""
        machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine.lower(), machine.lower())
        if machine != self.platform:
            return (
                f"its GPUs sit in {self.platform} machines and datacenter TensorRT builds on the GPU itself; "
                f"run this build there (this host is {machine})"
            )
        if self.tensorrt and _version(tensorrt_version) < _version(self.tensorrt.removeprefix(">=")):
            return f"it needs TensorRT {self.tensorrt}, and {tensorrt_version} is installed; upgrade tensorrt"
        return None

    @property
    def takes_fp8(self) -> bool:
        """FP8 builds from Ada (compute capability 8.9) on."""
        return tuple(map(int, self.compute_capability.split("."))) >= (8, 9)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:4])


def _sku_name(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", name):
        raise ValueError("a SKU name is 1-64 of a-z 0-9 . _ - in lower case, starting with a letter or digit")
    return name


SkuName = Annotated[str, AfterValidator(_sku_name)]
"""Lower case, as folders, records and CI runner labels carry it; what is typed matches in any case."""


class SkuCatalog(_Strict):
    skus: dict[SkuName, Sku] = Field(min_length=1)

    def name_of(self, name: str) -> str:
        """The catalog's name for ``name`` (``RTX-4090`` is rtx-4090); InvalidInput with the closest names."""
        if name.lower() in self.skus:
            return name.lower()
        close = difflib.get_close_matches(name.lower(), list(self.skus), n=3, cutoff=0.6)
        hint = f"did you mean {spoken_list(close)}? " if close else ""
        raise InvalidInput(
            f"unknown SKU '{printable(name)[:80]}'; {hint}known SKUs: {', '.join(sorted(self.skus))} "
            "(compile skus describes them)"
        )

    def get(self, name: str) -> Sku:
        return self.skus[self.name_of(name)]


def load_profiles(path: str | Path) -> ProfileSet:
    """Read a shape-profiles YAML file; schema errors name the profile, input and field at fault."""
    return load_yaml(path, ProfileSet, describe=_describe_profile_error)


def _describe_profile_error(exc: ValidationError, data: Any) -> str:
    """``profile 'online' input 'image' min[1]: Input should be a valid integer`` rather than pydantic's loc tuple."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    if loc == ["profiles"] and error["type"] == "too_short":
        return "profiles: empty; list at least one profile (a name and the shapes of each dynamic input)"
    if len(loc) < 2 or loc[0] != "profiles" or not isinstance(loc[1], int):
        return describe_validation_error(exc)
    index = loc[1]
    entries = data.get("profiles") if isinstance(data, dict) else None
    entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    where = f"profile '{name}'" if isinstance(name, str) and name else f"profiles[{index}]"
    rest = loc[2:]
    if rest[:1] == ["shapes"] and len(rest) >= 2:
        where += f" input '{rest[1]}'"
        rest = rest[2:]
        if rest and isinstance(rest[0], str):
            where += f" {rest[0]}"
            if len(rest) > 1 and isinstance(rest[1], int):
                where += f"[{rest[1]}]"
            rest = []
    elif rest:
        where += f" {rest[0]}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "too_short" and rest[:1] == ["shapes"]:
        message = "empty; give min, opt and max for each dynamic input of the model"
    if error["type"] == "extra_forbidden":
        expected = "min, opt, max" if " input '" in where else "name, shapes"
        message = f"unknown key; expected {expected}"
    return f"{where}: {message}" + and_more(len(exc.errors()) - 1)


def load_sku_catalog(path: str | Path | None = None, extra: str | Path | None = None) -> SkuCatalog:
    """The given catalog, or the one bundled with the package (works from any directory), with ``extra``'s
    entries added (``--skus FILE``), each replacing one of its name (check's memory fit of a smaller card)."""
    if path is None:
        with resources.as_file(resources.files("compiler.core") / "skus.yaml") as bundled:
            catalog = load_yaml(bundled, SkuCatalog)
    else:
        catalog = load_yaml(path, SkuCatalog)
    if extra is None:
        return catalog
    return SkuCatalog(skus={**catalog.skus, **load_yaml(extra, SkuCatalog).skus})


def bundled_catalog_path() -> Path:
    """The SKU catalog shipped inside the package (compiler/core/skus.yaml)."""
    return Path(str(resources.files("compiler.core") / "skus.yaml"))


STATIC_PROFILE = "static"
"""The profile a model of static input shapes builds with when no profiles file is given."""


def static_profiles(model: str | Path, inputs: dict[str, list[Dim] | None]) -> ProfileSet:
    """The one profile a model whose every input dim is fixed takes (min = opt = max = its shapes); InvalidInput
    naming the dynamic inputs otherwise, which need a profiles file."""
    dynamic = {
        name: dims
        for name, dims in inputs.items()
        if dims is None or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    }
    if dynamic or not inputs:
        shown = "; ".join(
            f"{name}: {'unknown rank' if dims is None else '[' + ', '.join(map(str, dims)) + ']'}"
            for name, dims in list(dynamic.items())[:3]
        )
        listed = (shown or "no inputs") + and_more(len(dynamic) - 3)
        raise InvalidInput(
            f"--profiles is needed: {model} has dynamic input dims ({listed}); give the shapes each engine takes "
            "in a profiles file (docs/profiles.md; compile inspect MODEL shows the inputs)"
        )
    shapes = {name: ShapeRange(min=list(dims), opt=list(dims), max=list(dims)) for name, dims in inputs.items()}
    return ProfileSet(profiles=[ShapeProfile(name=STATIC_PROFILE, shapes=shapes)])


def profiles_problem(path: str | Path, errors: list[str], hint: str = "") -> InvalidInput:
    """The one-line error for profiles that :func:`validate_profiles` found invalid."""
    return InvalidInput(f"{path}: {errors[0]}{and_more(len(errors) - 1, hint)}")


def validate_profiles(profiles: ProfileSet, inputs: dict[str, list[Dim] | None]) -> list[str]:
    """Every problem of every profile against the model's inputs (name -> dims, None if the rank is unknown).

    Rules: every dynamic input has a shape in every profile; no unknown input names; min/opt/max have the
    model's rank and its static dims; 1 <= min <= opt <= max on dynamic dims; a symbolic dim shared by
    several inputs (or axes) gets the same range everywhere in a profile. Empty when valid.
    """
    errors: list[str] = []
    known = ", ".join(inputs) if inputs else "none"
    for profile in profiles.profiles:
        where = f"profile '{profile.name}'"
        for name in profile.shapes:
            if name not in inputs:
                errors.append(f"{where}: input '{name}' is not a model input (model inputs: {known})")
        symbols: dict[str, list[tuple[str, int, tuple[int, int, int]]]] = defaultdict(list)
        for name, dims in inputs.items():
            shape = profile.shapes.get(name)
            if shape is None:
                if dims is None:
                    errors.append(f"{where}: input '{name}' has an unknown rank (dynamic); add min/opt/max for it")
                elif any(not isinstance(d, int) for d in dims):
                    errors.append(
                        f"{where}: dynamic input '{name}' (dims {format_dims(dims)}) has no shape; add min/opt/max"
                    )
                continue
            errors.extend(_check_input(where, name, dims, shape, symbols))
        for symbol, uses in symbols.items():
            first_input, first_axis, first_range = uses[0]
            for other_input, other_axis, other_range in uses[1:]:
                if other_range != first_range:
                    errors.append(
                        f"{where}: symbolic dim '{symbol}' is shared by input '{first_input}' dim {first_axis} "
                        f"(min/opt/max {format_dims(first_range)}) and input '{other_input}' dim {other_axis} "
                        f"(min/opt/max {format_dims(other_range)}); give them the same range"
                        + _rename_hint(symbol, (first_input, first_axis), (other_input, other_axis))
                    )
    return errors


def _rename_hint(symbol: str, first: tuple[str, int], other: tuple[str, int]) -> str:
    """For a dim name an exporter gave every dynamic dim alike (Paddle2ONNX's ``?``, onnx's ``unk__N``), how to
    give differing sizes names of their own: ``--dim`` with the two dims at hand."""
    if symbol != "?" and not symbol.startswith("unk__"):
        return ""
    renames = f"--dim {first[0]}:{first[1]}=D{first[1]} --dim {other[0]}:{other[1]}=D{other[1]}"
    if first[1] == other[1]:
        renames = f"--dim {first[0]}:{first[1]}=D1 --dim {other[0]}:{other[1]}=D2"
    return (
        f", or, if they are different sizes (an exporter named them all '{symbol}'), give them names of their own "
        f"with {renames} and name those in the profiles (docs/profiles.md)"
    )


def _check_input(where, name, dims: list[Dim] | None, shape: ShapeRange, symbols) -> list[str]:
    errors = []
    ranks = {"min": len(shape.min), "opt": len(shape.opt), "max": len(shape.max)}
    if len(set(ranks.values())) > 1:
        given = ", ".join(f"{key} {rank}" for key, rank in ranks.items())
        return [f"{where}: input '{name}': min, opt and max have different ranks ({given})"]
    rank = ranks["min"]
    if dims is None:
        dims = [None] * rank  # unknown rank: any rank, every dim dynamic
    if rank != len(dims):
        return [
            f"{where}: input '{name}': shapes have rank {rank} but the model's input has rank {len(dims)} "
            f"(dims {format_dims(dims)})"
        ]
    for axis, dim in enumerate(dims):
        values = (shape.min[axis], shape.opt[axis], shape.max[axis])
        if isinstance(dim, int):
            if any(v != dim for v in values):
                errors.append(
                    f"{where}: input '{name}' dim {axis} is static {dim} in the model, "
                    f"but the profile gives min/opt/max {format_dims(values)}; use {dim} for all three"
                )
            continue
        label = f"dim {axis} ('{dim}')" if isinstance(dim, str) else f"dim {axis}"
        if not 1 <= values[0] <= values[1] <= values[2]:
            errors.append(
                f"{where}: input '{name}' {label}: needs 1 <= min <= opt <= max, got min/opt/max {format_dims(values)}"
            )
        if isinstance(dim, str):
            symbols[dim].append((name, axis, values))
    return errors


def inconsistent_profiles(warnings: list[str]) -> str | None:
    """The error for an engine TensorRT built for shapes it found not self-consistent (``Profile kMAX values are
    not self-consistent. embeddings/add: … 512 != 128``): an engine that cannot run at its own profile."""
    found = next((w for w in warnings if "not self-consistent" in w), None)
    if found is None:
        return None
    detail = found.split(" In operator()")[0].split(" In executeContinuation")[0]
    return (
        f"the shape profiles ask for shapes the model cannot run; TensorRT says: {detail} Lower the max of the "
        f"input dims that reach that node (compile inspect MODEL --profiles FILE names them where it can)"
    )


def format_dims(dims: list[Dim] | tuple[Dim, ...] | None) -> str:
    """``[B, 1, 8, 8]``: a shape as errors and tables show it (``?`` an unknown dim, None an unknown rank)."""
    if dims is None:
        return "unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
