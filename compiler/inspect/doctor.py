"""`compile doctor`: what this machine can build and check."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from compiler import version
from compiler.backends import load_backend
from compiler.core.errors import CompileError
from compiler.core.files import default_cache_dir
from compiler.core.gpu import driver_versions, list_gpus
from compiler.core.modelopt import status as modelopt_status
from compiler.core.plugins import backend_names
from compiler.core.text import printable
from compiler.stores import open_store


class BackendStatus(BaseModel):
    name: str
    installed: bool
    version: str | None = None
    detail: str = ""


class GpuStatus(BaseModel):
    index: int
    name: str
    compute_capability: str
    memory_gb: float


class CacheStatus(BaseModel):
    path: str
    files: int
    size_bytes: int
    complete: bool = True
    """False when the folder held more than :data:`CACHE_FILES_COUNTED` files (the counts are of those)."""


class Reachability(BaseModel):
    """A store or remote cache probed read-only (one listing) with this machine's credentials."""

    what: str
    uri: str | None
    status: str
    """``reachable``, ``unreachable`` or ``not configured``."""
    detail: str = ""


class DoctorReport(BaseModel):
    python: str
    platform: str
    compile_version: str
    backends: list[BackendStatus]
    gpus: list[GpuStatus]
    gpu_detail: str
    driver: str | None = None
    """The NVIDIA driver's version; None without one."""
    cuda: str | None = None
    """The CUDA version the driver supports; None without one."""
    cache: CacheStatus | None = None
    stores: list[Reachability] = []
    onnx: str
    onnxruntime: str
    onnxruntime_providers: list[str]
    polygraphy: str | None
    modelopt: str = ""
    """Whether ``calibrate --quantizer modelopt`` can run: its versions, or why not ($COMPILE_MODELOPT_PYTHON)."""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _onnxruntime() -> tuple[str, list[str]]:
    try:
        import onnxruntime
    except Exception as exc:  # a broken install must not stop the diagnosis
        return f"missing ({type(exc).__name__}: {exc}; run pip install onnxruntime)", []
    return onnxruntime.__version__, list(onnxruntime.get_available_providers())


CACHE_FILES_COUNTED = 200_000


def _cache() -> CacheStatus:
    """The build cache's folder, its files and their size (counted up to a bound: a cache can be large)."""
    root = default_cache_dir()
    files = size = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(folder, name)).st_size
                files += 1
            if files >= CACHE_FILES_COUNTED:
                return CacheStatus(path=str(root), files=files, size_bytes=size, complete=False)
    return CacheStatus(path=str(root), files=files, size_bytes=size)


def _probe(what: str, uri: str | None, count: Callable[[Any], str]) -> Reachability:
    """One read-only listing of the store at ``uri`` (nothing is created), or why it failed."""
    if not uri:
        return Reachability(what=what, uri=None, status="not configured")
    try:
        store = open_store(uri, create=False)
        return Reachability(what=what, uri=store.uri, status="reachable", detail=count(store))
    except CompileError as exc:
        return Reachability(what=what, uri=printable(uri), status="unreachable", detail=str(exc))


def _stores(store: str | None, remote_cache: str | None) -> list[Reachability]:
    from compiler.cache.remote import ENV as REMOTE_ENV
    from compiler.cache.sweep import KINDS

    remote_cache = remote_cache or os.environ.get(REMOTE_ENV)

    return [
        _probe("store", store, lambda s: f"{len(s.names())} releases"),
        _probe(
            "remote cache",
            remote_cache,
            lambda s: ", ".join(f"{len(s.entry_keys(kind))} {kind}" for kind in KINDS),
        ),
    ]


def diagnose(store: str | None = None, remote_cache: str | None = None) -> DoctorReport:
    """Never raises for a missing or broken component: reporting those is the point. ``store`` and
    ``remote_cache`` (else $COMPILE_STORE and $COMPILE_REMOTE_CACHE) are probed read-only."""
    backends = []
    for name in backend_names():
        try:
            backend = load_backend(name)
            backends.append(BackendStatus(name=name, installed=True, version=backend.version))
        except CompileError as exc:
            backends.append(BackendStatus(name=name, installed=False, detail=str(exc)))
        except Exception as exc:  # e.g. a stub package that raises on import, or a missing CUDA library
            backends.append(
                BackendStatus(
                    name=name,
                    installed=False,
                    detail=f"backend {name} is installed but fails to load ({type(exc).__name__}: {exc})",
                )
            )
    try:
        gpus, reason = list_gpus()
    except Exception as exc:
        gpus, reason = [], f"NVML failed ({type(exc).__name__}: {exc})"
    ort_version, providers = _onnxruntime()
    driver, cuda = driver_versions()
    return DoctorReport(
        python=sys.version.split()[0],
        platform=f"{platform.system()} {platform.machine()}",
        compile_version=version(),
        backends=backends,
        gpus=[GpuStatus(**vars(g)) for g in gpus],
        gpu_detail=reason or "",
        onnx=_version("onnx") or "missing",
        onnxruntime=ort_version,
        onnxruntime_providers=providers,
        polygraphy=_version("polygraphy"),
        modelopt=modelopt_status(),
        driver=driver,
        cuda=cuda,
        cache=_cache(),
        stores=_stores(store or os.environ.get("COMPILE_STORE"), remote_cache),
    )
