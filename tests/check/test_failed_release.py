"""A failed check travels with the release (issue 30): published only with --allow-failed, recorded in the
manifest, promote refused unless --allow-failed, pull and export warn naming the failed checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import assert_clean_error, run_cli

SKU = "rtx-4090"


@pytest.fixture(scope="module")
def failed_release(tmp_path_factory, built_digits, digits_data) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("failed-release")
    engines, store = root / "engines", root / "store"
    store.mkdir()
    shutil.copytree(built_digits((SKU,), ("fp16",)), engines)  # its check writes a failed check.json there
    checked = run_cli("check", engines, "--data", digits_data, "--no-lint", "--min-cosine", "0.99999999")
    assert_clean_error(checked, 1, "accuracy")
    refused = run_cli("publish", engines, "--name", "digits", "--version", "1.0.0", "--store", store)
    assert_clean_error(refused, 1, "not publishable", "the check failed", "--allow-failed")
    published = run_cli(
        "publish", engines, "--name", "digits", "--version", "1.0.0", "--store", store, "--allow-failed"
    )
    assert published.exit_code == 0, published.stderr
    return engines, store


def test_the_manifest_names_the_failed_checks(failed_release):
    _, store = failed_release
    [manifest] = store.rglob("digits/1.0.0/manifest.json")
    failed = json.loads(manifest.read_text())["failed"]
    assert failed and all(f.startswith(f"{SKU}/fp16 accuracy: ") for f in failed), failed
    assert "below --min-cosine 0.99999999" in failed[0]


def test_promote_of_a_failed_check_release_is_refused_unless_allowed(failed_release):
    _, store = failed_release
    refused = run_cli("promote", "digits@1.0.0", "--channel", "stable", "--store", store)
    line = assert_clean_error(
        refused, 1, "digits@1.0.0", "not promoted to stable", f"{SKU}/fp16 accuracy", "--allow-failed"
    )
    assert "below --min-cosine" in line
    assert run_cli("ls", "digits", "--store", store, "--json").stdout.count('"stable"') == 0
    allowed = run_cli("promote", "digits@1.0.0", "--channel", "stable", "--store", store, "--allow-failed")
    assert allowed.exit_code == 0, allowed.stderr


def test_pull_and_export_warn_naming_the_failed_checks(failed_release, tmp_path):
    _, store = failed_release
    pulled = run_cli(
        "pull", "digits@1.0.0", "--sku", SKU, "--out", tmp_path / "digits.plan", "--store", store, "--json"
    )
    assert pulled.exit_code == 0, pulled.stderr
    assert f"warning: digits@1.0.0 was published with a failure: {SKU}/fp16 accuracy" in pulled.stderr
    assert json.loads(pulled.stdout)["warnings"]  # --json: stdout stays one document, the warning in it too
    repo = tmp_path / "repo"
    repo.mkdir()
    exported = run_cli("export", "rtx", "digits@1.0.0", "--out", repo, "--store", store)
    assert exported.exit_code == 0, exported.stderr
    assert f"warning: digits@1.0.0 was published with a failure: {SKU}/fp16 accuracy" in exported.stderr


def test_a_clean_release_promotes_and_pulls_without_warnings(failed_release, digits_data, tmp_path):
    engines, store = failed_release
    checked = run_cli("check", engines, "--data", digits_data, "--no-lint")
    assert checked.exit_code == 0, checked.stderr
    published = run_cli("publish", engines, "--name", "digits", "--version", "1.0.1", "--store", store)
    assert published.exit_code == 0, published.stderr
    promoted = run_cli("promote", "digits@1.0.1", "--channel", "stable", "--store", store)
    assert promoted.exit_code == 0, promoted.stderr
    pulled = run_cli("pull", "digits@stable", "--sku", SKU, "--out", tmp_path / "digits.plan", "--store", store)
    assert pulled.exit_code == 0 and "warning" not in pulled.stderr, pulled.stderr
