"""A release's SLSA Provenance v1: an in-toto Statement whose subjects are its plans by sha256 and whose predicate
says what made them: the pipeline and targets (build definition), the source model, calibration data and
calibrated models by sha256 and the tools' versions (resolved dependencies), who built it and when (run details).
"""

from __future__ import annotations

import os
import time
from importlib import metadata
from typing import Any

from pydantic import BaseModel

from compiler.core.records import ReleaseContent
from compiler.releases.manifest import provenance as who_and_when
from compiler.releases.signing import statement

SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://trt-compile.github.io/release-build/v1"
"""What ``buildDefinition`` means: the pipeline (or build folders) and targets of `compile release`/`publish`."""
TOOLS = ("trt-compile", "onnxruntime", "polygraphy", "onnx")
"""Packages of the publishing environment named as resolved dependencies (the engines name their TensorRT)."""


class BuildContext(BaseModel):
    """What the publisher knows beyond the build folders: the pipeline file, the calibration data."""

    pipeline: str | None = None
    pipeline_sha256: str | None = None
    calibration_data: str | None = None
    calibration_data_sha256: str | None = None
    started_at: str | None = None


PLAN_FILE = "engine.plan"


def plan_name(engine) -> str:
    """A plan's name among the subjects: where it sits in the release (``SKU/PRECISION/engine.plan``)."""
    return f"{engine.sku}/{engine.precision!s}/{PLAN_FILE}"


def builder() -> tuple[str, str | None]:
    """Who built it: the CI run (GitHub Actions' ``GITHUB_*``) when there is one, else user@host; and the run's
    URL as the invocation."""
    env = os.environ
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        run = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
        if env.get("GITHUB_RUN_ATTEMPT"):
            run += f"/attempts/{env['GITHUB_RUN_ATTEMPT']}"
        workflow = env.get("GITHUB_WORKFLOW_REF") or f"{env['GITHUB_REPOSITORY']}/{env.get('GITHUB_WORKFLOW', '')}"
        return f"{server}/{workflow}", run
    published = who_and_when()
    return f"{published.by}@{published.host}", None


def _tool_versions() -> list[dict[str, Any]]:
    found = []
    for package in TOOLS:
        try:
            found.append({"name": package, "uri": f"pkg:pypi/{package}@{metadata.version(package)}"})
        except metadata.PackageNotFoundError:
            continue
    return found


def provenance_statement(
    content: ReleaseContent, context: BuildContext | None = None, extra_subjects: list[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The release's provenance statement (unsigned): its plans, and ``extra_subjects`` (an OCI release's image
    manifest, which cosign's attestation checks look for)."""
    context = context or BuildContext()
    subjects = [{"name": plan_name(e), "digest": {"sha256": e.plan.sha256}} for e in content.engines]
    subjects += list(extra_subjects)
    external: dict[str, Any] = {
        "release": f"{content.name}@{content.version}",
        "targets": [
            {
                "sku": e.sku,
                "precision": str(e.precision),
                "computeCapabilities": e.compute_capabilities,
                "profiles": [p.model_dump(mode="json") for p in e.profiles],
            }
            for e in content.engines
        ],
    }
    if context.pipeline:
        external["pipeline"] = {"path": context.pipeline, "digest": {"sha256": context.pipeline_sha256}}
    dependencies: list[dict[str, Any]] = [
        {
            "name": content.model_name,
            "digest": {"sha256": content.model_sha256},
            "annotations": {"role": "source model"},
        }
    ]
    if context.calibration_data_sha256:
        dependencies.append(
            {
                "name": context.calibration_data or "calibration data",
                "digest": {"sha256": context.calibration_data_sha256},
                "annotations": {"role": "calibration data"},
            }
        )
    seen: set[str] = {content.model_sha256}
    for engine in content.engines:
        built = "calibrated model" if engine.precision.calibrated else "converted model"
        for role, digest in ((built, engine.built_model_sha256), ("calibration record", engine.calibration_sha256)):
            if digest and digest not in seen:
                seen.add(digest)
                dependencies.append(
                    {
                        "name": f"{role} ({engine.precision!s})",
                        "digest": {"sha256": digest},
                        "annotations": {"role": role},
                    }
                )
    runtimes = sorted({(e.backend.get("name", ""), e.backend.get("version", "")) for e in content.engines})
    dependencies += [
        {"name": name, "uri": f"pkg:pypi/{name}@{version}", "annotations": {"role": "builder"}}
        for name, version in runtimes
        if name
    ]
    dependencies += _tool_versions()
    builder_id, invocation = builder()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    metadata_: dict[str, Any] = {"startedOn": context.started_at or now, "finishedOn": now}
    if invocation:
        metadata_["invocationId"] = invocation
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "resolvedDependencies": dependencies,
        },
        "runDetails": {"builder": {"id": builder_id}, "metadata": metadata_},
    }
    return statement(subjects, SLSA_PROVENANCE, predicate)
