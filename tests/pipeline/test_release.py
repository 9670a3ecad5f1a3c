"""compile release and compile plan, end to end: real calibration, TensorRT-RTX builds, checks and stores."""

from __future__ import annotations

import hashlib
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from compiler.stores import open_store
from tests.support.cli import REPO, assert_clean_error, run_cli

EXAMPLE = REPO / "pipelines" / "example.yaml"


def _pipeline(tmp_path: Path, **changes) -> Path:
    """The example pipeline, its paths made absolute, written into ``tmp_path`` with ``changes`` applied."""
    data = yaml.safe_load(EXAMPLE.read_text())
    base = EXAMPLE.parent
    data["model"], data["profiles"] = str(base / data["model"]), str(base / data["profiles"])
    data["calibration"]["data"] = str(base / data["calibration"]["data"])
    data["check"]["data"] = str(base / data["check"]["data"])
    data["store"] = str(tmp_path / "artifacts")
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / f"pipeline-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _release(pipeline: Path, work: Path, *extra: str, env=None):
    return run_cli("release", pipeline, "--work", work, "--json", *extra, env=env)


def test_the_example_releases_and_a_rerun_is_all_cache_hits(tmp_path):
    pipeline = _pipeline(tmp_path)
    first = _release(pipeline, tmp_path / "work")
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert [s["stage"] for s in report["stages"]] == ["inspect", "calibrate", "build", "check", "publish"]
    assert all(s["status"] == "ok" for s in report["stages"]), report["stages"]
    assert report["published"]["status"] == "published"
    assert len(report["engines"]) == 6
    again = json.loads(_release(pipeline, tmp_path / "work").stdout)
    assert all(e["cache_hit"] for e in again["engines"])
    assert (again["published"]["status"], again["published"]["uploaded_bytes"]) == ("unchanged", 0)
    assert "reused" in next(s["detail"] for s in again["stages"] if s["stage"] == "calibrate")
    markdown = (tmp_path / "work" / "release-report.md").read_text()
    assert "Release digits@1.0.0: passed" in markdown and "| publish | ok |" in markdown
    listing = json.loads(run_cli("ls", "digits@1.0.0", "--store", tmp_path / "artifacts", "--json").stdout)
    assert listing["manifest"]["content"]["check"]["passed"] is True
    out = tmp_path / "pulled.plan"
    pulled = run_cli("pull", "digits@1.0.0", "--sku", "rtx-5090", "--store", tmp_path / "artifacts", "--out", out)
    assert pulled.exit_code == 0, pulled.stderr


def test_the_example_releases_into_s3(s3, tmp_path):
    bucket = f"r-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=bucket)
    result = _release(_pipeline(tmp_path), tmp_path / "work", "--store", f"s3://{bucket}/releases", env=s3.env())
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["published"]["status"] == "published"
    manifest = s3.client().get_object(Bucket=bucket, Key="releases/releases/digits/1.0.0/manifest.json")
    assert len(json.loads(manifest["Body"].read())["content"]["engines"]) == 6


def test_a_failing_accuracy_gate_publishes_nothing(tmp_path):
    check = yaml.safe_load(EXAMPLE.read_text())["check"]
    check["data"] = str(EXAMPLE.parent / check["data"])
    pipeline = _pipeline(tmp_path, check={**check, "min_cosine": {"": 0.9999999}})
    result = _release(pipeline, tmp_path / "work")
    line = assert_clean_error(result, 1, "check failed", "accuracy")
    report = json.loads(result.stdout)
    assert [s["status"] for s in report["stages"]] == ["ok", "ok", "ok", "failed", "skipped"]
    assert not (tmp_path / "artifacts" / "releases").exists()
    assert "FAILED" in (tmp_path / "work" / "release-report.md").read_text()
    assert "cosine" in line


def test_sharded_jobs_stage_concurrently_and_finalize_publishes_one_release(tmp_path):
    pipeline = _pipeline(tmp_path)
    skus = ["rtx-4090", "rtx-3090", "rtx-5090"]
    (tmp_path / "artifacts").mkdir()
    early = run_cli("release", pipeline, "--work", tmp_path / "work", "--finalize")
    assert_clean_error(early, 1, "missing: rtx-3090, rtx-4090, rtx-5090")
    with ThreadPoolExecutor(3) as pool:
        jobs = list(pool.map(lambda sku: _release(pipeline, tmp_path / "work", "--only-sku", sku), skus))
    assert all(j.exit_code == 0 for j in jobs), [j.stderr for j in jobs]
    assert {json.loads(j.stdout)["published"]["status"] for j in jobs} == {"staged"}
    store = open_store(str(tmp_path / "artifacts"))
    assert store.read_manifest("digits", "1.0.0") is None  # staged, not published
    retried = json.loads(_release(pipeline, tmp_path / "work", "--only-sku", "rtx-3090").stdout)
    assert [s["stage"] for s in retried["stages"]] == ["stage"] and "already staged" in retried["stages"][0]["detail"]
    final = _release(pipeline, tmp_path / "work", "--finalize")
    assert final.exit_code == 0, final.stderr
    manifest = json.loads(store.read_manifest("digits", "1.0.0"))
    assert sorted((e["sku"], e["precision"]) for e in manifest["content"]["engines"]) == sorted(
        [("rtx-4090", p) for p in ("fp32", "fp16", "int8")]
        + [("rtx-3090", p) for p in ("fp16", "int8")]
        + [("rtx-5090", "fp16")]
    )
    for engine in manifest["content"]["engines"]:
        blob = tmp_path / "artifacts" / "blobs" / "sha256" / engine["plan"]["sha256"]
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == engine["plan"]["sha256"]
    assert json.loads(_release(pipeline, tmp_path / "work", "--finalize").stdout)["published"]["status"] == "unchanged"


