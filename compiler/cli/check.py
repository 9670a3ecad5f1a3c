"""`compile check`: the gates of a build folder."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from compiler.cli import render
from compiler.cli.params import (
    BuildDirArgument,
    JsonOption,
    RemoteCacheOption,
    examples,
    with_options,
)
from compiler.core.errors import CheckFailed
from compiler.core.flags import CHECK


@examples(
    "compile check engines --data data.npz",
    "compile check engines --data data.npz --calibration calibrated",
    "compile check engines --data images/ --samples 256 --min-cosine logits=0.995 --rules rules.yaml --json",
)
@with_options(CHECK)
def check(
    build_dir: BuildDirArgument,
    *,
    options: dict,
    remote_cache: RemoteCacheOption = None,
    json: JsonOption = False,
) -> None:
    """Fusions, partitions, memory fit, accuracy, FP16 range and lint of a build folder, as gates; writes
    BUILD_DIR/check.json and check.md. Unset accuracy thresholds take the precision's defaults (docs/check.md)."""
    from compiler.check import check as run_check
    from compiler.core.options import CheckOptions

    options = CheckOptions(**options)
    with nullcontext() if json else render.phase_progress() as progress:
        from compiler.cache.reuse import open_tier

        report = run_check(build_dir, options, progress=progress, tier=open_tier(remote_cache))
    render.emit_json(report) if json else render.check_report(report)
    render.cache_outcome("check", report.cache, False)
    if not report.passed:
        raise CheckFailed(f"{report.summary} (report: {Path(report.build_dir) / 'check.json'})")
