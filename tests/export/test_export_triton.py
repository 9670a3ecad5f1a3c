"""compile export triton: a release with rtx-3090 (8.6), rtx-4090 (8.9) and rtx-5090 (12.0) engines becomes a
Triton model repository whose config.pbtxt parses with Triton's own ModelConfig schema and maps each compute
capability to the right plan, checked by digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from compiler.core.records import EngineRecord
from compiler.releases.publish import publish
from tests.support.cli import assert_clean_error, run_cli

SKUS = {"rtx-3090": "8.6", "rtx-4090": "8.9", "rtx-5090": "12.0"}


@pytest.fixture(scope="module")
def fleet_build(tmp_path_factory, digits_model, digits_profiles) -> Path:
    from compiler.engines import build_engines

    out = tmp_path_factory.mktemp("triton") / "build"
    assert not build_engines(digits_model, digits_profiles, list(SKUS), ["fp16", "fp32"], out).failed
    return out


@pytest.fixture(params=["local", "oci"])
def store_uri(request, tmp_path, fleet_build) -> str:
    uri = str(tmp_path / "store") if request.param == "local" else request.getfixturevalue("registry").uri()
    publish(fleet_build, uri, "digits", "1.0.0")
    return uri


def _parse(config: Path):
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())


def _export(uri: str, repo: Path, *args: str):
    return run_cli("export", "triton", "digits@1.0.0", "--store", uri, "--repo", repo, "--json", *args)


def test_a_mixed_fleet_gets_one_plan_per_compute_capability(store_uri, fleet_build, tmp_path, digits_model):
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store_uri, repo, "--precision", "fp16")
    assert result.exit_code == 0, result.stderr
    config = _parse(repo / "digits" / "config.pbtxt")
    assert (config.name, config.platform, config.max_batch_size) == ("digits", "tensorrt_plan", 0)
    assert config.default_model_filename == ""  # a GPU with no engine fails to load, not loads a wrong plan
    assert dict(config.cc_model_filenames) == {cc: f"{sku}-fp16.plan" for sku, cc in SKUS.items()}
    for sku, cc in SKUS.items():
        plan = repo / "digits" / "1" / config.cc_model_filenames[cc]
        engine = EngineRecord.model_validate_json((fleet_build / sku / "fp16" / "engine.json").read_bytes())
        assert hashlib.sha256(plan.read_bytes()).hexdigest() == engine.sha256
    assert sorted(p.name for p in (repo / "digits").iterdir()) == ["1", "config.pbtxt"]  # nothing staged is left

    import onnx

    model = onnx.load(digits_model)
    inputs = {i.name: i for i in config.input}
    assert set(inputs) == {i.name for i in model.graph.input} and {o.name for o in config.output} == {
        o.name for o in model.graph.output}
    from tritonclient.grpc import model_config_pb2

    image = next(iter(inputs.values()))
    assert image.data_type == model_config_pb2.TYPE_FP32
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert list(image.dims) == dims and dims[0] == -1  # the dynamic batch dim, explicit (max_batch_size 0)
    profiles = json.loads(result.stdout)
    assert list(config.instance_group[0].profile) == [str(i) for i in range(len(_engine_profiles(fleet_build)))]
    assert profiles["plans"] == dict(config.cc_model_filenames)


def _engine_profiles(build: Path) -> list:
    return EngineRecord.model_validate_json((build / "rtx-3090" / "fp16" / "engine.json").read_bytes()).profiles


def test_exporting_again_is_unchanged_and_other_content_is_a_conflict(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    assert _export(store_uri, repo, "--precision", "fp16").exit_code == 0
    again = _export(store_uri, repo, "--precision", "fp16")
    assert json.loads(again.stdout)["status"] == "unchanged", again.stderr
    before = {p: p.read_bytes() for p in (repo / "digits").rglob("*") if p.is_file()}
    other = _export(store_uri, repo, "--precision", "fp32")  # other plans under the same model and version
    assert_clean_error(other, 4, "config.pbtxt", "describes other plans")
    assert {p: p.read_bytes() for p in (repo / "digits").rglob("*") if p.is_file()} == before
    plan = repo / "digits" / "1" / "rtx-3090-fp16.plan"
    plan.write_bytes(b"edited")
    edited = _export(store_uri, repo, "--precision", "fp16")
    assert_clean_error(edited, 4, "holds other files", "--triton-version")
    assert plan.read_bytes() == b"edited"
    next_version = _export(store_uri, repo, "--precision", "fp16", "--triton-version", "2")
    assert next_version.exit_code == 0, next_version.stderr
    assert sorted(p.name for p in (repo / "digits" / "2").iterdir()) == sorted(f"{s}-fp16.plan" for s in SKUS)


def test_a_release_of_several_precisions_needs_one_named(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    assert_clean_error(_export(store_uri, repo), 2, "one Triton model serves one precision", "--precision")
    assert_clean_error(_export(store_uri, repo, "--precision", "int8"), 2, "no int8 engine")
    assert_clean_error(_export(store_uri, repo, "--precision", "fp16", "--default-plan", "9.0"), 2, "9.0")
    assert list(repo.iterdir()) == []


def test_the_default_plan_is_set_only_when_asked(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    assert _export(store_uri, repo, "--precision", "fp16", "--default-plan", "8.9").exit_code == 0
    assert _parse(repo / "digits" / "config.pbtxt").default_model_filename == "rtx-4090-fp16.plan"


def test_two_skus_of_one_compute_capability_are_refused(tmp_path, digits_model, digits_profiles):
    from compiler.engines import build_engines

    build = tmp_path / "build"
    assert not build_engines(digits_model, digits_profiles, ["rtx-3090", "rtx-a6000"], ["fp16"], build).failed
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    (tmp_path / "models").mkdir()
    result = _export(store, tmp_path / "models")
    same = [EngineRecord.model_validate_json((build / s / "fp16" / "engine.json").read_bytes()).sha256
            for s in ("rtx-3090", "rtx-a6000")]
    if same[0] == same[1]:  # one plan for both: nothing to tell apart
        assert result.exit_code == 0, result.stderr
    else:
        assert_clean_error(result, 2, "rtx-3090 and rtx-a6000", "compute capability 8.6")


def test_a_tampered_plan_writes_no_version(tmp_path, fleet_build):
    store = tmp_path / "store"
    publish(fleet_build, str(store), "digits", "1.0.0")
    engine = EngineRecord.model_validate_json((fleet_build / "rtx-5090" / "fp16" / "engine.json").read_bytes())
    blob = store / "blobs" / "sha256" / engine.sha256
    blob.chmod(0o644)
    blob.write_bytes(b"not a plan")
    repo = tmp_path / "models"
    repo.mkdir()
    result = run_cli("export", "triton", "digits@1.0.0", "--store", store, "--repo", repo, "--precision", "fp16",
                     "--no-cache")
    assert_clean_error(result, 1, f"sha256:{engine.sha256}", "corrupt")
    assert [p.name for p in repo.iterdir()] == [".digits.lock"]  # no model folder, nothing staged; the lock stays


def test_a_release_without_a_model_signature_is_refused(tmp_path, fleet_build, digits_model):
    moved = tmp_path / "build"
    import shutil

    shutil.copytree(fleet_build, moved)
    report = json.loads((moved / "build.json").read_text())
    report["model"] = str(tmp_path / "gone.onnx")  # the model is not where the build was run
    (moved / "build.json").write_text(json.dumps(report))
    store = str(tmp_path / "store")
    publish(moved, store, "digits", "1.0.0")
    (tmp_path / "models").mkdir()
    result = _export(store, tmp_path / "models", "--precision", "fp16")
    assert_clean_error(result, 2, "records no model inputs and outputs")


@pytest.mark.parametrize("args, fragment", [
    (("--model-name", "../up"), "--model-name"), (("--triton-version", "0"), "--triton-version"),
    (("--repo", "/nonexistent/models"), "not a folder")])
def test_hostile_options_are_refused(tmp_path, args, fragment):
    (tmp_path / "models").mkdir()
    store = tmp_path / "store"
    store.mkdir()
    result = run_cli("export", "triton", "digits@1.0.0", "--store", store, "--repo", tmp_path / "models", *args)
    assert_clean_error(result, 2, fragment)
    assert list((tmp_path / "models").iterdir()) == []


def test_the_next_release_of_the_same_model_exports_as_the_next_version(tmp_path, fleet_build):
    store = str(tmp_path / "store")
    for version in ("1.0.0", "1.0.1"):
        publish(fleet_build, store, "digits", version)
    repo = tmp_path / "models"
    repo.mkdir()
    assert _export(store, repo, "--precision", "fp16").exit_code == 0
    following = run_cli("export", "triton", "digits@1.0.1", "--store", store, "--repo", repo, "--precision", "fp16",
                        "--triton-version", "2")
    assert following.exit_code == 0, following.stderr
    assert "digits@1.0.1" in (repo / "digits" / "config.pbtxt").read_text()
    assert sorted(p.name for p in (repo / "digits").iterdir()) == ["1", "2", "config.pbtxt"]


def test_a_config_that_is_not_text_is_other_content(tmp_path, fleet_build):
    store = str(tmp_path / "store")
    publish(fleet_build, store, "digits", "1.0.0")
    (tmp_path / "models" / "digits").mkdir(parents=True)
    (tmp_path / "models" / "digits" / "config.pbtxt").write_bytes(b"\xff\xfe garbage")
    assert_clean_error(_export(store, tmp_path / "models", "--precision", "fp16"), 4, "config.pbtxt")
