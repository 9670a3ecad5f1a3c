"""Exporters: a published release written in a serving system's own layout (Triton's model repository)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.core.errors import InvalidInput

if TYPE_CHECKING:
    from compiler.core.records import ReleaseEngine


def engine_per_capability(engines: list[ReleaseEngine], why: str) -> dict[str, ReleaseEngine]:
    """Compute capability -> the engine a serving host of it gets (first listed wins where two hold the same plan).
    Serving systems tell GPUs apart only by compute capability, so two other plans for one (an A10 and an A40 plan,
    both 8.6) cannot both be served: refused, naming them, and ``why``."""
    owner: dict[str, ReleaseEngine] = {}
    for engine in engines:
        for capability in engine.compute_capabilities:
            if capability in owner and owner[capability].plan.sha256 != engine.plan.sha256:
                first = owner[capability]
                raise InvalidInput(
                    f"{first.sku}/{first.precision} and {engine.sku}/{engine.precision} are different plans for "
                    f"compute capability {capability}; {why}"
                )
            owner.setdefault(capability, engine)
    return owner
