"""Never a silent skip (issue 30): the model an engine was built from is found by its digest wherever it is (the
calibration folder given now, the build cache, the path recorded); when it is nowhere, accuracy fails unless
``--allow-skip accuracy``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build, run_calibrate

SKU = "rtx-4090"


def _accuracy(result) -> dict:
    engine = next(e for e in json.loads(result.stdout)["engines"] if e["precision"] == "int8")
    return next(c for c in engine["checks"] if c["name"] == "accuracy")


@pytest.fixture(scope="module")
def readme_order(tmp_path_factory):
    """The README in its own order: a release calibrates and builds first (into its own folder), then the
    walkthrough calibrates again into `calibrated` and builds from it: a cache hit whose build.log names the
    release's calibration folder, whose calibration.json is not this build's."""
    root = tmp_path_factory.mktemp("readme-order")
    env = {**os.environ, "COMPILE_CACHE_DIR": str(root / "cache")}
    folders = {}
    for name, extra in (("release-calibration", ()), ("calibrated", ("--min-cosine", "0.99", "--min-top1", "0.99"))):
        done = run_calibrate(root / name, *extra, env=env)
        assert done.exit_code == 0, done.stderr
        folders[name] = root / name
    for name in ("release-calibration", "calibrated"):
        built = run_build(
            root / f"engines-{name}", (SKU,), ("int8",), "--calibration", folders[name], "--json", env=env
        )
        assert built.exit_code == 0, built.stderr
    hit = json.loads((root / "engines-calibrated" / SKU / "int8" / "engine.json").read_text())
    assert hit["cache_hit"] is True
    assert str(folders["release-calibration"]) in (root / "engines-calibrated" / SKU / "int8" / "build.log").read_text()
    return root, env, folders


def test_a_cache_hit_built_from_another_calibration_folder_is_measured(readme_order, digits_data):
    root, env, _ = readme_order
    checked = run_cli("check", root / "engines-calibrated", "--data", digits_data, "--no-lint", "--json", env=env)
    assert checked.exit_code == 0, checked.stderr
    accuracy = _accuracy(checked)
    assert accuracy["status"] == "ok" and accuracy["figures"]["logits"]["cosine_mean"] > 0.999, accuracy


def test_calibration_folders_gone_still_measured_from_the_cache_else_failed_never_skipped(
    readme_order, digits_data, tmp_path
):
    root, env, folders = readme_order
    engines = tmp_path / "engines"
    shutil.copytree(root / "engines-calibrated", engines)
    aside = tmp_path / "aside"
    aside.mkdir()
    for name, folder in folders.items():
        shutil.move(folder, aside / name)
    try:
        measured = run_cli("check", engines, "--data", digits_data, "--no-lint", "--json", env=env)
        assert measured.exit_code == 0, measured.stderr
        assert _accuracy(measured)["status"] == "ok"  # from the cache's copy, by digest

        cache = Path(env["COMPILE_CACHE_DIR"])
        shutil.move(cache / "models", aside / "models")
        blind = run_cli("check", engines, "--data", digits_data, "--no-lint", "--json", env=env)
        line = assert_clean_error(blind, 1, "accuracy", "not measured")
        assert "--allow-skip accuracy" in line and "--calibration DIR" in line
        report = json.loads(blind.stdout)
        assert report["passed"] is False and _accuracy(blind)["status"] == "failed"
        assert "passed" not in line

        allowed = run_cli(
            "check", engines, "--data", digits_data, "--no-lint", "--allow-skip", "accuracy", "--json", env=env
        )
        assert allowed.exit_code == 0, allowed.stderr
        skipped = _accuracy(allowed)
        assert skipped["status"] == "skipped" and "(--allow-skip accuracy)" in skipped["summary"]

        # the calibration folder given now is found by digest, wherever it was moved
        given = run_cli(
            "check",
            engines,
            "--data",
            digits_data,
            "--no-lint",
            "--calibration",
            aside / "calibrated",
            "--json",
            env=env,
        )
        assert given.exit_code == 0, given.stderr
        accuracy = _accuracy(given)
        assert accuracy["status"] == "ok", accuracy
    finally:
        for name, folder in folders.items():
            shutil.move(aside / name, folder)
        if (aside / "models").exists():
            shutil.move(aside / "models", Path(env["COMPILE_CACHE_DIR"]) / "models")


def test_bad_allow_skip_and_calibration_values_are_usage_errors(readme_order, digits_data, tmp_path):
    root, env, _ = readme_order
    wrong = run_cli("check", root / "engines-calibrated", "--allow-skip", "fusions", env=env)
    assert_clean_error(wrong, 2, "--allow-skip fusions", "accuracy")
    missing = run_cli(
        "check", root / "engines-calibrated", "--data", digits_data, "--calibration", tmp_path / "nowhere", env=env
    )
    assert_clean_error(missing, 2, "--calibration", "not a folder")


def test_check_finds_the_built_model_in_the_build_cache_given_by_cache_dir(digits_data, tmp_path):
    """A build made with --cache-dir whose cache then moved (a CI cache restored elsewhere): the path build.log
    recorded is gone, so check measures accuracy only when told where the cache is now."""
    built = run_build(tmp_path / "engines", (SKU,), ("fp16",), "--cache-dir", tmp_path / "cache")
    assert built.exit_code == 0, built.stderr
    shutil.move(tmp_path / "cache", tmp_path / "restored")
    env = {**os.environ, "COMPILE_CACHE_DIR": str(tmp_path / "elsewhere")}

    def accuracy(*extra: str | Path) -> dict:
        result = run_cli("check", tmp_path / "engines", "--data", digits_data, "--no-reuse", "--json", *extra, env=env)
        engine = json.loads(result.stdout)["engines"][0]
        return next(c for c in engine["checks"] if c["name"] == "accuracy")

    assert accuracy()["summary"].startswith("not measured: the fp16 model the engine was built from is not at hand")
    measured = accuracy("--cache-dir", tmp_path / "restored")
    assert measured["status"] == "ok" and measured["summary"].startswith("fp16 vs FP32 on 64 samples")
