"""`compile skus` and SKU names (issue 43, footgun 4), through the real CLI: the catalog is listed (a pip user has
no profiles/skus.yaml to read), names match in any case, an unknown one gets the closest names, a --skus file is
hostile input, and docs/skus.md's examples run as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from compiler.core.profiles import bundled_catalog_path, load_sku_catalog
from tests.cli.test_readme import DOCS, bash_blocks
from tests.support.cli import REPO, assert_clean_error, run_cli

EXTRA = 'skus:\n  rtx-pro-4500: {compute_capability: "12.0", backend: tensorrt-rtx, memory_gb: 96, description: Pro}\n'


def test_skus_lists_the_bundled_catalog_in_text_and_json(tmp_path):
    bundled = yaml.safe_load(bundled_catalog_path().read_text())["skus"]
    listed = run_cli("skus", "--json", cwd=tmp_path)
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["skus"]}
    assert list(rows) == list(bundled)
    assert rows["rtx-4090"] == {
        "name": "rtx-4090",
        "compute_capability": "8.9",
        "backend": "tensorrt-rtx",
        "precisions": ["fp32", "fp16", "int8", "fp8"],
        "memory_gb": 24.0,
        "architecture": "Ada",
        "platform": "x86_64",
        "tensorrt": None,
        "description": bundled["rtx-4090"]["description"],
        "source": "bundled",
    }
    assert "fp8" not in rows["a100"]["precisions"]  # 8.0: older than FP8's 8.9
    text = run_cli("skus", cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}).stdout
    assert all(name in text for name in bundled)
    assert "from" not in text.splitlines()[2]  # the source column only when a file added some


def test_sku_names_match_in_any_case_and_an_unknown_one_gets_the_closest(digits_model, digits_profiles, tmp_path):
    args = ("build", digits_model, "--profiles", digits_profiles, "--precision", "fp32")
    built = run_cli(*args, "--sku", "RTX-4090", "--out", tmp_path / "engines")
    assert built.exit_code == 0, built.stderr
    assert (tmp_path / "engines" / "rtx-4090" / "fp32" / "engine.plan").is_file()
    assert json.loads((tmp_path / "engines" / "build.json").read_text())["targets"][0]["sku"] == "rtx-4090"
    typo = run_cli(*args, "--sku", "rtx4090", "--out", tmp_path / "other")
    assert_clean_error(typo, 2, "unknown SKU 'rtx4090'; did you mean rtx-4090", "compile skus")
    assert not (tmp_path / "other").exists()
    nothing_close = run_cli(*args, "--sku", "zzz", "--out", tmp_path / "other")
    assert "did you mean" not in assert_clean_error(nothing_close, 2, "unknown SKU 'zzz'; known SKUs: a10")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"release: {{name: digits, version: 1.0.0}}\nmodel: {digits_model}\nprofiles: {digits_profiles}\n"
        "targets: {RTX-4090: [fp16], H100: [fp16]}\n"
    )
    plan = run_cli("plan", pipeline, "--format", "json")
    assert plan.exit_code == 0, plan.stderr
    assert [job["sku"] for job in json.loads(plan.stdout)["jobs"]] == ["rtx-4090", "h100"]
    pipeline.write_text(pipeline.read_text().replace("H100", "rtx-4090"))
    assert_clean_error(run_cli("plan", pipeline), 2, "line 4", "rtx-4090 listed more than once")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (EXTRA.replace("rtx-pro-4500", "RTX PRO"), "a SKU name is 1-64 of a-z 0-9"),
        (EXTRA.replace('"12.0"', "twelve"), "compute_capability"),
        (EXTRA.replace("tensorrt-rtx", "cuda"), "backend"),
        (EXTRA.replace("96", "-1"), "memory_gb"),
        (EXTRA.replace("description: Pro", "colour: red"), "unknown key"),
        (EXTRA.replace("Pro", "x" * 201), "description"),
        ("skus: {}\n", "skus"),
        ("- a\n", "mapping"),
        ("skus: [\n", "not valid YAML"),
    ],
)
def test_a_skus_file_is_hostile_input(content, fragment, tmp_path):
    extra = tmp_path / "skus.yaml"
    extra.write_text(content)
    assert_clean_error(run_cli("skus", "--skus", extra), 2, str(extra), fragment)


def test_a_skus_file_adds_its_entries_and_replaces_one_of_a_name(tmp_path):
    bundled = yaml.safe_load(bundled_catalog_path().read_text())["skus"]
    extra = tmp_path / "skus.yaml"
    smaller = {**bundled["l4"], "memory_gb": 12}
    extra.write_text(
        yaml.safe_dump({"skus": {**yaml.safe_load(EXTRA)["skus"], "h100": bundled["h100"], "l4": smaller}})
    )
    listed = run_cli("skus", "--skus", extra, "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["skus"]}
    assert list(rows) == [*bundled, "rtx-pro-4500"]
    assert {name: row["source"] for name, row in rows.items() if row["source"] != "bundled"} == {
        "rtx-pro-4500": str(extra),
        "l4": str(extra),
    }
    assert rows["l4"]["memory_gb"] == 12
    assert_clean_error(run_cli("skus", "--skus", tmp_path / "missing.yaml"), 2, "file not found")


def test_build_and_a_pipeline_take_the_skus_a_file_adds(digits_model, digits_profiles, tmp_path):
    extra = tmp_path / "my-skus.yaml"
    extra.write_text(EXTRA)
    args = ("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-pro-4500", "--precision", "fp32")
    assert_clean_error(run_cli(*args, "--out", tmp_path / "refused"), 2, "unknown SKU 'rtx-pro-4500'")
    built = run_cli(*args, "--skus", extra, "--out", tmp_path / "engines", "--json")
    assert built.exit_code == 0, built.stderr
    engine = json.loads((tmp_path / "engines" / "rtx-pro-4500" / "fp32" / "engine.json").read_text())
    assert engine["compute_capabilities"] == ["12.0"]
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"release: {{name: digits, version: 1.0.0}}\nmodel: {digits_model}\nprofiles: {digits_profiles}\n"
        "targets: {rtx-pro-4500: [fp32], rtx-4090: [fp32]}\nskus: my-skus.yaml\nstore: store\n"
    )
    released = run_cli("release", pipeline, "--work", tmp_path / "work", "--json")
    assert released.exit_code == 0, released.stderr
    listed = json.loads(run_cli("ls", "digits@1.0.0", "--store", tmp_path / "store", "--json").stdout)
    assert sorted(e["sku"] for e in listed["manifest"]["content"]["engines"]) == ["rtx-4090", "rtx-pro-4500"]


def test_the_skus_page_runs_as_written(tmp_path):
    """Every bash block of docs/skus.md, in order, in a fresh folder, with `compile` this checkout's."""
    blocks = bash_blocks((DOCS / "skus.md").read_text())
    assert blocks
    prelude = f'set -euo pipefail\ncompile() {{ "{sys.executable}" -m compiler "$@"; }}\n'
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for block in blocks:
        done = subprocess.run(["bash", "-c", prelude + "\n".join(block)], cwd=tmp_path, env=env, capture_output=True)
        assert done.returncode == 0, (block, done.stderr.decode())
    assert "rtx-pro-4500" in done.stdout.decode()


