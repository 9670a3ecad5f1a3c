"""`compile build`: one TensorRT engine per SKU x precision, every shape profile in each.

Three parts, in the order data moves through them: :mod:`~compiler.engines.jobs` decides the targets (every check
that can fail before a build, the model each precision builds from, cache keys), :mod:`~compiler.engines.workers` runs
them (child processes, stop signals, progress, build.json), :mod:`~compiler.engines.target` produces one
(a cache hit or a build, in a staging folder, with its records); :mod:`~compiler.engines.cache` is the
content-addressed build cache they share, and :mod:`~compiler.engines.folder` the one reader of a build
folder (check, publish and the pipeline read through it).
"""

from __future__ import annotations

from pathlib import Path

from compiler.core.options import BuildOptions
from compiler.core.records import BuildReport, Progress
from compiler.engines.jobs import BuildJob, plan_builds
from compiler.engines.workers import JobProgress, execute_builds, run_job


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
