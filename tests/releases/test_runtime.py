"""Issue 34: every engine of a release names its runtime (family, build version, the versions that may load it);
``compile pull --tensorrt-version`` and ``select_engine`` pick by that rule; manifests of format 1 (published
before the runtime was recorded) still read, and publishing their build again is the same release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.files import hash_json
from compiler.core.runtimes import Runtime
from compiler.releases import pull, resolve, select_engine
from compiler.releases.publish import publish
from tests.support.cli import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def rtx_build(built_digits) -> Path:
    return built_digits(("rtx-4090",), ("fp32",))


def _installed_rtx() -> str:
    import importlib.metadata

    return importlib.metadata.version("tensorrt-rtx")


def test_a_tensorrt_rtx_engine_loads_only_with_the_release_that_built_it(rtx_build, tmp_path):
    store = str(tmp_path / "store")
    publish(rtx_build, store, "digits", "1.0.0")
    engine = resolve(store, "digits@1.0.0").manifest.content.engines[0]
    version = _installed_rtx()
    assert engine.runtime == Runtime(family="tensorrt-rtx", version=version)
    assert engine.runtime.loads_with == f"=={version}"
    assert engine.runtime.version == engine.plan_header["version"]  # what the plan's own header says
    major, minor, *_ = version.split(".")
    ok = pull(store, "digits@1.0.0", sku="rtx-4090", out=tmp_path / "a.plan", tensorrt_version=f"{major}.{minor}")
    assert ok.runtime.loads_with == f"=={version}"
    assert json.loads((tmp_path / "a.plan.json").read_text())["runtime"]["family"] == "tensorrt-rtx"
    later = ".".join([major, minor, *version.split(".")[2:-1], str(int(version.split(".")[-1]) + 1)])
    with pytest.raises(InvalidInput, match=rf"TensorRT {later}; it has: .*loads with =={version}"):
        pull(store, "digits@1.0.0", sku="rtx-4090", out=tmp_path / "b.plan", tensorrt_version=later)
    assert not (tmp_path / "b.plan").exists()
    bad = run_cli(
        "pull",
        "digits@1.0.0",
        "--store",
        store,
        "--sku",
        "rtx-4090",
        "--out",
        tmp_path / "c.plan",
        "--tensorrt-version",
        "10.x",
    )
    assert_clean_error(bad, 2, "--tensorrt-version", "'10.x' is not a TensorRT version")


@pytest.mark.parametrize(
    ("built", "compatible", "loads", "refuses"),
    [
        ("10.8.0.43", False, ["10.8.0.43", "10.8", "10"], ["10.8.0.44", "10.9", "11.0", "10.7"]),
        (
            "10.8.0.43",
            True,
            ["10.8.0.43", "10.8.1", "10.13.3.9", "10.9", "10"],
            ["10.7.9", "11.0.0.1", "9.3", "10.8.0.42"],
        ),
        ("1.7.1.116", False, ["1.7.1.116", "1.7"], ["1.7.1.117", "1.8.0.1", "2.0"]),
    ],
)
def test_the_version_rule(built, compatible, loads, refuses):
    family = "tensorrt-rtx" if built.startswith("1.") else "tensorrt"
    runtime = Runtime(family=family, version=built, version_compatible=compatible)
    assert runtime.loads_with == (f">={built},<11" if compatible else f"=={built}")
    assert [v for v in loads if runtime.loads(v)] == loads
    assert [v for v in refuses if runtime.loads(v)] == []


@pytest.mark.parametrize(
    "record",
    [
        {"family": "tensorrt-rtx", "version": "1.7.1.116", "version_compatible": True},  # RTX has no such plans
        {"family": "tensorrt", "version": "10.8.0.43", "loads_with": ">=10.8.0.43,<11"},  # claims more than it may
        {"family": "onnxruntime", "version": "1.20"},
        {"family": "tensorrt", "version": "10.8; rm -rf /"},
    ],
)
def test_a_runtime_record_that_contradicts_the_rule_is_refused(record):
    with pytest.raises(ValueError):
        Runtime.model_validate(record)


def _rewrite(store: str, change) -> Path:
    """Edit the published manifest as a publisher would have written it (content digest made to match)."""
    path = Path(store) / "releases" / "digits" / "1.0.0" / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    data["content_sha256"] = hash_json(data["content"])
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_manifest_of_format_1_still_reads_and_republishing_it_is_unchanged(rtx_build, tmp_path):
    store = str(tmp_path / "store")
    publish(rtx_build, store, "digits", "1.0.0")

    def to_format_1(data: dict) -> None:
        data["format_version"] = 1
        for engine in data["content"]["engines"]:
            del engine["runtime"]

    _rewrite(store, to_format_1)
    manifest = resolve(store, "digits@1.0.0").manifest
    assert manifest.format_version == 1
    assert manifest.content.engines[0].runtime.family == "tensorrt-rtx"  # derived as publish derives it
    assert select_engine(manifest, tensorrt_version=_installed_rtx()).sku == "rtx-4090"
    assert publish(rtx_build, store, "digits", "1.0.0").status == "unchanged"
    listed = run_cli("ls", "digits@1.0.0", "--store", store, "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout)["manifest"]["content"]["engines"][0]["runtime"]["loads_with"].startswith("==")


def test_a_manifest_claiming_a_runtime_its_plan_is_not_is_damaged(rtx_build, tmp_path):
    store = str(tmp_path / "store")
    publish(rtx_build, store, "digits", "1.0.0")

    def claim_datacenter(data: dict) -> None:
        engine = data["content"]["engines"][0]
        engine["backend"] = {"name": "tensorrt", "version": "10.13.3.9"}
        engine["runtime"] = {"family": "tensorrt", "version": "10.13.3.9"}

    _rewrite(store, claim_datacenter)
    with pytest.raises(CheckFailed, match="TensorRT-RTX plan's"):
        resolve(store, "digits@1.0.0")
    result = run_cli("pull", "digits@1.0.0", "--store", store, "--sku", "rtx-4090", "--out", tmp_path / "p.plan")
    assert_clean_error(result, 1, "manifest.json is damaged", "header is a TensorRT-RTX plan's")
    assert not (tmp_path / "p.plan").exists()


def test_publish_refuses_an_engine_json_whose_backend_is_not_its_plans(rtx_build, tmp_path):
    import shutil

    build = tmp_path / "build"
    shutil.copytree(rtx_build, build)
    record = build / "rtx-4090" / "fp32" / "engine.json"
    data = json.loads(record.read_text())
    data["backend"] = {"name": "tensorrt", "version": "10.13.3.9"}
    record.write_text(json.dumps(data))
    result = run_cli("publish", build, "--store", tmp_path / "store", "--name", "digits", "--version", "1.0.0")
    assert_clean_error(result, 2, "engine.json", "TensorRT-RTX plan's", "build it again")
    assert not (tmp_path / "store" / "releases").exists()
