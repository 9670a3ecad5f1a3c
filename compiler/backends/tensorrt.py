"""Datacenter TensorRT: builds on the GPU it targets, so the local GPU must match the SKU.

Its timing cache is kept per compute capability, TensorRT and CUDA version, so
repeated builds on the same kind of GPU skip tactic timing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.errors import EnvironmentProblem
from compiler.gpu import list_gpus


def timing_cache_dir() -> Path:
    return Path(os.environ.get("COMPILE_CACHE_DIR", Path.home() / ".cache" / "compile")) / "timing"


class DatacenterTensorRTBackend(TensorRTBackend):
    name = "tensorrt"
    module_name = "tensorrt"
    install_hint = "pip install 'compile[tensorrt]' on a host with an NVIDIA GPU"

    def _timing_cache_path(self, capability: str) -> Path:
        cuda = getattr(self.trt, "cuda_version", None) or os.environ.get("CUDA_VERSION", "unknown")
        return timing_cache_dir() / f"sm{capability.replace('.', '')}-trt{self.version}-cuda{cuda}.cache"

    def check_targets(self, compute_capabilities: tuple[str, ...]) -> None:
        gpus, reason = list_gpus()
        wanted = set(compute_capabilities)
        local = {gpu.compute_capability for gpu in gpus}
        if len(wanted) != 1 or not wanted <= local:
            raise EnvironmentProblem(
                f"datacenter TensorRT builds only for the local GPU; this build targets compute capability "
                f"{', '.join(sorted(wanted))} but this host has {', '.join(sorted(local)) or 'none'}"
                f"{f' ({reason})' if reason else ''}; build on a GPU of that SKU"
            )

    def target(self, config: Any, spec: BuildSpec) -> None:
        path = self._timing_cache_path(spec.compute_capabilities[0])
        cache = config.create_timing_cache(path.read_bytes() if path.is_file() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)

    def after_build(self, config: Any, spec: BuildSpec) -> None:
        path = self._timing_cache_path(spec.compute_capabilities[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(bytes(config.get_timing_cache().serialize()))
        temporary.replace(path)