def test_finalize_names_the_job_not_staged(tmp_path):
    pipeline = _pipeline(tmp_path, targets={"rtx-4090": ["fp16"], "rtx-5090": ["fp16"]})
    assert _release(pipeline, tmp_path / "work", "--only-sku", "rtx-4090").exit_code == 0
    result = run_cli("release", pipeline, "--work", tmp_path / "work", "--finalize")
    assert_clean_error(result, 1, "missing: rtx-5090", "staged: rtx-4090")


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"targets": {"rtx-4090": ["fp64"]}}, ["line 8", "targets.rtx-4090.precisions[0]", "'fp16'"]),
        ({"targets": {"no-such-gpu": ["fp16"]}}, ["no-such-gpu"]),
        ({"release": {"name": "../x", "version": "1"}}, ["release.name", "../x"]),
        ({"unknown_key": 1}, ["unknown_key", "unknown key"]),
        ({"check": {"samples": 0}}, ["line", "check.samples"]),
    ],
)
def test_an_invalid_pipeline_is_exit_2_naming_the_field(tmp_path, change, fragments):
    result = run_cli("release", _pipeline(tmp_path, **change), "--work", tmp_path / "work")
    assert_clean_error(result, 2, *fragments)
    assert not (tmp_path / "work").exists()


def test_plan_lists_one_job_per_sku_with_its_runner(tmp_path):
    pipeline = _pipeline(tmp_path, targets={"rtx-4090": ["fp16"], "h100": {"precisions": ["fp16"]}})
    matrix = json.loads(run_cli("plan", pipeline, "--format", "github-matrix").stdout)
    assert matrix == {
        "include": [
            {"sku": "rtx-4090", "backend": "tensorrt-rtx", "runs-on": ["ubuntu-24.04"]},
            {"sku": "h100", "backend": "tensorrt", "runs-on": ["self-hosted", "linux", "gpu", "h100"]},
        ]
    }


def test_a_dry_run_validates_and_builds_nothing(tmp_path):
    result = _release(_pipeline(tmp_path), tmp_path / "work", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "would release digits@1.0.0" in json.loads(result.stdout)["stages"][0]["detail"]
    assert not (tmp_path / "work").exists() and not (tmp_path / "artifacts").exists()
    missing = _release(_pipeline(tmp_path, profiles=str(tmp_path / "none.yaml")), tmp_path / "work", "--dry-run")
    assert missing.exit_code == 2


def test_a_part_staged_by_another_pipeline_is_not_taken_for_a_retry(tmp_path):
    first = _pipeline(tmp_path, targets={"rtx-4090": ["fp16"], "rtx-5090": ["fp16"]})
    second = _pipeline(tmp_path, targets={"rtx-4090": ["fp16", "fp32"], "rtx-5090": ["fp16"]})
    assert _release(first, tmp_path / "work", "--only-sku", "rtx-4090").exit_code == 0
    retried = run_cli("release", second, "--work", tmp_path / "work2", "--only-sku", "rtx-4090")
    assert_clean_error(retried, 4, "staged by another pipeline")
    assert _release(second, tmp_path / "work2", "--only-sku", "rtx-5090").exit_code == 0
    final = run_cli("release", second, "--work", tmp_path / "work2", "--finalize")
    assert_clean_error(final, 4, "rtx-4090", "another pipeline")
    assert open_store(str(tmp_path / "artifacts")).read_manifest("digits", "1.0.0") is None


def test_parts_built_from_different_calibrated_models_are_not_one_release():
    from compiler.core.errors import InvalidInput
    from compiler.core.records import BlobRef, ReleaseContent, ReleaseEngine
    from compiler.releases.publish import merge_contents

    def part(sku: str, qdq_model: str) -> ReleaseContent:
        engine = ReleaseEngine(
            sku=sku,
            compute_capabilities=["8.9"],
            precision="int8",
            profiles=[],
            backend={"name": "tensorrt-rtx", "version": "1.7.1.116"},
            builder_options={},
            plan=BlobRef(sha256=sku[-1] * 64, size_bytes=1),
            layers=None,
            built_model_sha256=qdq_model,
            calibration_sha256="c" * 64,
            plan_header=None,
        )
        return ReleaseContent(
            name="digits", version="1", model_sha256="m" * 64, model_name="m.onnx", engines=[engine], check=None
        )

    assert len(merge_contents([part("rtx-4090", "a" * 64), part("rtx-3090", "a" * 64)]).engines) == 2
    with pytest.raises(InvalidInput, match="int8 engines built from different calibrated models"):
        merge_contents([part("rtx-4090", "a" * 64), part("rtx-3090", "b" * 64)])
