"""compile export triton: a release with rtx-3090 (8.6), rtx-4090 (8.9) and rtx-5090 (12.0) engines becomes a
Triton model repository whose config.pbtxt parses with Triton's own ModelConfig schema and maps each compute
capability to the right plan, checked by digest.

Triton's TensorRT backend runs datacenter TensorRT, which cannot be installed or built with here: the releases
exported are stand-ins (tests/support/serving.py: the real TensorRT-RTX build's records naming datacenter
TensorRT, opaque plan bytes). Everything export does runs on them for real (runtime rule, verified fetch, staging,
config, warmup); that Triton loads the plans is not shown. The real TensorRT-RTX release is refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from compiler.core.records import EngineRecord
from compiler.releases.publish import publish
from tests.support.cli import assert_clean_error, run_cli
from tests.support.serving import datacenter_copy

SKUS = {"rtx-3090": "8.6", "rtx-4090": "8.9", "rtx-5090": "12.0"}


@pytest.fixture(scope="module")
def rtx_build(built_digits, digits_data) -> Path:
    out = built_digits(SKUS, ("fp16", "fp32"), data=digits_data)
    assert json.loads((out / "check.json").read_text())["golden"] is not None
    return out


@pytest.fixture(scope="module")
def fleet_build(tmp_path_factory, rtx_build) -> Path:
    return datacenter_copy(rtx_build, tmp_path_factory.mktemp("datacenter") / "build")


@pytest.fixture(params=["local", "oci"])
def store_uri(request, tmp_path, fleet_build) -> str:
    uri = str(tmp_path / "store") if request.param == "local" else request.getfixturevalue("registry").uri()
    publish(fleet_build, uri, "digits", "1.0.0")
    return uri


def _parse(config: Path):
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())


def _export(uri: str, repo: Path, *args: str, release: str = "25.10", ref: str = "digits@1.0.0", json: bool = True):
    """`compile export triton REF` into REPO, the Triton release named, its report as JSON unless ``json=False``."""
    shown = ("--json",) if json else ()
    return run_cli("export", "triton", ref, "--store", uri, "--repo", repo, *shown, "--triton-release", release, *args)


def test_a_mixed_fleet_gets_one_plan_per_compute_capability(store_uri, fleet_build, tmp_path, digits_model):
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store_uri, repo, "--precision", "fp16")
    assert result.exit_code == 0, result.stderr
    config = _parse(repo / "digits" / "config.pbtxt")
    assert (config.name, config.platform) == ("digits", "tensorrt_plan")
    assert config.default_model_filename == ""  # a GPU with no engine fails to load, not loads a wrong plan
    assert dict(config.cc_model_filenames) == {cc: f"{sku}-fp16.plan" for sku, cc in SKUS.items()}
    for sku, cc in SKUS.items():
        plan = repo / "digits" / "1" / config.cc_model_filenames[cc]
        engine = EngineRecord.model_validate_json((fleet_build / sku / "fp16" / "engine.json").read_bytes())
        assert hashlib.sha256(plan.read_bytes()).hexdigest() == engine.sha256
    assert sorted(p.name for p in (repo / "digits").iterdir()) == ["1", "config.pbtxt", "warmup"]  # none staged

    import onnx

    model = onnx.load(digits_model)
    inputs = {i.name: i for i in config.input}
    assert set(inputs) == {i.name for i in model.graph.input} and {o.name for o in config.output} == {
        o.name for o in model.graph.output
    }
    from tritonclient.grpc import model_config_pb2

    image = next(iter(inputs.values()))
    assert image.data_type == model_config_pb2.TYPE_FP32
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == -1 and list(image.dims) == dims[1:]  # the batch dim is Triton's (max_batch_size > 0)
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
    assert_clean_error(edited, 4, "holds other files", "--model-version")
    assert plan.read_bytes() == b"edited"
    next_version = _export(store_uri, repo, "--precision", "fp16", "--model-version", "2")
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

    rtx = tmp_path / "rtx"
    assert not build_engines(digits_model, digits_profiles, ["rtx-3090", "rtx-a6000"], ["fp16"], rtx).failed
    build = datacenter_copy(rtx, tmp_path / "build")
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    (tmp_path / "models").mkdir()
    result = _export(store, tmp_path / "models")
    same = [
        EngineRecord.model_validate_json((build / s / "fp16" / "engine.json").read_bytes()).sha256
        for s in ("rtx-3090", "rtx-a6000")
    ]
    if same[0] == same[1]:  # one plan for both: nothing to tell apart
        assert result.exit_code == 0, result.stderr
    else:
        assert_clean_error(result, 2, "rtx-3090/fp16 and rtx-a6000/fp16 are different plans", "compute capability 8.6")


def test_a_tampered_plan_writes_no_version(tmp_path, fleet_build):
    store = tmp_path / "store"
    publish(fleet_build, str(store), "digits", "1.0.0")
    engine = EngineRecord.model_validate_json((fleet_build / "rtx-5090" / "fp16" / "engine.json").read_bytes())
    blob = store / "blobs" / "sha256" / engine.sha256
    blob.chmod(0o644)
    blob.write_bytes(b"not a plan")
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store, repo, "--precision", "fp16", "--no-cache", json=False)
    assert_clean_error(result, 1, f"sha256:{engine.sha256}", "corrupt")
    assert [p.name for p in repo.iterdir()] == [".digits.lock"]  # no model folder, nothing staged; the lock stays


def test_a_release_without_a_model_signature_is_refused(tmp_path, fleet_build):
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


R = ("--triton-release", "25.10")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--model-name", "../up", *R), "--model-name"),
        (("--triton-version", "0", *R), "--triton-version"),
        (("--model-version", "0", *R), "--model-version"),
        (("--model-version", "2", "--triton-version", "3", *R), "disagree"),
        (("--repo", "/proc/version/models", *R), "cannot write there"),
        (("--triton-release", ""), "--triton-release"),
        (("--triton-release", "25.1"), "YY.MM"),
        (("--triton-release", "99.99"), "not in the table"),
        (("--triton-release", "25.10\nerror: forged"), "YY.MM"),
        (("--triton-release", "../25.10"), "YY.MM"),
        (("--triton-release", "25.10-py3"), "YY.MM"),
        (("--triton-tensorrt", "ten"), "--triton-tensorrt"),
        (("--triton-tensorrt", "10.13.3.9.1.2"), "--triton-tensorrt"),
        ((), "--triton-release YY.MM"),
    ],
)
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
    following = _export(store, repo, "--precision", "fp16", "--model-version", "2", ref="digits@1.0.1", json=False)
    assert following.exit_code == 0, following.stderr
    assert "digits@1.0.1" in (repo / "digits" / "config.pbtxt").read_text()
    assert sorted(p.name for p in (repo / "digits").iterdir()) == ["1", "2", "config.pbtxt", "warmup"]


def test_a_config_that_is_not_text_is_other_content(tmp_path, fleet_build):
    store = str(tmp_path / "store")
    publish(fleet_build, store, "digits", "1.0.0")
    (tmp_path / "models" / "digits").mkdir(parents=True)
    (tmp_path / "models" / "digits" / "config.pbtxt").write_bytes(b"\xff\xfe garbage")
    assert_clean_error(_export(store, tmp_path / "models", "--precision", "fp16"), 4, "config.pbtxt")


def test_a_tensorrt_rtx_release_is_refused_naming_the_plan_its_runtime_and_what_to_do(rtx_build, tmp_path):
    store = str(tmp_path / "store")
    publish(rtx_build, store, "digits", "1.0.0")
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store, repo, "--precision", "fp16")
    line = assert_clean_error(
        result,
        2,
        "plan rtx-3090-fp16.plan is a TensorRT-RTX 1.7.1.116 plan",
        "Triton 25.10 (TensorRT 10.11.0.33)",
        "cannot load it",
        "build the rtx-3090 engines with datacenter TensorRT on a runner of that SKU",
        "compile export rtx",
    )
    assert "Traceback" not in line
    assert list(repo.iterdir()) == []  # refused before anything was fetched


def test_a_plan_of_another_tensorrt_version_is_refused_naming_the_releases_that_load_it(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store_uri, repo, "--precision", "fp16", release="25.11")
    assert_clean_error(
        result,
        2,
        "datacenter TensorRT 10.11.0.33 plan (loads with ==10.11.0.33)",
        "Triton 25.11 (TensorRT 10.13.3.9) cannot load it",
        "25.08, 25.09, 25.10",
        "build the rtx-3090 engine again with TensorRT 10.13.3.9",
    )
    assert list(repo.iterdir()) == []
    direct = _export(store_uri, repo, "--precision", "fp16", "--triton-tensorrt", "10.11.0.33", release="25.11")
    assert direct.exit_code == 0, direct.stderr  # the server's own TensorRT wins over the table
    assert json.loads(direct.stdout)["triton"] == "Triton 25.11 (TensorRT 10.11.0.33)"


def test_a_version_compatible_plan_loads_on_later_releases_of_its_major(rtx_build, tmp_path):
    build = datacenter_copy(rtx_build, tmp_path / "build", version="10.8.0.43", version_compatible=True)
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store, repo, "--precision", "fp16", release="26.07")
    assert result.exit_code == 0, result.stderr
    assert "version-compatible=true" in json.loads(result.stdout)["notes"][0]
    older = _export(store, repo, "--precision", "fp16", "--model-name", "old", release="24.12")
    assert_clean_error(older, 2, "loads with >=10.8.0.43,<11", "25.01, 25.02")


def test_the_config_batches_and_warms_up_from_the_profiles_and_golden_inputs(store_uri, fleet_build, tmp_path):
    """digits' profiles: online batch 1..8 (opt 1), batch 8..64 (opt 32): Triton batches up to 64, prefers 32, and
    warms up at batch 1 and 32 with the release's first golden sample."""
    import numpy as np

    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store_uri, repo, "--precision", "fp16")
    assert result.exit_code == 0, result.stderr
    config = _parse(repo / "digits" / "config.pbtxt")
    from tritonclient.grpc import model_config_pb2

    assert config.max_batch_size == 64
    assert list(config.dynamic_batching.preferred_batch_size) == [32]
    assert [(g.kind, g.count) for g in config.instance_group] == [(model_config_pb2.ModelInstanceGroup.KIND_GPU, 1)]
    assert list(config.output[0].dims) == [10]
    assert [(w.name, w.batch_size) for w in config.model_warmup] == [("golden batch 1", 1), ("golden batch 32", 32)]
    golden = np.load(fleet_build / "golden.npz", allow_pickle=False)
    for warmup in config.model_warmup:
        image = warmup.inputs["image"]
        assert (image.data_type, list(image.dims)) == (model_config_pb2.TYPE_FP32, [1, 8, 8])
        data = (repo / "digits" / "warmup" / image.input_data_file).read_bytes()
        assert data == golden["input_0"][0].astype(np.float32).tobytes()
    record = json.loads(result.stdout)
    assert (record["max_batch_size"], record["preferred_batch_sizes"], record["model_version"]) == (64, [32], 1)
    assert record["warmup"] == [config.model_warmup[0].inputs["image"].input_data_file]


