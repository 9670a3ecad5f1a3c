"""Output that said the wrong thing (issue 43, footgun 7), through the real CLI and a real folder store: an unchanged
publish counts the blobs already there, `compile ls`'s latest skips yanked versions and orders 1.10 above 1.9,
`inspect` says a cache hit was reused, and release-report.md's links open from the report's own folder."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.cli import REPO, run_cli


@pytest.fixture(scope="module")
def build(tmp_path_factory, digits_model, digits_profiles) -> Path:
    out = tmp_path_factory.mktemp("build") / "engines"
    made = run_cli("build", digits_model, "--profiles", digits_profiles, "--sku", "rtx-4090", "--precision", "fp32",
                   "--out", out)  # fmt: skip
    assert made.exit_code == 0, made.stderr
    return out


def _publish(build: Path, store: Path, version: str, *extra: str):
    result = run_cli("publish", build, "--name", "digits", "--version", version, "--store", store, *extra)
    assert result.exit_code == 0, result.stderr
    return result


def test_an_unchanged_publish_counts_the_blobs_already_there(build, tmp_path):
    first = json.loads(_publish(build, tmp_path / "store", "1.0.0", "--json").stdout)
    assert first["uploaded_blobs"] > 0
    again = " ".join(_publish(build, tmp_path / "store", "1.0.0").stdout.split())  # as wrapped to the terminal
    assert "already published with this content" in again
    assert f"0 blobs sent (0 B), {first['uploaded_blobs']} already there" in again  # said "0 already there"


def test_ls_latest_is_the_highest_version_not_yanked(build, tmp_path):
    store = tmp_path / "store"
    for version in ("1.9.0", "1.10.0"):
        _publish(build, store, version)

    def latest() -> tuple[str, str]:
        listed = run_cli("ls", "--store", store, "--json")
        row = next(line for line in run_cli("ls", "--store", store).stdout.splitlines() if "digits" in line)
        return json.loads(listed.stdout)["releases"][0]["latest"], row

    assert latest()[0] == "1.10.0"  # not 1.9.0, which sorts after it as text
    assert run_cli("yank", "digits@1.10.0", "--reason", "bad", "--store", store).exit_code == 0
    found, row = latest()
    assert found == "1.9.0" and "1.9.0" in row and "1.10.0" not in row
    assert run_cli("yank", "digits@1.9.0", "--reason", "bad", "--store", store).exit_code == 0
    found, row = latest()
    assert found is None and "all yanked" in row


def test_inspect_says_a_cache_hit_was_reused_not_parsed(digits_model, tmp_path):
    env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "cache")}
    lines = []
    for _ in range(2):
        result = run_cli("inspect", digits_model, env=env)
        assert result.exit_code == 0, result.stderr
        lines.append(next(line for line in result.stdout.splitlines() if line.startswith("TensorRT (")))
    assert re.search(r"fully supported, parsed in \d+\.\d\d s$", lines[0]), lines[0]
    assert re.search(r"reused from the local cache \(parsed in \d+\.\d\d s when it was made\)$", lines[1]), lines[1]


def test_the_release_reports_links_open_from_its_own_folder(tmp_path):
    (tmp_path / "pipelines").mkdir()
    pipeline = tmp_path / "pipelines" / "p.yaml"
    pipeline.write_text(
        "release: {name: digits, version: 1.0.0}\n"
        f"model: {REPO}/compiler/examples/digits_cnn.onnx\nprofiles: {REPO}/profiles/digits.yaml\n"
        "targets: {rtx-4090: [fp32], rtx-3090: [fp16]}\nstore: ../artifacts\n"
    )
    released = run_cli("release", "pipelines/p.yaml", cwd=tmp_path)
    assert released.exit_code == 0, released.stderr
    report = tmp_path / "release" / "digits-1.0.0" / "release-report.md"
    text = report.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert len(links) == 6
    for link in links:
        assert (report.parent / link).is_file(), link  # were relative to the working directory
        assert link == Path(link).as_posix() and ".." not in link.split("/"), link
    assert f"store `{tmp_path / 'artifacts'}`" in text  # not pipelines/../artifacts
