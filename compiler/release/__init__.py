"""`compile release` and `compile plan`: the whole pipeline from one YAML file, in one job or sharded by SKU."""

from compiler.release.jobs import ReleasePlan, github_matrix, plan_release
from compiler.release.pipeline import load_pipeline
from compiler.release.run import ReleaseReport, release

__all__ = ["ReleasePlan", "ReleaseReport", "github_matrix", "load_pipeline", "plan_release", "release"]