def test_only_sku_matches_the_catalog_name_in_any_case(tmp_path):
    example = REPO / "pipelines" / "example.yaml"
    done = run_cli("release", example, "--only-sku", "RTX-4090", "--dry-run", "--work", tmp_path / "work")
    assert done.exit_code == 0, done.stderr
    unknown = run_cli("release", example, "--only-sku", "RTX-4091", "--dry-run", "--work", tmp_path / "work")
    assert unknown.exit_code == 2 and "rtx-4091" in unknown.stderr


def test_the_catalog_knows_the_hosts_of_jetson_and_blackwell_datacenter_gpus(tmp_path):
    """Issue 43, footgun 4: Jetson Orin (8.7, aarch64) and B200/GB200 (10.0, TensorRT 10.8+) can be expressed, a
    datacenter build is refused on the wrong kind of host or TensorRT, and plan labels aarch64 jobs ARM64."""
    catalog = load_sku_catalog()
    orin, b200, gb200 = (catalog.skus[name] for name in ("jetson-agx-orin", "b200", "gb200"))
    assert (orin.compute_capability, orin.platform, orin.takes_fp8) == ("8.7", "aarch64", False)
    assert "aarch64 machines" in orin.host_problem("x86_64", "10.3.0")
    assert orin.host_problem("aarch64", "10.3.0") is None and orin.host_problem("arm64", "8.6.2") is None
    assert "needs TensorRT >=10.8, and 10.7.0.23 is installed" in b200.host_problem("x86_64", "10.7.0.23")
    assert b200.host_problem("x86_64", "10.8.0.43") is None and b200.host_problem("x86_64", "11.0") is None
    assert "aarch64" in gb200.host_problem("x86_64", "10.13")
    pipeline = "release: {name: x, version: 1.0.0}\nmodel: m.onnx\nprofiles: p.yaml\nstore: s\n"
    pipeline += "targets: {jetson-agx-orin: [fp16], b200: [fp16], rtx-pro-6000: [fp16]}\n"
    (tmp_path / "p.yaml").write_text(pipeline)
    planned = run_cli("plan", tmp_path / "p.yaml", "--format", "github-matrix")
    assert planned.exit_code == 0, planned.stderr
    labels = {job["sku"]: job["runs-on"] for job in json.loads(planned.stdout)["include"]}
    assert labels == {
        "jetson-agx-orin": ["self-hosted", "linux", "ARM64", "gpu", "jetson-agx-orin"],
        "b200": ["self-hosted", "linux", "gpu", "b200"],
        "rtx-pro-6000": ["ubuntu-24.04"],
    }
