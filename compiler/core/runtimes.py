"""Which runtime loads a plan, and which versions of it may.

NVIDIA's engine-compatibility rules, as the release manifest records them per engine:

- Datacenter TensorRT: "By default, TensorRT engines are compatible only with the version of TensorRT used to build
  them"; built with ``BuilderFlag.VERSION_COMPATIBLE`` they also load under later versions of the same major
  ("engines built with version compatibility enabled using TensorRT 11.0 will be compatible with TensorRT 11.1 and
  later 11.x versions"). TensorRT documentation, Engine Compatibility / Version Compatibility:
  https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/advanced.html (version-compatible plans
  also need the runtime to allow the lean runtime the plan carries: Triton's ``version-compatible=true`` setting).
- TensorRT-RTX: "TensorRT-RTX engines are not compatible between different releases of TensorRT-RTX. If you deploy
  a new version of the TensorRT-RTX runtime library, you must also provide a new engine compiled with the same
  version"; ``IRuntime::getEngineValidity()`` checks the header without loading the engine. TensorRT-RTX
  documentation, Engine Compatibility:
  https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/engine-compatibility.html
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, model_validator

from compiler.core.plugins import BACKENDS

RuntimeFamily = Literal["tensorrt", "tensorrt-rtx"]
"""The backends' names (compiler.core.plugins; a test holds the two equal)."""
FAMILY_NAMES = {kind.name: kind.title for kind in BACKENDS}
VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,6}){0,4}")
"""A TensorRT version as its packages spell it (10.13.3.9, 1.7.1.116), or its leading parts (10.13)."""
PLAN_MAGIC = {kind.plan_magic: kind.name for kind in BACKENDS if kind.plan_magic}
"""A plan's first four bytes -> the runtime that wrote it, where we know the header (TensorRT-RTX's is documented
by what it builds here: ``vtrt``, version bytes at offset 24). A datacenter plan's header is not read."""


def parse_version(text: str) -> tuple[int, ...]:
    if not isinstance(text, str) or not VERSION.fullmatch(text):
        raise ValueError(f"{str(text)[:40]!r} is not a TensorRT version (numbers separated by dots, e.g. 10.13.3.9)")
    return tuple(int(part) for part in text.split("."))


class Runtime(BaseModel):
    """The runtime a plan needs: its family, the exact version that built it, and which versions may load it."""

    family: RuntimeFamily
    version: str
    """The exact version that built the plan."""
    version_compatible: bool = False
    """Built with datacenter TensorRT's version-compatibility flag (TensorRT-RTX has none)."""
    loads_with: str = ""
    """Which runtime versions may deserialize the plan, for people: ``==1.7.1.116`` or ``>=10.8.0.43,<11``."""

    @model_validator(mode="after")
    def _rule(self) -> Runtime:
        built = parse_version(self.version)
        if self.family == "tensorrt-rtx" and self.version_compatible:
            raise ValueError("TensorRT-RTX has no version-compatible plans: each loads only under its own release")
        rule = f">={self.version},<{built[0] + 1}" if self.version_compatible else f"=={self.version}"
        if self.loads_with and self.loads_with != rule:
            raise ValueError(
                f"loads_with {self.loads_with!r} contradicts the {FAMILY_NAMES[self.family]} rule for "
                f"version {self.version} ({rule})"
            )
        self.loads_with = rule
        return self

    @property
    def family_name(self) -> str:
        return FAMILY_NAMES[self.family]

    @property
    def name(self) -> str:
        return f"{self.family_name} {self.version}"

    def loads(self, version: str) -> bool:
        """Whether a runtime of ``version`` may load the plan. A version of fewer parts (``10.8``) stands for every
        release it starts: it matches a plan built by 10.8.0.43, as ``compile pull --tensorrt-version 10.8`` means."""
        given, built = parse_version(version), parse_version(self.version)
        if not self.version_compatible:
            return built[: len(given)] == given
        return given[0] == built[0] and given >= built[: len(given)]


def runtime_of(backend: dict[str, Any], builder_options: dict[str, Any]) -> Runtime:
    """The runtime of a plan from what its engine.json records (the backend and the builder options)."""
    family = backend.get("name")
    if family not in FAMILY_NAMES:
        raise ValueError(f"backend {str(family)[:40]!r} is no runtime we know ({' or '.join(FAMILY_NAMES)})")
    return Runtime(
        family=family,
        version=str(backend.get("version", "")),
        version_compatible=bool(builder_options.get("version_compatible", False)),
    )


def claimed_by_header(header: bytes | None) -> RuntimeFamily | None:
    """The runtime a plan's first bytes name, where its header is known; None otherwise."""
    if not header:
        return None
    return PLAN_MAGIC.get(bytes(header[:4]).decode("latin-1"))  # type: ignore[return-value]
