"""`compile doctor`: what this machine can build and check."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from pydantic import BaseModel

from compiler.backends import BACKENDS, load_backend
from compiler.errors import CompileError
from compiler.gpu import list_gpus


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


class DoctorReport(BaseModel):
    python: str
    platform: str
    compile_version: str
    backends: list[BackendStatus]
    gpus: list[GpuStatus]
    gpu_detail: str
    onnx: str
    onnxruntime: str
    onnxruntime_providers: list[str]
    polygraphy: str | None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def diagnose() -> DoctorReport:
    import onnxruntime

    backends = []
    for name in BACKENDS:
        try:
            backend = load_backend(name)
            backends.append(BackendStatus(name=name, installed=True, version=backend.version))
        except CompileError as exc:
            backends.append(BackendStatus(name=name, installed=False, detail=str(exc)))
    gpus, reason = list_gpus()
    return DoctorReport(
        python=sys.version.split()[0],
        platform=f"{platform.system()} {platform.machine()}",
        compile_version=_version("compile") or "unknown",
        backends=backends,
        gpus=[GpuStatus(**vars(g)) for g in gpus],
        gpu_detail=reason or "",
        onnx=_version("onnx") or "missing",
        onnxruntime=onnxruntime.__version__,
        onnxruntime_providers=onnxruntime.get_available_providers(),
        polygraphy=_version("polygraphy"),
    )
