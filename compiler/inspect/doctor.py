"""`compile doctor`: what this machine can build and check."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from pydantic import BaseModel

from compiler import version
from compiler.backends import load_backend
from compiler.core.errors import CompileError
from compiler.core.gpu import list_gpus
from compiler.core.modelopt import status as modelopt_status
from compiler.core.plugins import backend_names


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


def diagnose() -> DoctorReport:
    """Never raises for a missing or broken component: reporting those is the point."""
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
    )
