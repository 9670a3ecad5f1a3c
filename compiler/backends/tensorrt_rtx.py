"""TensorRT-RTX: builds ahead of time on any machine; the SKU's compute capability is the target."""

from __future__ import annotations

from typing import Any

from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.errors import InvalidInput


class TensorRTRTXBackend(TensorRTBackend):
    name = "tensorrt-rtx"
    module_name = "tensorrt_rtx"
    install_hint = "pip install 'compile[rtx]'"

    def check_targets(self, compute_capabilities: tuple[str, ...]) -> None:
        known = {m for m in dir(self.trt.ComputeCapability) if m.startswith("SM")}
        for capability in compute_capabilities:
            if _member(capability) not in known:
                raise InvalidInput(
                    f"TensorRT-RTX {self.version} cannot target compute capability {capability}; "
                    f"it supports {', '.join(sorted(known))}"
                )

    def target(self, config: Any, spec: BuildSpec) -> None:
        config.num_compute_capabilities = len(spec.compute_capabilities)
        for index, capability in enumerate(spec.compute_capabilities):
            config.set_compute_capability(getattr(self.trt.ComputeCapability, _member(capability)), index)


def _member(capability: str) -> str:
    return "SM" + capability.replace(".", "")
