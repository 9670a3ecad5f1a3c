"""GPUs on this machine, through NVML when the driver is present."""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory_gb: float


def list_gpus() -> tuple[list[Gpu], str | None]:
    """Return the GPUs and, when there are none, why (no driver, NVML error)."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"no NVIDIA driver ({exc})"
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            gpus.append(Gpu(index, name if isinstance(name, str) else name.decode(), f"{major}.{minor}", memory))
        return gpus, None if gpus else "the driver reports no GPU"
    finally:
        pynvml.nvmlShutdown()


@functools.cache
def cuda_driver_version() -> str:
    """The driver's CUDA version (e.g. "12.8"), or "unknown" without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetCudaDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:
        return "unknown"


def driver_versions() -> tuple[str | None, str | None]:
    """The NVIDIA driver's version and the CUDA version it supports (e.g. "570.86.15", "12.8"); None for each
    without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver
        return None, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return (driver if isinstance(driver, str) else driver.decode()), f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:
        return None, None
    finally:
        pynvml.nvmlShutdown()
