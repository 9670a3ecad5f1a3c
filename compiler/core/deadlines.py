"""How long the command waits on what it does not control: a store or remote cache over the network, the user's
``--metric`` code, a ModelOpt interpreter. Each is a variable of its own (seconds; docs/errors-and-signals.md), so a
slow but working setup raises one bound without lifting the others."""

from __future__ import annotations

import math
import os

from compiler.core.errors import InvalidInput

STORE = "COMPILE_STORE_DEADLINE"
"""Seconds one store operation may take, its retries included (a blob transfer gets one more per MiB it carries)."""
STORE_DEFAULT = 60.0
METRIC = "COMPILE_METRIC_DEADLINE"
"""Seconds one call of the ``--metric`` function may take, its import included."""
METRIC_DEFAULT = 300.0
MODELOPT = "COMPILE_MODELOPT_DEADLINE"
"""Seconds a ModelOpt child may run (the quantizer; its version probe is held to less)."""
MODELOPT_DEFAULT = 3600.0


def seconds(variable: str, default: float) -> float:
    """``$variable`` as a number of seconds (a positive finite number), else ``default``; exit 2 naming it."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"${variable}={text[:40]!r}: give a number of seconds above 0 (default {default:g})")
    return value
