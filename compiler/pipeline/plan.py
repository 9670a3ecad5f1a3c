"""`compile plan`: a pipeline's build jobs, one per SKU, with the runner each needs.

TensorRT-RTX builds ahead of time on any machine, so its jobs run on any CPU runner; datacenter TensorRT builds
only on a GPU of the target SKU, so its jobs ask for a self-hosted runner labelled with the SKU.
"""

from __future__ import annotations

from pydantic import BaseModel

from compiler.core.plugins import backend_kind
from compiler.pipeline.spec import LoadedPipeline

CPU_RUNNER = ["ubuntu-24.04"]
"""The default labels of a job any machine can run (a GitHub-hosted runner)."""
GPU_RUNNER = ["self-hosted", "linux", "gpu", "{sku}"]
"""The default labels of a job that needs a GPU of its SKU: a self-hosted runner labelled with the SKU."""


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
        gpu = backend_kind(backend).needs_target_gpu
        runs_on = runner_labels(spec.runners, sku, gpu=gpu, arm=gpu and catalog.get(sku).platform == "aarch64")
        jobs.append(Job(sku=sku, backend=backend, precisions=[p.value for p in target.precisions], runs_on=runs_on))
    return ReleasePlan(
        pipeline=str(pipeline.path),
        pipeline_sha256=pipeline.sha256,
        name=spec.release.name,
        version=spec.release.version,
        store=spec.store,
        jobs=jobs,
    )


def runner_labels(runners: dict[str, list[str]], sku: str, *, gpu: bool, arm: bool = False) -> list[str]:
    """The pipeline's ``runners:`` labels for ``sku``'s job (its own, else ``gpu`` or ``cpu``'s), else the defaults
    (with GitHub's ``ARM64`` label for a GPU in aarch64 machines: Jetson, Grace); ``{sku}`` in a label is the SKU."""
    default = ([*GPU_RUNNER[:2], "ARM64", *GPU_RUNNER[2:]] if arm else GPU_RUNNER) if gpu else CPU_RUNNER
    labels = runners.get(sku) or runners.get("gpu" if gpu else "cpu") or default
    return [label.replace("{sku}", sku) for label in labels]


def github_matrix(plan: ReleasePlan) -> dict[str, list[dict[str, object]]]:
    """A GitHub Actions ``strategy.matrix`` (read with ``fromJSON``): one entry per job."""
    return {"include": [{"sku": job.sku, "backend": job.backend, "runs-on": job.runs_on} for job in plan.jobs]}


GITLAB_NEEDS_LIMIT = 50
"""GitLab's default limit of ``needs`` per job: finalize waits through stages instead, whatever the job count."""


def gitlab_pipeline(plan: ReleasePlan, *, version: str, plan_job: str = "plan") -> dict[str, object]:
    """A GitLab child pipeline (``trigger: include: artifact:``) of ``plan``: one build job per SKU, each fetching
    the parent's ``plan_job`` artifacts (``needs: pipeline: $PARENT_PIPELINE_ID``), then finalize in a later stage,
    with an ``id_tokens`` token for keyless signing (``signing.key: sigstore:``). Each job installs only what it
    needs, at this version."""
    install = 'python3 -m venv "$CI_PROJECT_DIR/.venv" && "$CI_PROJECT_DIR/.venv/bin/pip" install -q'
    work = '--store "$COMPILE_STORE" --work release-work'

    def report(days: int) -> dict[str, object]:
        return {"when": "always", "paths": ["release-work/release-report*"], "expire_in": f"{days} days"}

    pipeline: dict[str, object] = {
        "stages": ["build", "finalize"],
        "variables": {"PIPELINE": plan.pipeline, "PYTHONUNBUFFERED": "1"},
    }
    for job in plan.jobs:
        extras = backend_kind(job.backend).extra
        build: dict[str, object] = {
            "stage": "build",
            "needs": [{"pipeline": "$PARENT_PIPELINE_ID", "job": plan_job}],
            "script": [
                f"{install} 'trt-compile[{extras}]=={version}'",
                f'"$CI_PROJECT_DIR/.venv/bin/compile" release "$PIPELINE" --only-sku {job.sku} {work}',
            ],
            "artifacts": report(30),
        }
        if job.runs_on != CPU_RUNNER:  # GitHub's hosted label means nothing on GitLab: shared runners take it
            build["tags"] = job.runs_on
        pipeline[f"build {job.sku}"] = build
    pipeline["finalize"] = {
        "stage": "finalize",
        "id_tokens": {"SIGSTORE_ID_TOKEN": {"aud": "sigstore"}},
        "script": [
            f"{install} 'trt-compile[sigstore]=={version}'",
            f'"$CI_PROJECT_DIR/.venv/bin/compile" release "$PIPELINE" --finalize {work}',
        ],
        "artifacts": report(90),
    }
    return pipeline