def test_the_deprecated_triton_version_still_names_the_folder_and_says_so(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store_uri, repo, "--precision", "fp16", "--triton-version", "3")
    assert result.exit_code == 0, result.stderr
    assert "warning: --triton-version is deprecated" in result.stderr and "--model-version" in result.stderr
    assert json.loads(result.stdout)["model_version"] == 3
    assert (repo / "digits" / "3").is_dir()
    assert "--triton-version" not in run_cli("export", "triton", "--help").stdout  # hidden: --model-version is shown


def test_a_manifest_claiming_datacenter_tensorrt_for_a_tensorrt_rtx_plan_exports_nothing(rtx_build, tmp_path):
    """A publisher's lie the manifest cannot show (no plan header recorded): the fetched plan's header tells."""
    import shutil

    build = tmp_path / "build"
    shutil.copytree(rtx_build, build)
    for record in build.glob("*/*/engine.json"):
        engine = json.loads(record.read_text())
        engine.update(backend={"name": "tensorrt", "version": "10.11.0.33"}, plan_header=None)
        record.write_text(json.dumps(engine))
    store = str(tmp_path / "store")
    publish(build, store, "digits", "1.0.0")
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(store, repo, "--precision", "fp16")
    assert_clean_error(
        result,
        1,
        "claims to be a datacenter TensorRT 10.11.0.33 plan",
        "its header is a TensorRT-RTX plan's",
        "nothing was exported",
    )
    assert [p.name for p in repo.iterdir()] == [".digits.lock"]  # no model folder; the lock stays


