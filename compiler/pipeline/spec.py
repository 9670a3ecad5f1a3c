"""The pipeline file: one YAML that says what to release, for which GPUs, and the gates it must pass.

Paths in it are relative to the file itself, so a pipeline runs the same from any directory. Every error names
the field and its line.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from compiler.core.errors import InvalidInput
from compiler.core.options import CalibrationOptions, CheckOptions
from compiler.core.plugins import backend_names, scheme_mistake
from compiler.core.records import Precision
from compiler.core.text import and_more
from compiler.core.yaml import describe_error, read_yaml
from compiler.stores.base import check_name, check_version


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReleaseSpec(_Strict):
    name: str
    version: str
    golden: bool = True
    """Ship the golden inputs the check kept (held-out samples and FP32 outputs); false for data that may not leave."""
    name_data: bool = True
    """Name the calibration data by its path in the provenance; false: by its digest only."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _as_value_error(check_name, value)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        """Only a string: YAML reads ``1.10`` as 1.1, ``010`` as 8, ``0x1F`` as 31, ``12:30`` as 750 and ``yes``
        as true, so any other type has already lost the version that was written."""
        if not isinstance(value, str):
            kind = (
                "a number"
                if isinstance(value, int | float) and not isinstance(value, bool)
                else "a boolean"
                if isinstance(value, bool)
                else "a list"
                if isinstance(value, list)
                else "a mapping"
                if isinstance(value, dict)
                else "no value"
                if value is None
                else type(value).__name__
            )
            raise ValueError(
                f"YAML read it as {kind}, not the text written (1.10 reads as 1.1, 010 as 8); quote "
                'the version, e.g. version: "1.10"'
            )
        return _as_value_error(check_version, value)


def _as_value_error(check, value: str) -> str:
    try:
        return check(value)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


class TargetSpec(_Strict):
    precisions: list[Precision] = Field(min_length=1)
    backend: str | None = None
    """Overrides the SKU's backend (tensorrt-rtx, tensorrt)."""

    @field_validator("precisions")
    @classmethod
    def _once_each(cls, value: list[Precision]) -> list[Precision]:
        """A SKU's engine of one precision is one target: listed twice, its release could never be finalized."""
        twice = sorted({p.value for p in value if value.count(p) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once; list each precision once")
        return value

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str | None) -> str | None:
        if value is not None and value not in backend_names():
            raise ValueError(f"unknown backend {value[:80]!r}; choose one of: {', '.join(backend_names())}")
        return value


class CalibrationSpec(CalibrationOptions):
    """``compile calibrate``'s options and the data; the precision comes from the targets (int8 or fp8)."""

    __init__ = BaseModel.__init__  # validated as part of the pipeline: an error names its field and line, no flag
    data: Path


class CheckSpec(CheckOptions):
    """``compile check``'s options (docs/check.md); per-output thresholds as ``{OUTPUT: X}`` or ``{"": X}``."""

    __init__ = BaseModel.__init__


class SigningSpec(_Strict):
    key: str
    """Where the release's signing key is: ``env://VAR`` (the PEM a CI secret put in ``$VAR``), an HSM or KMS key
    URI (``hsm:``, ``awskms:``, ``gcpkms:``, ``azurekms:``), ``sigstore:`` (keyless, the CI's OIDC identity) or a
    file path outside the repository (relative to the pipeline file). Never the key itself."""

    @field_validator("key")
    @classmethod
    def _reference(cls, value: str) -> str:
        if "BEGIN" in value or "\n" in value:
            raise ValueError(
                "holds key material; name where the key is (env://VAR, an HSM or KMS key URI, "
                "sigstore:, or a file path outside the repository), never the key itself"
            )
        from compiler.releases.keyrefs import is_reference, shape_problem

        if is_reference(value):
            problem = shape_problem(value)
            if problem:
                raise ValueError(problem)
            return value
        scheme = value.split("://", 1)[0] if "://" in value else None
        if scheme is not None and scheme != "env":
            raise ValueError(
                f"{scheme}:// keys are not supported; use env://VAR, hsm:, awskms:, gcpkms:, "
                "azurekms:, sigstore: or a file path"
            )
        if scheme == "env" and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value[len("env://") :]):
            raise ValueError("env://VAR: VAR must be an environment variable's name")
        if not value:
            raise ValueError("empty; use env://VAR or a file path")
        return value


RunnerLabel = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:{}/+-]+$")]


