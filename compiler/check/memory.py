"""Memory fit: will each engine fit its GPU? From what the builder reported in build.log, since loading the
engine (which would report it too) needs a GPU.

TensorRT-RTX logs, per shape profile, ``Total Activation Memory`` and ``Total Device Persistent Memory``, and once
``Total Weights Memory``. An execution context runs one profile at a time, so the engine needs its weights plus
the largest profile's activations and persistent memory (all sized for the profile's max shapes).
"""

from __future__ import annotations

import re

from compiler.core.profiles import Sku
from compiler.core.records import CheckResult, Status
from compiler.core.text import human_size

_FIGURE = re.compile(
    r"^\[INFO\] Total (?P<what>Activation|Weights|Device Persistent) Memory: (?P<bytes>\d+) bytes", re.MULTILINE
)


def engine_memory(log: str) -> dict[str, int] | None:
    """Bytes of weights, largest activations and persistent memory the builder reported; None if it reported none."""
    figures: dict[str, list[int]] = {}
    for match in _FIGURE.finditer(log):
        figures.setdefault(match["what"], []).append(int(match["bytes"]))
    if "Weights" not in figures or "Activation" not in figures:
        return None
    persistent = figures.get("Device Persistent", [0])
    per_profile = [
        a + p for a, p in zip(figures["Activation"], persistent + [0] * len(figures["Activation"]), strict=False)
    ]
    weights = max(figures["Weights"])
    return {
        "weights_bytes": weights,
        "activation_bytes": max(figures["Activation"]),
        "persistent_bytes": max(persistent),
        "profile_bytes": per_profile,
        "total_bytes": weights + max(per_profile),
    }


def check_memory(log: str, sku_name: str, sku: Sku, headroom: float) -> CheckResult:
    """The engine's device memory against the SKU's, leaving ``headroom`` (a fraction) free."""
    memory = engine_memory(log)
    if memory is None:
        return CheckResult(
            name="memory",
            status=Status.SKIPPED,
            summary="build.log reports no weights and activation memory (this builder does not log "
            "them; only a loaded engine, which needs a GPU, could tell)",
        )
    capacity = int(sku.memory_gb * (1 << 30))
    budget = int(capacity * (1 - headroom))
    total = memory["total_bytes"]
    figures = {
        **memory,
        "sku": sku_name,
        "sku_memory_bytes": capacity,
        "headroom": headroom,
        "budget_bytes": budget,
        "fraction": total / capacity,
    }
    what = (
        f"{human_size(total)} (weights {human_size(memory['weights_bytes'])} + activations "
        f"{human_size(memory['activation_bytes'])} at the max shapes)"
    )
    limit = f"{sku_name}'s {sku.memory_gb:g} GiB less {headroom:.0%} headroom ({human_size(budget)})"
    if total > budget:
        return CheckResult(
            name="memory",
            status=Status.FAILED,
            figures=figures,
            summary=f"needs {what}, more than {limit}",
            evidence=[f"{sku_name}: {total} bytes needed, {budget} bytes available"],
        )
    return CheckResult(
        name="memory", status=Status.OK, figures=figures, summary=f"needs {what}: {total / capacity:.2%} of {limit}"
    )
