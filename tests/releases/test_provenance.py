"""SLSA provenance a verifier accepts: the statement parses strictly as an in-toto Statement v1 carrying SLSA
Provenance v1 (the in-toto-attestation protobuf definitions, unknown fields refused), its builder id is a URI, and
it names files relative to the pipeline's repository, never by a path of the machine that built it."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1.provenance_pb2 import Provenance
from in_toto_attestation.v1.statement_pb2 import Statement

from compiler.core.errors import InvalidInput
from compiler.releases import resolve
from compiler.releases.provenance import LOCAL_BUILDER, builder
from tests.support.cli import EXAMPLES, run_cli
from tests.support.json_server import json_server

GITHUB = ("GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_WORKFLOW_REF", "COMPILE_BUILDER_ID")
GITHUB += ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def _repository(root: Path) -> Path:
    """A model repository as a team keeps one: model, data and profiles in models/, the pipeline in pipelines/."""
    (root / ".git").mkdir(parents=True)
    (root / "models").mkdir()
    for name in ("digits_cnn.onnx", "digits.npz"):
        shutil.copy(EXAMPLES / name, root / "models" / name)
    shutil.copy(EXAMPLES.parents[1] / "profiles" / "digits.yaml", root / "models" / "digits_profiles.yaml")
    example = yaml.safe_load((Path(__file__).parents[2] / "pipelines" / "example.yaml").read_text())
    example |= {"model": "../models/digits_cnn.onnx", "profiles": "../models/digits_profiles.yaml"}
    example |= {"store": "../artifacts", "targets": {"rtx-4090": ["int8"]}}
    example["calibration"]["data"] = example["check"]["data"] = "../models/digits.npz"
    (root / "pipelines").mkdir()
    (root / "pipelines" / "release.yaml").write_text(yaml.safe_dump(example, sort_keys=False))
    return root / "pipelines" / "release.yaml"


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in [*value.keys(), *value.values()] for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_the_statement_parses_strictly_and_names_no_path_of_the_runner(tmp_path):
    pipeline = _repository(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if k not in GITHUB}
    done = run_cli("release", pipeline, "--work", tmp_path / "work", env=env)
    assert done.exit_code == 0, done.stderr
    shown = run_cli("provenance", "digits@1.0.0", "--store", tmp_path / "repo" / "artifacts", "--json", env=env)
    statement = json.loads(shown.stdout)

    json_format.ParseDict(statement, Statement())  # unknown or mistyped fields raise
    predicate = json_format.ParseDict(statement["predicate"], Provenance())
    assert predicate.run_details.builder.id == LOCAL_BUILDER
    definition = statement["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["pipeline"]["path"] == "pipelines/release.yaml"
    names = {d["name"] for d in definition["resolvedDependencies"]}
    assert "models/digits.npz" in names
    for text in _strings(statement):
        assert not text.startswith("/") and str(tmp_path) not in text and "\\" not in text, text


def test_data_that_may_not_leave_is_named_by_digest_and_ships_no_golden_inputs(tmp_path):
    """Issue 42, data governance: `release: {golden: false, name_data: false}` publishes no golden inputs and a
    provenance that names the calibration data by its digest only; `compile publish --no-golden` does the same."""
    pipeline = _repository(tmp_path / "repo")
    spec = yaml.safe_load(pipeline.read_text())
    spec["release"] |= {"golden": False, "name_data": False}
    pipeline.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in GITHUB}
    done = run_cli("release", pipeline, "--work", tmp_path / "work", env=env)
    assert done.exit_code == 0, done.stderr
    store = tmp_path / "repo" / "artifacts"
    statement = json.loads(run_cli("provenance", "digits@1.0.0", "--store", store, "--json", env=env).stdout)
    dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    [data] = [d for d in dependencies if d.get("annotations", {}).get("role") == "calibration data"]
    assert data["name"] == "calibration data" and len(data["digest"]["sha256"]) == 64
    assert not any("digits.npz" in text for text in _strings(statement))
    assert resolve(str(store), "digits@1.0.0").manifest.content.golden is None
    build = next((tmp_path / "work").glob("**/check.json")).parent
    assert json.loads((build / "check.json").read_text())["golden"] is not None  # the check kept them; not shipped
    published = run_cli("publish", build, "--store", tmp_path / "other", "--name", "digits", "--version", "1.0.0",
                        "--no-golden", "--json")  # fmt: skip
    assert published.exit_code == 0, published.stderr
    assert resolve(str(tmp_path / "other"), "digits@1.0.0").manifest.content.golden is None


def _token(claims: dict):
    """GitHub's OIDC token endpoint as a job sees it: a JWT whose payload has ``claims``, for the audience asked."""

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    def answer(path: str) -> tuple[int, dict]:
        audience = parse_qs(urlsplit(path).query).get("audience", [""])[0]  # GitHub's tokens echo it
        return 200, {"value": f"{part({'alg': 'RS256'})}.{part({'aud': audience, **claims})}.c2ln"}

    return json_server(answer)


@pytest.fixture
def github(monkeypatch):
    for name in GITHUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/models")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "2")
    monkeypatch.setenv("GITHUB_WORKFLOW_REF", "org/models/.github/workflows/release.yml@refs/tags/v1.0.0")
    return monkeypatch


def test_off_ci_the_builder_is_the_documented_local_uri_not_a_user_or_host(monkeypatch):
    for name in GITHUB:
        monkeypatch.delenv(name, raising=False)
    assert builder() == (LOCAL_BUILDER, None)


def test_on_github_the_builder_is_the_workflow_and_the_invocation_the_run(github):
    assert builder() == (
        "https://github.com/org/models/.github/workflows/release.yml@refs/tags/v1.0.0",
        "https://github.com/org/models/actions/runs/42/attempts/2",
    )


def test_under_a_reusable_workflow_the_builder_is_the_called_workflow_from_the_oidc_token(github):
    github.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "request-token")
    with _token({"job_workflow_ref": "acme/ci/.github/workflows/trt-release.yml@refs/tags/v2"}) as url:
        github.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", f"{url}/token?x=1")
        assert builder()[0] == "https://github.com/acme/ci/.github/workflows/trt-release.yml@refs/tags/v2"
    with _token({"job_workflow_ref": "not a ref"}) as url:  # a token that says nothing usable
        github.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", f"{url}/token?x=1")
        assert builder()[0].endswith("org/models/.github/workflows/release.yml@refs/tags/v1.0.0")


def test_an_explicit_builder_id_must_be_a_uri(github):
    github.setenv("COMPILE_BUILDER_ID", "https://ci.example.com/pipelines/release")
    assert builder()[0] == "https://ci.example.com/pipelines/release"
    github.setenv("COMPILE_BUILDER_ID", "root@vm")
    with pytest.raises(InvalidInput, match=r"COMPILE_BUILDER_ID.*not a URI"):
        builder()
