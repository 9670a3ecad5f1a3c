"""Exporters: a published release written in a serving system's own layout (Triton's model repository, an
application's TensorRT-RTX folder)."""

from __future__ import annotations

from compiler.releases.rtx_layout import engine_per_capability

__all__ = ["engine_per_capability"]
