"""Machine-readable outputs are a contract: every ``--json`` output carries ``format_version``, and it and every
record validate against the JSON Schemas shipped in compiler/schemas/, which are the pydantic models' own
(regenerated and compared here, so a changed model without its schema fails)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from compiler.cli.schemas import file_name, rendered
from tests.support.cli import REPO, run_cli

SCHEMAS = REPO / "compiler" / "schemas"


def _valid(document: object, name: str) -> None:
    schema = json.loads((SCHEMAS / file_name(name)).read_text())
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)


def test_the_shipped_schemas_are_the_models_own():
    shipped = {p.name: p.read_text() for p in SCHEMAS.glob("*.schema.json")}
    assert shipped == rendered(), "regenerate: python -m compiler.cli.schemas compiler/schemas"


@pytest.fixture(scope="module")
def released(built_digits, tmp_path_factory) -> tuple[Path, Path]:
    """A build folder and a store holding it as digits@1.0.0."""
    store = tmp_path_factory.mktemp("schemas") / "store"
    done = run_cli("publish", built_digits(checked=True), "--name", "digits", "--version", "1.0.0", "--store", store)
    assert done.exit_code == 0, done.stderr
    return built_digits(checked=True), store


def test_every_json_output_carries_its_format_version_and_validates(released, tmp_path):
    build, store = released
    commands = {
        "doctor": ["doctor"],
        "skus": ["skus"],
        "check": ["check", build],
        "publish": ["publish", build, "--name", "digits", "--version", "1.0.0", "--store", store],
        "pull": ["pull", "digits@1.0.0", "--sku", "rtx-4090", "--store", store, "--out", tmp_path / "x.plan"],
        "ls": ["ls", "--store", store],
        "promote": ["promote", "digits@1.0.0", "--channel", "stable", "--store", store],
    }
    for name, args in commands.items():
        done = run_cli(*args, "--json")
        assert done.exit_code == 0, (name, done.stderr)
        document = json.loads(done.stdout)
        assert isinstance(document.get("format_version"), int), name
        _valid(document, name)
    plan = json.loads(run_cli("plan", REPO / "pipelines" / "example.yaml", "--json").stdout)
    assert plan["format_version"] == 1 and [j["sku"] for j in plan["jobs"]]
    matrix = json.loads(run_cli("plan", REPO / "pipelines" / "example.yaml", "--format", "github-matrix").stdout)
    assert set(matrix) == {"include"}  # GitHub's own format: no key of ours


def test_the_records_a_build_and_a_release_write_validate(released):
    build, store = released
    for path, name in [
        (build / "build.json", "build.json"),
        (build / "check.json", "check.json"),
        (build / "rtx-4090" / "fp16" / "engine.json", "engine.json"),
        (build / "rtx-4090" / "fp16" / "layers.json", "layers.json"),
        (store / "releases" / "digits" / "1.0.0" / "manifest.json", "manifest.json"),
    ]:
        _valid(json.loads(path.read_text()), name)
