"""Datacenter TensorRT: builds on the GPU it targets, so the local GPU must match the SKU.

Its timing cache is kept per compute capability, TensorRT and CUDA version, so
repeated builds on the same kind of GPU skip tactic timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.core.errors import EnvironmentProblem
from compiler.core.files import default_cache_dir, write_atomic
from compiler.core.gpu import cuda_driver_version, list_gpus
from compiler.core.plugins import backend_kind


class DatacenterTensorRTBackend(TensorRTBackend):
    name = "tensorrt"
    module_name = backend_kind("tensorrt").package
    install_hint = "pip install 'trt-compile[tensorrt]' on a host with an NVIDIA GPU"

    def _timing_cache_path(self, spec: BuildSpec) -> Path:
        """Timings are only valid for one GPU model, TensorRT version and CUDA version."""
        capability = spec.compute_capabilities[0].replace(".", "")
        name = f"{spec.sku or 'sm' + capability}-sm{capability}-trt{self.version}-cuda{cuda_driver_version()}.cache"
        return (spec.state_dir or default_cache_dir()) / "timing" / name

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
        path = self._timing_cache_path(spec)
        cache = config.create_timing_cache(path.read_bytes() if path.is_file() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)

    def after_build(self, config: Any, spec: BuildSpec) -> None:
        write_atomic(self._timing_cache_path(spec), bytes(config.get_timing_cache().serialize()))
