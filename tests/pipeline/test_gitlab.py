"""GitLab CI as a second engine: `compile plan --format gitlab` writes a child pipeline that GitLab's own CI schema
accepts (check-jsonschema's vendored copy), whose every `needs` names a job (the parent's plan job, through
`pipeline: $PARENT_PIPELINE_ID`), with no job over GitLab's 50 `needs` however many SKUs (finalize waits through
stages), build jobs on the runner labels the pipeline's `runners:` gives, and a sigstore token for finalize."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.pipeline.test_release import _pipeline
from tests.support.cli import REPO, run_cli

CHECK_JSONSCHEMA = str(Path(sys.executable).with_name("check-jsonschema"))


def _child(pipeline: Path, tmp_path: Path) -> tuple[Path, dict]:
    done = run_cli("plan", pipeline, "--format", "gitlab")
    assert done.exit_code == 0, done.stderr
    path = tmp_path / "child.yml"
    path.write_text(done.stdout)
    return path, yaml.safe_load(done.stdout)


def _valid_for_gitlab(path: Path) -> None:
    checked = subprocess.run(
        [CHECK_JSONSCHEMA, "--builtin-schema", "vendor.gitlab-ci", path], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _jobs(child: dict) -> dict[str, dict]:
    return {name: job for name, job in child.items() if isinstance(job, dict) and "script" in job}


def test_the_example_s_child_pipeline_is_valid_gitlab_ci_and_every_need_names_a_job(tmp_path):
    path, child = _child(REPO / "pipelines" / "example.yaml", tmp_path)
    _valid_for_gitlab(path)
    jobs = _jobs(child)
    assert set(jobs) == {"build rtx-4090", "build rtx-3090", "build rtx-5090", "finalize"}
    for name, job in jobs.items():
        for need in job.get("needs", []):
            assert need == {"pipeline": "$PARENT_PIPELINE_ID", "job": "plan"} or need in jobs, (name, need)
    assert child["stages"].index(jobs["finalize"]["stage"]) > child["stages"].index("build")
    assert "needs" not in jobs["finalize"]  # it waits for the whole build stage
    assert jobs["finalize"]["id_tokens"] == {"SIGSTORE_ID_TOKEN": {"aud": "sigstore"}}
    assert "'trt-compile[rtx]==" in jobs["build rtx-4090"]["script"][0]
    assert "tags" not in jobs["build rtx-4090"]  # any runner builds TensorRT-RTX


def test_sixty_skus_stay_within_gitlab_s_limits_and_runner_labels_come_from_the_pipeline(tmp_path):
    catalog = {f"gpu-{i:02d}": {"compute_capability": "8.9", "backend": "tensorrt", "memory_gb": 24} for i in range(60)}
    skus = tmp_path / "skus.yaml"
    skus.write_text(yaml.safe_dump({"skus": catalog}))
    runners = {"gpu": ["k8s", "gpu-{sku}"], "gpu-07": ["special"]}
    pipeline = _pipeline(tmp_path, skus=str(skus), targets={sku: ["fp16"] for sku in catalog}, runners=runners)
    path, child = _child(pipeline, tmp_path)
    _valid_for_gitlab(path)
    jobs = _jobs(child)
    assert len(jobs) == 61 and all(len(job.get("needs", [])) <= 50 for job in jobs.values())
    assert jobs["build gpu-03"]["tags"] == ["k8s", "gpu-gpu-03"] and jobs["build gpu-07"]["tags"] == ["special"]
    assert "'trt-compile[tensorrt]==" in jobs["build gpu-03"]["script"][0]
    matrix = run_cli("plan", pipeline, "--format", "github-matrix").stdout
    assert '"k8s"' in matrix and '"special"' in matrix


def test_runner_labels_that_no_ci_takes_are_refused_naming_the_field(tmp_path):
    for runners, fragment in (
        ({"gpu": []}, "gpu: give at least one label"),
        ({"cpu": ["has space"]}, "cpu"),
        ({"cpu": ["x" * 129]}, "cpu"),
        ({"cpu": "ubuntu-24.04"}, "cpu"),
    ):
        done = run_cli("plan", _pipeline(tmp_path, runners=runners), "--format", "gitlab")
        assert done.exit_code == 2 and "runners" in done.stderr and fragment in done.stderr, (runners, done.stderr)
        assert "Traceback" not in done.stderr and done.stdout == ""
