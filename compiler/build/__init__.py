"""`compile build`: one TensorRT engine per SKU x precision, every shape profile in each.

Three parts, in the order data moves through them: :mod:`~compiler.build.plan` decides the targets (every check
that can fail before a build, the model each precision builds from, cache keys), :mod:`~compiler.build.run` runs
them (child processes, stop signals, progress, build.json), :mod:`~compiler.build.target` produces one
(a cache hit or a build, in a staging folder, with its records); :mod:`~compiler.build.cache` is the
content-addressed build cache they share.
"""

from __future__ import annotations

from pathlib import Path

from compiler.build.plan import BuildJob, plan_builds
from compiler.build.run import JobProgress, execute_builds, run_job
from compiler.options import BuildOptions
from compiler.records import BuildReport, Progress


def build_engines(
    model: str | Path,
    profiles: str | Path,
    skus: str | list[str],
    precisions: str | list[str],
    out: str | Path,
    options: BuildOptions | None = None,
    progress: JobProgress | None = None,
    calibration_progress: Progress | None = None,
) -> BuildReport:
    """Validate everything, then build (or take from the cache) every SKU x precision engine into
    ``OUT/<sku>/<precision>/``."""
    options = options or BuildOptions()
    planned = plan_builds(model, profiles, skus, precisions, out, options, calibration_progress)
    return execute_builds(planned, model, out, options.jobs, progress)


__all__ = ["BuildJob", "BuildOptions", "BuildReport", "build_engines", "execute_builds", "plan_builds", "run_job"]
