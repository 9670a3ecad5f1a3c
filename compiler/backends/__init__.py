"""Build backends: TensorRT editions behind one interface, imported only when used.

Like Polygraphy's tool registry, a missing edition never stops the CLI from
starting: it only fails the commands that need it, with an install hint.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.plugins import BACKENDS, backend_kind, backend_names, preferred

if TYPE_CHECKING:
    from compiler.backends.base import TensorRTBackend


def load_backend(name: str) -> TensorRTBackend:
    """An instance of the named backend; EnvironmentProblem when its TensorRT is not installed."""
    kind = backend_kind(name)
    if kind is None:
        raise InvalidInput(f"unknown backend '{name}'; choose one of: {', '.join(backend_names())}")
    return getattr(importlib.import_module(kind.module), kind.cls)()


def is_installed(name: str) -> bool:
    kind = backend_kind(name)
    return kind is not None and importlib.util.find_spec(kind.package) is not None


def installed_versions() -> dict[str, str | None]:
    """Backend name -> the installed TensorRT edition's version (None: not installed), without importing it."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for kind in BACKENDS:
        try:
            versions[kind.name] = importlib.metadata.version(kind.distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[kind.name] = None
    return versions


def default_backend() -> str:
    """The backend a build takes where the SKU names none: one that needs the target's GPU where installed (a GPU
    host means it), else one that builds anywhere."""
    for kind in preferred(gpu=True):
        if is_installed(kind.name):
            return kind.name
    anywhere = [f"'trt-compile[{k.extra}]'" for k in BACKENDS if not k.needs_target_gpu]
    on_gpu = [f"'trt-compile[{k.extra}]'" for k in BACKENDS if k.needs_target_gpu]
    raise EnvironmentProblem(
        f"no TensorRT backend is installed; run pip install {' or '.join(anywhere)} "
        f"(or {' or '.join(on_gpu)} on a GPU host)"
    )
