"""A team adopts the tool in a repository of its own (issue 43): a repository holding only a pipeline file, a model,
its data and a workflow that calls compile-release.yml at a commit of this one. Its workflow is linted, then the
reusable workflow is played as GitHub would run it for a tag push: plan, one build job per SKU, finalize, each in a
checkout of its own, each installing trt-compile for real from this repository (a copy of its tracked files stands
for the commit the adopter pinned) through action.yml, with only the extras that job needs, against a real S3
server, finalize signing with the key the adopter keeps as a secret."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import REPO, run_cli
from tests.support.digits import TINY_DATA, TINY_MODEL, TINY_PROFILES
from tests.support.github_actions import Job, new_job, substitute
from tests.support.keys import write_keys

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the commit of trt-compile the adopter pinned
CALLER = f"""name: release
on:
  push:
    tags: ["v*"]
permissions: {{}}
jobs:
  release:
    uses: trt-compile/compile/.github/workflows/compile-release.yml@{COMMIT}  # v0.1.0
    permissions:
      contents: read
      id-token: write
      attestations: write
    with:
      pipeline: release.yaml
      store: ${{{{ vars.COMPILE_STORE }}}}
      sign-key: env://COMPILE_SIGNING_PEM
    secrets:
      AWS_ACCESS_KEY_ID: ${{{{ secrets.AWS_ACCESS_KEY_ID }}}}
      AWS_SECRET_ACCESS_KEY: ${{{{ secrets.AWS_SECRET_ACCESS_KEY }}}}
      AWS_ENDPOINT_URL: ${{{{ secrets.AWS_ENDPOINT_URL }}}}
      COMPILE_SIGNING_PEM: ${{{{ secrets.COMPILE_SIGNING_PEM }}}}
"""
PIPELINE = {
    "release": {"name": "adopted", "version": "1.2.0"},
    "model": "model.onnx",
    "profiles": "profiles.yaml",
    "targets": {"rtx-4090": ["fp16"]},
    "check": {"data": "data.npz", "samples": 8},
}


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@pytest.fixture(scope="module")
def adopter(tmp_path_factory) -> Path:
    """The adopting repository: a pipeline file, a model, its data and profiles, and the calling workflow."""
    folder = tmp_path_factory.mktemp("adopter") / "repo"
    (folder / ".github" / "workflows").mkdir(parents=True)
    (folder / ".github" / "workflows" / "release.yml").write_text(CALLER)
    (folder / "release.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    for source, name in ((TINY_MODEL, "model.onnx"), (TINY_PROFILES, "profiles.yaml"), (TINY_DATA, "data.npz")):
        shutil.copy(source, folder / name)
    return folder


def test_the_adopters_workflow_lints_clean(adopter: Path) -> None:
    workflow = adopter / ".github" / "workflows" / "release.yml"
    done = subprocess.run([_tool("actionlint"), "-no-color", str(workflow)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--format", "json", str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout + done.stderr


def _tracked_copy(target: Path) -> Path:
    """This repository's tracked files, as GitHub fetches an action or reusable workflow at a commit."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for relative in filter(None, tracked.decode().split("\0")):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, target / relative)
    return target


def _called(caller: dict, tool: Path, contexts: dict) -> tuple[dict, dict[str, str], dict[str, str]]:
    """The reusable workflow the caller's job names, and the inputs and secrets it passes (defaults filled in)."""
    match = re.fullmatch(r"trt-compile/compile/(\.github/workflows/[\w-]+\.yml)@([0-9a-f]{40})", caller["uses"])
    assert match and match.group(2) == COMMIT, caller["uses"]
    workflow = yaml.safe_load((tool / match.group(1)).read_text())
    declared = workflow[True]["workflow_call"]  # YAML 1.1 reads the key `on` as True
    given = substitute(caller["with"], contexts)
    assert set(given) <= set(declared["inputs"]) and set(caller["secrets"]) <= set(declared["secrets"])
    inputs = {name: given.get(name, spec.get("default", "")) for name, spec in declared["inputs"].items()}
    secrets = {name: str(substitute(value, contexts)) for name, value in caller["secrets"].items()}
    return workflow, inputs, secrets


def _play(workflow: dict, job_id: str, checkout: Path, folder: Path, tool: Path, contexts: dict, base: dict) -> Job:
    """One job of the reusable workflow, in a checkout of the adopting repository of its own."""
    shutil.copytree(checkout, folder)
    spec = workflow["jobs"][job_id]
    job = new_job(folder, tool, contexts, workflow.get("env", {}), spec.get("env", {}), base)
    job.run_steps(spec["steps"])
    return job


def test_a_tag_push_releases_through_the_reusable_workflow(adopter: Path, s3, tmp_path: Path) -> None:
    tool = _tracked_copy(tmp_path / "trt-compile")
    (tmp_path / "keys").mkdir()
    keys = write_keys(tmp_path / "keys")
    bucket = "adopter-" + os.urandom(6).hex()
    s3.client().create_bucket(Bucket=bucket)
    server = s3.env()
    repository_secrets = {name: server[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    repository_secrets |= {
        "AWS_ENDPOINT_URL": server["AWS_ENDPOINT_URL"],
        "COMPILE_SIGNING_PEM": keys["p256"].read_text(),
    }
    github = {"ref_type": "tag", "ref_name": "v1.2.0", "repository": "acme/models"}
    outer = {"github": github, "vars": {"COMPILE_STORE": f"s3://{bucket}/releases"}, "secrets": repository_secrets}
    caller = yaml.safe_load((adopter / ".github" / "workflows" / "release.yml").read_text())["jobs"]["release"]
    workflow, inputs, secrets = _called(caller, tool, outer)
    # a runner's environment: no credentials but what the workflow passes, this interpreter's Python first on PATH
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "COMPILE_", "PYTHON"))}
    base["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), base["PATH"]])
    contexts = {"github": github, "inputs": inputs, "secrets": secrets, "steps": {}}

    plan = _play(workflow, "plan", adopter, tmp_path / "plan", tool, contexts, base)
    matrix = json.loads(plan.outputs["plan"]["matrix"])
    assert [entry["sku"] for entry in matrix["include"]] == ["rtx-4090"]
    builds = [
        _play(workflow, "build", adopter, tmp_path / f"build-{entry['sku']}", tool, dict(contexts, matrix=entry), base)
        for entry in matrix["include"]
    ]
    finalize = _play(workflow, "finalize", adopter, tmp_path / "finalize", tool, contexts, base)

    # every job installed its own trt-compile from the pinned commit, with only the extras it needs
    versions = {job.folder.name: job.outputs["install"]["version"] for job in (plan, *builds, finalize)}
    assert "tensorrt-rtx not installed" in versions["plan"] and "tensorrt-rtx not installed" in versions["finalize"]
    assert "tensorrt-rtx 1.7.1.116" in versions["build-rtx-4090"]
    for job in (plan, *builds, finalize):
        assert set(job.provided) >= {"actions/checkout", "actions/setup-python", "actions/cache"}
        assert "aws-actions/configure-aws-credentials" not in job.provided  # no role given: the step is skipped
    assert (tmp_path / "build-rtx-4090" / "release-work" / "release-report-rtx-4090.md").is_file()

    # the release is in the adopter's bucket, signed by the adopter's key
    verified = run_cli(
        "verify", "adopted@1.2.0", "--store", f"s3://{bucket}/releases", "--key", keys["p256.pub"], env=s3.env()
    )
    assert verified.exit_code == 0, verified.stderr