def test_a_warmup_file_holding_other_bytes_is_never_replaced(store_uri, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    assert _export(store_uri, repo, "--precision", "fp16").exit_code == 0
    (warmup,) = (repo / "digits" / "warmup").iterdir()
    warmup.write_bytes(b"not the golden sample")
    result = _export(store_uri, repo, "--precision", "fp16", "--model-version", "2")
    assert_clean_error(result, 4, str(warmup), "other bytes than the golden sample")
    assert warmup.read_bytes() == b"not the golden sample"
    assert not (repo / "digits" / "2").exists()  # found before anything was written


@pytest.mark.parametrize("dim", [10**100, 2**63, 2**31, -2, True])
def test_a_manifest_whose_input_dims_no_config_can_hold_is_damaged(dim, fleet_build, tmp_path):
    """A manifest re-hashed after an edit (anyone who can write the store can) whose input shape holds a dim past
    what TensorRT takes (or no dim at all): refused when read, as a damaged manifest (exit 1), not an internal
    error of the config writer; nothing is written to the repository (issue 39, major 11)."""
    from compiler.core.files import hash_json

    store = tmp_path / "store"
    publish(fleet_build, str(store), "digits", "1.0.0")
    manifest = store / "releases" / "digits" / "1.0.0" / "manifest.json"
    data = json.loads(manifest.read_bytes())
    data["content"]["inputs"][0]["shape"][1] = dim
    data["content_sha256"] = hash_json(data["content"])
    manifest.chmod(0o644)
    manifest.write_text(json.dumps(data))
    repo = tmp_path / "models"
    repo.mkdir()
    result = _export(str(store), repo, "--precision", "fp16")
    assert_clean_error(result, 1, "manifest.json", "inputs")
    assert list(repo.iterdir()) == []


def test_the_model_repository_is_created_with_its_parents(fleet_build, tmp_path):
    """Issue 43, footgun 2: like build and calibrate, export makes the folder it writes (parents too); a refused
    export makes nothing."""
    store = str(tmp_path / "store")
    publish(fleet_build, store, "digits", "1.0.0")
    refused = _export(store, tmp_path / "refused" / "models", "--precision", "fp16", ref="digits@9.9.9")
    assert refused.exit_code == 2 and not (tmp_path / "refused").exists()
    repo = tmp_path / "serving" / "models"
    result = _export(store, repo, "--precision", "fp16")
    assert result.exit_code == 0, result.stderr
    assert (repo / "digits" / "config.pbtxt").is_file()
