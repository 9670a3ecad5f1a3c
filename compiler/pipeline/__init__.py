"""`compile release` and `compile plan`: the whole pipeline from one YAML file, in one job or sharded by SKU."""

from compiler.pipeline.plan import ReleasePlan, github_matrix, plan_release
from compiler.pipeline.release import ReleaseReport, release
from compiler.pipeline.spec import load_pipeline

__all__ = ["ReleasePlan", "ReleaseReport", "github_matrix", "load_pipeline", "plan_release", "release"]
