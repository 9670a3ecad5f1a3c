"""`compile plan`: a pipeline's build jobs, one per SKU, with the runner each needs.

TensorRT-RTX builds ahead of time on any machine, so its jobs run on any CPU runner; datacenter TensorRT builds
only on a GPU of the target SKU, so its jobs ask for a self-hosted runner labelled with the SKU.
"""

from __future__ import annotations

from pydantic import BaseModel

from compiler.core.plugins import backend_kind
from compiler.pipeline.spec import LoadedPipeline

CPU_RUNNER = ["ubuntu-24.04"]


class Job(BaseModel):
    sku: str
    backend: str
    precisions: list[str]
    runs_on: list[str]


class ReleasePlan(BaseModel):
    pipeline: str
    pipeline_sha256: str
    name: str
    version: str
    store: str
    jobs: list[Job]


def plan_release(pipeline: LoadedPipeline) -> ReleasePlan:
    """The jobs of a release, SKUs checked against the catalog (InvalidInput naming an unknown one)."""
    from compiler.core.profiles import load_sku_catalog

    spec = pipeline.spec
    catalog = load_sku_catalog(extra=spec.skus)
    jobs = []
    for sku in spec.targets:
        target = spec.target(sku)
        backend = target.backend or catalog.get(sku).backend
        runs_on = ["self-hosted", "linux", "gpu", sku] if backend_kind(backend).needs_target_gpu else CPU_RUNNER
        jobs.append(Job(sku=sku, backend=backend, precisions=[p.value for p in target.precisions], runs_on=runs_on))
    return ReleasePlan(
        pipeline=str(pipeline.path),
        pipeline_sha256=pipeline.sha256,
        name=spec.release.name,
        version=spec.release.version,
        store=spec.store,
        jobs=jobs,
    )


def github_matrix(plan: ReleasePlan) -> dict[str, list[dict[str, object]]]:
    """A GitHub Actions ``strategy.matrix`` (read with ``fromJSON``): one entry per job."""
    return {"include": [{"sku": job.sku, "backend": job.backend, "runs-on": job.runs_on} for job in plan.jobs]}
