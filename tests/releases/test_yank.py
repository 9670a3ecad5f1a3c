"""compile yank on every store backend: the mark is a record of its own (the manifest stays byte for byte);
pull, export and promote refuse a yanked version (exit 1, naming the reason) unless --allow-yanked; ls shows it."""

from __future__ import annotations

import json

from tests.stores.test_store import _publish
from tests.support.cli import assert_clean_error


def test_a_yanked_version_is_refused_and_allow_yanked_pulls_it(store, builds, tmp_path):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    assert _publish(store, builds["b"], "1.1.0").exit_code == 0
    before = store.manifest("digits", "1.0.0")
    yanked = store.cli("yank", "digits@1.0.0", "--reason", "calibrated on the wrong data", "--json")
    assert yanked.exit_code == 0, yanked.stderr
    assert json.loads(yanked.stdout)["status"] == "yanked"
    assert store.manifest("digits", "1.0.0") == before  # the manifest is not touched
    again = json.loads(store.cli("yank", "digits@1.0.0", "--reason", "other words", "--json").stdout)
    assert (again["status"], again["reason"]) == ("already", "calibrated on the wrong data")

    out = tmp_path / "digits.plan"
    refused = store.cli("pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out)
    assert_clean_error(refused, 1, "digits@1.0.0 is yanked (calibrated on the wrong data", "--allow-yanked")
    assert not out.exists()
    promote = store.cli("promote", "digits@1.0.0", "--channel", "stable")
    assert_clean_error(promote, 1, "is yanked (calibrated on the wrong data")
    export = store.cli("export", "triton", "digits@1.0.0", "--repo", tmp_path, "--triton-release", "25.01")
    assert_clean_error(export, 1, "is yanked (calibrated on the wrong data")
    assert list(tmp_path.glob("digits/*")) == []
    allowed = store.cli("pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out, "--allow-yanked")
    assert allowed.exit_code == 0, allowed.stderr and out.is_file()
    assert store.cli("pull", "digits@1.1.0", "--sku", "rtx-3090", "--out", out).exit_code == 0  # the others

    versions = json.loads(store.cli("ls", "digits", "--json").stdout)["versions"]
    assert {v["version"]: v["yanked"] for v in versions} == {"1.0.0": "calibrated on the wrong data", "1.1.0": None}
    assert "1.0.0 (yanked)" in store.cli("ls", "digits").stdout
    one = json.loads(store.cli("ls", "digits@1.0.0", "--json").stdout)
    assert one["yanked"]["reason"] == "calibrated on the wrong data"


def test_a_channel_on_a_yanked_version_is_refused_too(store, builds, tmp_path):
    assert _publish(store, builds["a"], "2.0.0").exit_code == 0
    assert store.cli("promote", "digits@2.0.0", "--channel", "stable").exit_code == 0
    assert store.cli("yank", "digits@2.0.0", "--reason", "regression").exit_code == 0
    refused = store.cli("pull", "digits@stable", "--sku", "rtx-3090", "--out", tmp_path / "p.plan")
    assert_clean_error(refused, 1, "digits@2.0.0 is yanked (regression")


def test_hostile_yank_inputs_are_one_error_line(store, builds, tmp_path):
    assert _publish(store, builds["a"], "3.0.0").exit_code == 0
    assert_clean_error(store.cli("yank", "digits@9.9.9", "--reason", "x"), 2, "digits@9.9.9: no such version")
    assert_clean_error(store.cli("yank", "digits@3.0.0", "--reason", "  "), 2, "--reason: say why")
    assert_clean_error(store.cli("yank", "digits@3.0.0", "--reason", "a\nerror: forged"), 2, "--reason: one line")
    assert_clean_error(store.cli("yank", "digits@3.0.0", "--reason", "x" * 501), 2, "--reason: one line")
    assert_clean_error(store.cli("yank", "../x@3.0.0", "--reason", "x"), 2, "release name")
    assert store.cli("promote", "digits@3.0.0", "--channel", "beta").exit_code == 0
    assert_clean_error(store.cli("yank", "digits@beta", "--reason", "x"), 2, "is the channel beta")
    assert store.cli("pull", "digits@3.0.0", "--sku", "rtx-3090", "--out", tmp_path / "p.plan").exit_code == 0
