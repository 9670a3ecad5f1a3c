"""TensorRT-RTX: builds ahead of time on any machine; the SKU's compute capability is the target."""

from __future__ import annotations

import struct
from typing import Any

from compiler.backends.base import BuildSpec, TensorRTBackend
from compiler.core.errors import InvalidInput
from compiler.core.plugins import backend_kind


class TensorRTRTXBackend(TensorRTBackend):
    name = "tensorrt-rtx"
    module_name = backend_kind("tensorrt-rtx").package
    install_hint = "pip install 'trt-compile[rtx]'"
    plan_magic = "vtrt"
    plan_header_bytes = 64

    def check_targets(self, compute_capabilities: tuple[str, ...]) -> None:
        from compiler.core.memo import remembered_value

        # remembered per installed version: a re-release whose builds are all cache hits never imports TensorRT
        known = set(remembered_value("tensorrt-rtx-capabilities", self._capabilities, self.version))
        for capability in compute_capabilities:
            if _member(capability) not in known:
                raise InvalidInput(
                    f"TensorRT-RTX {self.version} cannot target compute capability {capability}; "
                    f"it supports {', '.join(sorted(known))}"
                )

    def _capabilities(self) -> list[str]:
        return sorted(m for m in dir(self.trt.ComputeCapability) if m.startswith("SM"))

    def target(self, config: Any, spec: BuildSpec) -> None:
        config.num_compute_capabilities = len(spec.compute_capabilities)
        for index, capability in enumerate(spec.compute_capabilities):
            config.set_compute_capability(getattr(self.trt.ComputeCapability, _member(capability)), index)

    def plan_header(self, plan: bytes | memoryview) -> dict[str, Any] | None:
        """``vtrt`` magic, version bytes at offset 24, compute-capability bitmask (u64) at offset 32."""
        if len(plan) < self.plan_header_bytes:
            return None
        plan = bytes(plan[: self.plan_header_bytes])
        mask = struct.unpack_from("<Q", plan, 32)[0]
        return {
            "magic": plan[:4].decode("latin-1"),
            "version": ".".join(str(b) for b in plan[24:28]),
            "compute_capabilities": [cc for bit, cc in enumerate(_MASK_ORDER) if mask >> bit & 1],
            "compute_capability_mask": mask,
        }


_MASK_ORDER = ["7.5", "8.0", "8.6", "8.9", "12.0", "12.1"]
"""Bit i of the plan header's mask is compute capability _MASK_ORDER[i]."""


def _member(capability: str) -> str:
    return "SM" + capability.replace(".", "")
