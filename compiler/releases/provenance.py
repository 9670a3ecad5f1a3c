"""A release's SLSA Provenance v1: an in-toto Statement whose subjects are its plans by sha256 and whose predicate
says what made them: the pipeline and targets (build definition), the source model, calibration data and
calibrated models by sha256 and the tools' versions (resolved dependencies), who built it and when (run details).
"""

from __future__ import annotations

import os
import re
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.jsonio import parse_json
from compiler.core.records import ReleaseContent
from compiler.core.text import printable
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


BUILDER_ENV = "COMPILE_BUILDER_ID"
"""A builder id (a URI) the publishing platform vouches for, where neither default fits."""
LOCAL_BUILDER = "https://trt-compile.github.io/builders/local/v1"
"""The builder id off CI: a machine nobody vouches for (a verifier's policy decides whether to accept it)."""


def builder() -> tuple[str, str | None]:
    """Who built it, as a URI (SLSA's ``builder.id``), and the CI run's URL as the invocation.

    ``$COMPILE_BUILDER_ID`` when set; on GitHub Actions the workflow that runs the build, as GitHub's build type
    names it: the called workflow under a reusable workflow (``job_workflow_ref``, from the job's OIDC token when
    it may mint one), else ``GITHUB_WORKFLOW_REF``; elsewhere :data:`LOCAL_BUILDER` (never a user or host name)."""
    env = os.environ
    run = None
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        run = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
        if env.get("GITHUB_RUN_ATTEMPT"):
            run += f"/attempts/{env['GITHUB_RUN_ATTEMPT']}"
    if env.get(BUILDER_ENV):
        return _builder_uri(env[BUILDER_ENV]), run
    if run is None:
        return LOCAL_BUILDER, None
    workflow = (
        _job_workflow_ref()
        or env.get("GITHUB_WORKFLOW_REF")
        or f"{env['GITHUB_REPOSITORY']}/{env.get('GITHUB_WORKFLOW', '')}"
    )
    return f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{workflow}", run


def _builder_uri(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*://[^\s/]+\S*", value):
        raise InvalidInput(
            f"${BUILDER_ENV}: {printable(value)!r} is not a URI; give the builder's id as scheme://host/path "
            "(e.g. https://ci.example.com/pipelines/release)"
        )
    return value


def _job_workflow_ref() -> str | None:
    """The workflow file that runs this job (a reusable workflow's own, not its caller's), read from the job's
    OIDC token; None where the job may not mint one (no ``id-token: write``) or the token says nothing."""
    if not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"):
        return None
    try:
        import id as oidc  # sigstore's ambient-credential client (the [sigstore] extra)

        token = oidc.detect_credential("trt-compile")
        claims = parse_json(oidc.decode_oidc_token(token)[1], 64 * 1024) if token else {}
    except Exception:  # no client, a refused or malformed token: the workflow ref from the environment is next
        return None
    value = claims.get("job_workflow_ref") if isinstance(claims, dict) else None
    return value if isinstance(value, str) and re.fullmatch(r"[\w.-]+/[\w.-]+/\S+@\S+", value) else None


def repository_of(path: Path) -> Path:
    """The repository a file is in (the nearest folder upward with ``.git``), else its folder."""
    folder = path.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def portable_name(path: str | Path, repository: Path) -> str:
    """How the statement names a file: relative to the pipeline's repository, else by its file name alone, never
    by a path of the machine that built it (a public artifact must not carry a runner's layout)."""
    resolved = Path(path).resolve()
    if resolved.is_relative_to(repository):
        return resolved.relative_to(repository).as_posix()
    return resolved.name


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
