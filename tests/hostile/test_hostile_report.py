"""Hostile inputs of `compile report` and `compile diff` (issue 44): records in a work folder or a store are read as
any input is, one `error:` line and the documented exit code, nothing written where a page would go; what a
record says reaches the page as text, never as markup or script."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import assert_clean_error, run_cli


def _copy(released: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(released, work)
    (work / "release-report.html").unlink()
    return work


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"not json at all", "check.json"),
        (b"[" * 100_000 + b"]" * 100_000, "check.json"),
        (json.dumps({"format_version": 1, "passed": "yes"}).encode(), "check.json"),
        (json.dumps({"format_version": 99}).encode(), "check.json"),
    ],
    ids=["garbage", "deep", "wrong-types", "future-format"],
)
def test_a_damaged_check_record_is_refused_and_no_page_written(released, tmp_path, content, fragment):
    work = _copy(released, tmp_path)
    (work / "builds" / "rtx-4090" / "check.json").write_bytes(content)
    result = run_cli("report", work)
    assert_clean_error(result, 2, fragment)
    assert not (work / "release-report.html").exists()
    assert_clean_error(run_cli("diff", released, work), 2, fragment)


def test_what_a_record_says_is_shown_as_text_never_as_markup(released, tmp_path):
    work = _copy(released, tmp_path)
    check = work / "builds" / "rtx-4090" / "check.json"
    record = json.loads(check.read_text())
    record["model_checks"][0]["summary"] = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    check.write_text(json.dumps(record))
    result = run_cli("report", work)
    assert result.exit_code == 0, result.stderr
    page = (work / "release-report.html").read_text()
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_tampered_check_report_in_the_store_is_refused(released, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(released.parent / "artifacts", store)
    manifest = json.loads((store / "releases" / "digits" / "1.0.0" / "manifest.json").read_text())
    blob = store / "blobs" / "sha256" / manifest["check_reports"][0]["sha256"]
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes().replace(b'"passed": true', b'"passed": fals'))
    result = run_cli("report", "digits@1.0.0", "--store", store, "--out", tmp_path / "page.html")
    assert_clean_error(result, 1, manifest["check_reports"][0]["sha256"])
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("option", ["--out", "--explorer"])
def test_an_output_path_under_a_file_is_refused(released, tmp_path, option):
    (tmp_path / "a-file").write_text("not a folder\n")
    result = run_cli("report", released, option, tmp_path / "a-file" / "x")
    assert_clean_error(result, 2, option)
    assert (tmp_path / "a-file").read_text() == "not a folder\n"