class Pipeline(_Strict):
    release: ReleaseSpec
    model: Path
    const: dict[str, float] = {}
    """Inputs frozen to a value (``{sr: 16000}``), as ``--const sr=16000``: every stage takes the frozen model."""
    profiles: Path | None = None
    """Shape profiles; without them a model whose input shapes are all static builds at those shapes, as
    ``compile build`` does (a model with dynamic dims is refused at build, naming them)."""
    dims: list[str] = []
    """Input dims renamed for every stage, as ``--dim`` takes them (``x:2=H``): the stages read a renamed copy."""
    targets: dict[str, TargetSpec] = Field(min_length=1)
    """SKU -> its precisions (or ``{precisions: [...], backend: ...}``)."""
    calibration: CalibrationSpec | None = None
    check: CheckSpec = CheckSpec()
    store: str = "./artifacts"
    """A store URI; a local path is relative to the pipeline file."""
    signing: SigningSpec | None = None
    """Sign the release (docs/provenance.md); ``$COMPILE_SIGN_KEY`` takes precedence."""
    cache: str | None = None
    """The remote cache's URI (docs/ci-cache.md); a local path is relative to the pipeline file."""
    skus: Path | None = None
    """More SKUs (docs/skus.md) for the targets, the build and the check (unless ``check.skus`` names another)."""
    runners: dict[str, list[RunnerLabel]] = {}
    """The CI runner labels of the build jobs: ``cpu`` (backends that build anywhere), ``gpu`` (those that need the
    target's GPU; ``{sku}`` in a label is the job's SKU) or a SKU's name for that SKU's job alone."""

    @field_validator("dims")
    @classmethod
    def _dims(cls, value: list[str]) -> list[str]:
        """Each entry INPUT:AXIS=NAME (whether the model has that dynamic dim is known once it is read)."""
        from compiler.data.dims import parse_dims

        parse_dims(value, "dims:")
        return value

    @field_validator("store", "cache")
    @classmethod
    def _scheme(cls, value: str | None) -> str | None:
        """``s3:/bucket`` is a misspelt URI, not a folder beside the pipeline file."""
        mistake = scheme_mistake(value) if value else None
        if mistake == "unknown scheme":
            raise ValueError("unknown scheme; see docs/store.md for the stores")
        if mistake:  # user:password@ is never echoed
            raise ValueError(f"{mistake if '@' not in value else mistake.split('://')[0] + '://...'}?")
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _precision_lists(cls, value: Any) -> Any:
        """``rtx-4090: [fp16, int8]`` is short for ``rtx-4090: {precisions: [fp16, int8]}``; SKUs are the catalog's
        lower-case names, however they are typed (``RTX-4090``)."""
        if not isinstance(value, dict):
            return value
        named = [sku.lower() if isinstance(sku, str) else sku for sku in value]
        twice = sorted({str(sku) for sku in named if named.count(sku) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once (in other cases); list each SKU once")
        return {
            name: {"precisions": spec} if isinstance(spec, list) else spec
            for name, spec in zip(named, value.values(), strict=True)
        }

    @field_validator("runners")
    @classmethod
    def _runner_keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, labels in value.items():
            if not labels:
                raise ValueError(f"{key}: give at least one label")
        return {key.lower(): labels for key, labels in value.items()}

    def target(self, sku: str) -> TargetSpec:
        return self.targets[sku]


class LoadedPipeline(BaseModel):
    """A pipeline with its paths made absolute, and the digest of the file (jobs of one release must agree)."""

    path: Path
    sha256: str
    spec: Pipeline


def load_pipeline(path: str | Path) -> LoadedPipeline:
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping with release, model, targets (and profiles)")
    try:
        spec = Pipeline.model_validate(data)
    except ValidationError as exc:
        raise _problems(path, exc) from None
    except InvalidInput as exc:  # an option group's rule joining options (--method, per-output thresholds)
        raise InvalidInput(f"{path}: {exc}") from None
    base = path.parent.resolve()
    resolved = {"model": base / spec.model, "profiles": base / spec.profiles if spec.profiles else None}
    if spec.skus:
        resolved["skus"] = base / spec.skus
    if spec.calibration:
        calibration = {"data": base / spec.calibration.data} | _user_files(base, spec.calibration)
        resolved["calibration"] = spec.calibration.model_copy(update=calibration)
    check_paths = {
        k: base / v
        for k, v in (
            ("data", spec.check.data),
            ("rules", spec.check.rules),
            ("skus", spec.check.skus or spec.skus),
            ("cache_dir", spec.check.cache_dir),
        )
        if v
    }
    resolved["check"] = spec.check.model_copy(update=check_paths | _user_files(base, spec.check))
    if "://" not in spec.store or spec.store.startswith("file://"):  # normalised: not pipelines/../artifacts
        resolved["store"] = os.path.normpath(base / spec.store.removeprefix("file://"))
    if spec.cache and ("://" not in spec.cache or spec.cache.startswith("file://")):
        resolved["cache"] = os.path.normpath(base / spec.cache.removeprefix("file://"))
    for sku in spec.targets:
        check_name(sku)  # job names in the store
    return LoadedPipeline(
        path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), spec=spec.model_copy(update=resolved)
    )


def _user_files(base: Path, section: Any) -> dict[str, Any]:
    """A section's metric (a ``path/to/metrics.py:function``; a dotted module stays importable as named) and
    labels file, relative to the pipeline file as every path in it."""
    found: dict[str, Any] = {}
    metric = getattr(section, "metric", None)
    if metric:
        module, _, function = metric.rpartition(":")
        if module.endswith(".py"):
            found["metric"] = f"{os.path.normpath(base / module)}:{function}"
    if getattr(section, "labels", None):
        found["labels"] = base / section.labels
    return found


MAX_LISTED = 20
"""Problems an error line lists, first by line; the rest are counted."""


def _problems(path: Path, exc: ValidationError) -> InvalidInput:
    """Every problem of the file, each with its field and line, in the order of the file: fixing one at a time
    took a run per mistake (``release: Field required (and 3 more)``). One line, as every error is."""
    root = _composed(path)
    found = sorted(((_line_of(root, e["loc"]), describe_error(e)) for e in exc.errors()), key=lambda p: p[0] or 0)
    if len(found) == 1:
        line, problem = found[0]
        return InvalidInput(f"{path}{f' line {line}' if line else ''}: {problem}")
    listed = "; ".join(f"line {line}: {problem}" if line else problem for line, problem in found[:MAX_LISTED])
    return InvalidInput(f"{path}: {len(found)} problems: {listed}{and_more(len(found) - MAX_LISTED)}")


def _composed(path: Path) -> yaml.Node | None:
    """The file's node tree (safe: composing builds no object and expands no alias), for the lines of its fields."""
    try:
        return yaml.compose(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return None


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (the deepest part of it that exists)."""
    line = node.start_mark.line + 1 if node else None
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((value for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line
