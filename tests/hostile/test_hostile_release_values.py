"""Hostile values a manifest or engine.json holds, racing exports, pipeline YAML, and what killed writers leave
behind, through the real CLI (issue 29's major and minor defects outside the registry's answers)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.core.files import STALE_PARTIAL_SECONDS, hash_json
from tests.support.cli import REPO, assert_clean_error, run_cli
from tests.support.digits import run_build
from tests.support.serving import datacenter_copy

NAME = "digits"
TRITON = ("--triton-release", "25.10")
"""The Triton release served (its TensorRT 10.11 loads the stand-in plans)."""


@pytest.fixture(scope="module")
def builds(built_digits) -> dict[str, Path]:
    """Two builds of other content (so their Triton configs differ): fp16 and fp32 for rtx-4090."""
    return {precision: built_digits(("rtx-4090",), (precision,)) for precision in ("fp16", "fp32")}


@pytest.fixture
def store(builds, tmp_path) -> Path:
    """A local store with digits@1.0.0 (fp16) and digits@2.0.0 (fp32), as datacenter TensorRT stand-ins (what
    Triton serves; tests/support/serving.py)."""
    root = tmp_path / "store"
    for version, precision in (("1.0.0", "fp16"), ("2.0.0", "fp32")):
        folder = datacenter_copy(builds[precision], tmp_path / f"datacenter-{precision}")
        done = run_cli("publish", folder, "--store", root, "--name", NAME, "--version", version)
        assert done.exit_code == 0, done.stderr
    return root


def _rewrite_manifest(store: Path, version: str, change) -> None:
    path = store / "releases" / NAME / version / "manifest.json"
    manifest = json.loads(path.read_bytes())
    change(manifest["content"])
    manifest["content_sha256"] = hash_json(manifest["content"])  # re-signed: only the value's check can tell
    path.chmod(0o644)
    path.write_text(json.dumps(manifest))


def _age(path: Path) -> None:
    old = time.time() - STALE_PARTIAL_SECONDS - 60
    os.utime(path, (old, old), follow_symlinks=False)


def test_a_size_of_ten_to_the_4000_is_a_damaged_manifest(store):
    _rewrite_manifest(store, "1.0.0", lambda c: c["engines"][0]["plan"].update(size_bytes=10**4000))
    for args in (["ls", NAME], ["ls", f"{NAME}@1.0.0"]):
        assert_clean_error(run_cli(*args, "--store", store), 1, "size_bytes", "damaged")
    assert run_cli("ls", f"{NAME}@2.0.0", "--store", store).exit_code == 0  # the other release still reads


def test_a_plan_whose_header_disagrees_with_engine_json_is_refused(builds, tmp_path):
    build = tmp_path / "build"
    shutil.copytree(builds["fp16"], build)
    record_path = build / "rtx-4090" / "fp16" / "engine.json"
    record = json.loads(record_path.read_bytes())
    assert record["compute_capabilities"] == ["8.9"]
    record["compute_capabilities"] = ["8.0"]  # an A100 pull would get an RTX 4090 plan
    record_path.write_text(json.dumps(record))
    result = run_cli("publish", build, "--store", tmp_path / "store", "--name", NAME, "--version", "1.0.0")
    assert_clean_error(result, 2, "header says compute capabilities 8.9", "engine.json 8.0")
    assert not (tmp_path / "store" / "releases").exists()


def test_racing_exports_of_two_releases_into_one_model_never_mix(store, tmp_path):
    """Each round: two exports of releases with other configs into one model at once. One writes, the other is a
    conflict (exit 4), and the config names exactly the plans of the version folder that was written."""
    for round_ in range(6):
        repo = tmp_path / f"repo-{round_}"
        repo.mkdir()
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "compiler",
                    "export",
                    "triton",
                    f"{NAME}@{version}",
                    "--store",
                    str(store),
                    "--repo",
                    str(repo),
                    "--model-name",
                    "m",
                    "--model-version",
                    str(number),
                    "--no-cache",
                    *TRITON,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            for number, version in ((1, "1.0.0"), (2, "2.0.0"))
        ]
        outcomes = [(p.wait(120), p.stderr.read()) for p in processes]
        for p in processes:
            p.stdout.close()
            p.stderr.close()
        assert sorted(code for code, _ in outcomes) == [0, 4], outcomes
        written = next(index for index, (code, _) in enumerate(outcomes) if code == 0) + 1
        assert sorted(p.name for p in (repo / "m").iterdir() if not p.name.startswith(".")) == [
            str(written),
            "config.pbtxt",
        ]
        config = (repo / "m" / "config.pbtxt").read_text()
        assert ("fp16" if written == 1 else "fp32") in config
        plans = sorted(p.name for p in (repo / "m" / str(written)).iterdir())
        assert all(plan in config for plan in plans)


def test_an_export_lock_that_is_a_link_or_fifo_is_refused_and_never_followed(store, tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    (repo / ".m.lock").symlink_to(outside / "created")
    result = run_cli(
        "export", "triton", f"{NAME}@1.0.0", "--store", store, "--repo", repo, "--model-name", "m", *TRITON
    )
    assert_clean_error(result, 2, ".m.lock", "symbolic link")
    assert not (outside / "created").exists()
    (repo / ".m.lock").unlink()
    os.mkfifo(repo / ".m.lock")
    result = run_cli(
        "export", "triton", f"{NAME}@1.0.0", "--store", store, "--repo", repo, "--model-name", "m", *TRITON, timeout=60
    )
    assert_clean_error(result, 2, ".m.lock", "FIFO")


def test_what_killed_writers_left_is_swept_and_fresh_work_is_not(builds, store, tmp_path):
    blobs = store / "blobs" / "sha256"
    old, fresh = blobs / f".{'1' * 64}.4242.abcd.partial", blobs / f".{'2' * 64}.4243.abcd.partial"
    for path in (old, fresh):
        path.write_bytes(b"half a plan")
    _age(old)
    out = tmp_path / "pulled" / "digits.plan"
    out.parent.mkdir()
    old_pull = out.with_name(".digits.plan.0123abcd.partial")
    old_pull.write_bytes(b"half")
    _age(old_pull)
    repo = tmp_path / "repo"
    (repo / "m" / ".1.4244.abcd.partial").mkdir(parents=True)
    (repo / "m" / ".1.4244.abcd.partial" / "rtx-4090-fp16.plan").write_bytes(b"half")
    _age(repo / "m" / ".1.4244.abcd.partial")
    assert run_cli("publish", builds["fp16"], "--store", store, "--name", NAME, "--version", "1.0.1").exit_code == 0
    assert not old.exists() and fresh.exists()
    assert run_cli("pull", f"{NAME}@1.0.0", "--sku", "rtx-4090", "--store", store, "--out", out).exit_code == 0
    assert not old_pull.exists()
    assert (
        run_cli(
            "export", "triton", f"{NAME}@1.0.0", "--store", store, "--repo", repo, "--model-name", "m", *TRITON
        ).exit_code
        == 0
    )
    assert sorted(p.name for p in (repo / "m").iterdir()) == ["1", "config.pbtxt"]


def test_a_channel_keeps_its_latest_moves_only(store, monkeypatch):
    from compiler.releases import channels

    monkeypatch.setattr(channels, "MAX_HISTORY", 3)
    for version in ("1.0.0", "2.0.0") * 3:
        channels.promote(str(store), f"{NAME}@{version}", "stable")
    record = json.loads((store / "channels" / NAME / "stable").read_bytes())
    assert [move["version"] for move in record["history"]] == ["2.0.0", "1.0.0", "2.0.0"]


def test_a_channel_grown_past_what_readers_take_is_repaired_by_promote(store, tmp_path):
    channel = store / "channels" / NAME / "stable"
    assert run_cli("promote", f"{NAME}@1.0.0", "--channel", "stable", "--store", store).exit_code == 0
    with open(channel, "r+b") as handle:  # sparse: 65 MiB of a record no reader takes
        handle.truncate(65 << 20)
    assert_clean_error(
        run_cli("promote", f"{NAME}@2.0.0", "--channel", "stable", "--store", store),
        1,
        "channels/digits/stable",
        "--repair",
    )
    repaired = run_cli("promote", f"{NAME}@2.0.0", "--channel", "stable", "--store", store, "--repair", "--json")
    assert repaired.exit_code == 0, repaired.stderr
    assert json.loads(repaired.stdout)["status"] == "repaired"
    record = json.loads(channel.read_bytes())
    assert (record["version"], len(record["history"])) == ("2.0.0", 1)
    out = tmp_path / "digits.plan"
    assert run_cli("pull", f"{NAME}@stable", "--sku", "rtx-4090", "--store", store, "--out", out).exit_code == 0


def _pipeline(tmp_path: Path, targets: str, version: str = '"1.0.0"', head: str = "") -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"{head}release: {{name: digits, version: {version}}}\nmodel: {REPO}/compiler/examples/"
        f"digits_cnn.onnx\nprofiles: {REPO}/profiles/digits.yaml\ntargets:\n{targets}\n"
    )
    return path


@pytest.mark.parametrize(
    "targets, fragment",
    [
        ("  rtx-4090: [fp16, fp16]", "fp16 listed more than once"),
        ("  rtx-4090: {precisions: [fp16], backend: bogus}", "unknown backend 'bogus'"),
    ],
)
def test_pipeline_targets_that_could_never_release_are_refused(tmp_path, targets, fragment):
    path = _pipeline(tmp_path, targets)
    for args in (["plan", path], ["release", path, "--dry-run"]):
        assert_clean_error(run_cli(*args), 2, fragment)


@pytest.mark.parametrize("written", ["1.10", "010", "0x1F", "12:30", "true", "[1]", "{a: 1}", "null"])
def test_a_pipeline_version_yaml_does_not_read_as_text_is_refused(tmp_path, written):
    result = run_cli("plan", _pipeline(tmp_path, "  rtx-4090: [fp16]", written))
    assert_clean_error(result, 2, "release.version", "quote the version")


def test_a_yaml_alias_bomb_is_refused_quickly_in_one_short_line(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    started = time.monotonic()
    result = run_cli("plan", _pipeline(tmp_path, "  rtx-4090: [fp16]", "*a8", "\n".join(lines) + "\n"))
    line = assert_clean_error(result, 2, "aliases expand")
    assert len(line) < 300 and time.monotonic() - started < 20
    cyclic = _pipeline(tmp_path, "  rtx-4090: [fp16]", "*a", "a: &a [*a]\n")
    assert_clean_error(run_cli("plan", cyclic), 2, "aliases expand")


def test_pulled_and_built_plans_share_no_inode_with_the_caches(builds, store, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "COMPILE_CACHE_DIR": str(cache)}
    outs = [tmp_path / f"b{i}" for i in range(2)]
    for out in outs:
        assert run_build(out, env=env).exit_code == 0
    plans = [out / "rtx-4090" / "fp16" / "engine.plan" for out in outs]
    assert all(os.stat(plan).st_nlink == 1 for plan in plans)
    assert hashlib.sha256(plans[0].read_bytes()).digest() == hashlib.sha256(plans[1].read_bytes()).digest()
