"""A signed `compile release` (issue 31): the pipeline names where the key is, never the key; the release's
provenance records the pipeline file, the calibration data and the calibrated model by sha256."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.pipeline.test_release import _pipeline, _release
from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("secrets"))


def test_a_pipeline_signs_with_a_key_from_the_environment(tmp_path, keys):
    repo = tmp_path / "repo"
    repo.mkdir()
    pipeline = _pipeline(repo, targets={"rtx-4090": ["fp16", "int8"]}, signing={"key": "env://RELEASE_KEY"})
    env = {**os.environ, "RELEASE_KEY": keys["p256"].read_text()}
    done = _release(pipeline, tmp_path / "work", env=env)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["published"]["signature"] == "written"
    store = repo / "artifacts"
    verified = run_cli("verify", "digits@1.0.0", "--store", store, "--key", keys["p256.pub"])
    assert verified.exit_code == 0, verified.stderr

    statement = json.loads(run_cli("provenance", "digits@1.0.0", "--store", store, "--json").stdout)
    parameters = statement["predicate"]["buildDefinition"]["externalParameters"]
    assert parameters["pipeline"]["digest"]["sha256"] == hashlib.sha256(pipeline.read_bytes()).hexdigest()
    assert sorted((t["sku"], t["precision"]) for t in parameters["targets"]) == [
        ("rtx-4090", "fp16"),
        ("rtx-4090", "int8"),
    ]
    roles = {}
    for dependency in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        roles.setdefault(dependency.get("annotations", {}).get("role"), []).append(dependency)
    calibration = json.loads((tmp_path / "work" / "calibration" / "int8" / "calibration.json").read_text())
    assert [d["digest"]["sha256"] for d in roles["calibration data"]] == [calibration["data_sha256"]]
    assert [d["digest"]["sha256"] for d in roles["source model"]] == [calibration["model_sha256"]]
    assert len(roles["calibrated model"]) == 1 and len(roles["converted model"]) == 1


@pytest.mark.parametrize(
    ("key", "fragments"),
    [
        (
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIB\n-----END PRIVATE KEY-----\n",
            ["signing.key", "material"],
        ),
        ("awskms:///alias/release", ["signing.key", "not a awskms key reference"]),
        ("gcpkms:nope", ["signing.key", "not a gcpkms key reference"]),
        ("vault://secret/release", ["signing.key", "vault:// keys are not supported"]),
        ("env://NOT A NAME", ["signing.key", "environment variable"]),
        ("env://UNSET_RELEASE_KEY_31", ["signing.key", "$UNSET_RELEASE_KEY_31 is not set"]),
        ("@inside", ["inside the pipeline's repository"]),
        ("@rsa", ["signing.key", "RSA"]),
    ],
)
def test_a_bad_key_reference_is_refused_before_any_work(tmp_path, keys, key, fragments):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pipelines").mkdir()
    if key == "@inside":
        (repo / "keys").mkdir()
        (repo / "keys" / "release.pem").write_bytes(keys["ed25519"].read_bytes())
        key = "../keys/release.pem"
    elif key == "@rsa":
        key = str(keys["rsa"])
    pipeline = _pipeline(repo / "pipelines", targets={"rtx-4090": ["fp16"]}, signing={"key": key})
    env = {k: v for k, v in os.environ.items() if k not in ("COMPILE_SIGN_KEY", "UNSET_RELEASE_KEY_31")}
    result = run_cli("release", pipeline, "--work", tmp_path / "work", env=env)
    assert_clean_error(result, 2, *fragments)
    assert "MC4CAQAwBQYDK2VwBCIEIB" not in result.stderr  # key material is never echoed
    assert not (tmp_path / "work").exists() and not (repo / "pipelines" / "artifacts").exists()


def test_sharded_jobs_need_no_key_and_finalize_signs(tmp_path, keys):
    repo = tmp_path / "repo"
    repo.mkdir()
    pipeline = _pipeline(
        repo, targets={"rtx-4090": ["fp16"], "rtx-3090": ["fp16"]}, signing={"key": "env://RELEASE_KEY"}
    )
    without = {k: v for k, v in os.environ.items() if k not in ("RELEASE_KEY", "COMPILE_SIGN_KEY")}
    for sku in ("rtx-4090", "rtx-3090"):  # a build runner holds no secret
        job = _release(pipeline, tmp_path / "work", "--only-sku", sku, env=without)
        assert job.exit_code == 0, job.stderr
    unset = run_cli("release", pipeline, "--work", tmp_path / "work", "--finalize", env=without)
    assert_clean_error(unset, 2, "$RELEASE_KEY is not set")
    with_key = {**without, "RELEASE_KEY": keys["ed25519"].read_text()}
    final = _release(pipeline, tmp_path / "work", "--finalize", env=with_key)
    assert final.exit_code == 0, final.stderr
    assert json.loads(final.stdout)["published"]["signature"] == "written"
    verified = run_cli("verify", "digits@1.0.0", "--store", repo / "artifacts", "--key", keys["ed25519.pub"])
    assert verified.exit_code == 0, verified.stderr
    statement = json.loads(run_cli("provenance", "digits@1.0.0", "--store", repo / "artifacts", "--json").stdout)
    assert (
        statement["predicate"]["buildDefinition"]["externalParameters"]["pipeline"]["digest"]["sha256"]
        == hashlib.sha256(pipeline.read_bytes()).hexdigest()
    )


def test_a_pipeline_signs_with_an_hsm_key_named_by_its_uri(tmp_path):
    """`signing.key: hsm:2?label=release`: the key stays in the (software) HSM; the release report carries its
    public half, which verifies the release."""
    from tests.support.softhsm import URI, softhsm_token

    repo = tmp_path / "repo"
    repo.mkdir()
    pipeline = _pipeline(repo, targets={"rtx-4090": ["fp16"]}, signing={"key": URI})
    env = {**{k: v for k, v in os.environ.items() if k != "COMPILE_SIGN_KEY"}, **softhsm_token(tmp_path / "softhsm")}
    done = _release(pipeline, tmp_path / "work", env=env)
    assert done.exit_code == 0, done.stderr
    published = json.loads(done.stdout)["published"]
    assert published["signature"] == "written"
    public = tmp_path / "release.pub"
    public.write_text(published["public_key"])
    verified = run_cli("verify", "digits@1.0.0", "--store", repo / "artifacts", "--key", public)
    assert verified.exit_code == 0, verified.stderr
