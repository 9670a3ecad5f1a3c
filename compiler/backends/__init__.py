"""Build backends: TensorRT editions behind one interface, imported only when used.

Like Polygraphy's tool registry, a missing edition never stops the CLI from
starting: it only fails the commands that need it, with an install hint.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from compiler.core.errors import EnvironmentProblem, InvalidInput

if TYPE_CHECKING:
    from compiler.backends.base import TensorRTBackend

BACKENDS: dict[str, tuple[str, str]] = {
    "tensorrt-rtx": ("compiler.backends.tensorrt_rtx", "TensorRTRTXBackend"),
    "tensorrt": ("compiler.backends.tensorrt", "DatacenterTensorRTBackend"),
}
"""Backend name -> (module, class). The module imports its TensorRT package lazily."""
TENSORRT_MODULES = {"tensorrt-rtx": "tensorrt_rtx", "tensorrt": "tensorrt"}
"""Backend name -> the TensorRT edition's Python module (its distribution is the same name with dashes): what
``--version`` and ``doctor`` ask about without importing any backend."""


def load_backend(name: str) -> TensorRTBackend:
    """An instance of the named backend; EnvironmentProblem when its TensorRT is not installed."""
    if name not in BACKENDS:
        raise InvalidInput(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


def is_installed(name: str) -> bool:
    return importlib.util.find_spec(TENSORRT_MODULES[name]) is not None


def installed_versions() -> dict[str, str | None]:
    """Backend name -> the installed TensorRT edition's version (None: not installed), without importing it."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for name, package in TENSORRT_MODULES.items():
        try:
            versions[name] = importlib.metadata.version(package.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def default_backend() -> str:
    """The datacenter edition where it is installed, TensorRT-RTX otherwise."""
    for name in ("tensorrt", "tensorrt-rtx"):
        if is_installed(name):
            return name
    raise EnvironmentProblem(
        "no TensorRT backend is installed; run pip install 'trt-compile[rtx]' "
        "(or 'trt-compile[tensorrt]' on a GPU host)"
    )
