"""A re-release that changed nothing (issue 45): every stage answers from its stat-keyed memo, so the run imports
none of the libraries that compute (onnx, numpy, onnxruntime, TensorRT, Polygraphy, matplotlib); and no memo
outlives what it stands for: data rewritten in place, a damaged calibration folder, a deleted check.json or memo
entries that are not ours each make the stage do its real work again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.pipeline.test_release import EXAMPLE, _pipeline, _release

HEAVY = ("onnx", "numpy", "onnxruntime", "tensorrt_rtx", "tensorrt_rtx_bindings", "polygraphy", "matplotlib")
MEMOS = ("inspect-reports", "calibration-memos", "check-memos", "model-signatures", "tensorrt-rtx-capabilities")


def _imported(pipeline: Path, work: Path) -> tuple[dict, set[str]]:
    """The release's report and the top-level modules it imported (python -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "compiler", "release", str(pipeline), "--work", str(work), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m[1].split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", done.stderr, re.M)}
    return json.loads(done.stdout), names


def _details(report: dict) -> dict[str, str]:
    return {s["stage"]: s["detail"] for s in report["stages"]}


@pytest.fixture
def own_data(tmp_path: Path) -> Path:
    """The example's pipeline with its calibration data copied where the test may rewrite it."""
    source = yaml.safe_load(EXAMPLE.read_text())["calibration"]
    data = tmp_path / "calibration.npz"
    shutil.copyfile(EXAMPLE.parent / source["data"], data)
    return _pipeline(tmp_path, calibration={**source, "data": str(data)})


def test_a_re_release_that_changed_nothing_imports_no_library_that_computes(own_data: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert _release(own_data, work).exit_code == 0
    report, imported = _imported(own_data, work)
    assert imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    details = _details(report)
    assert details["inspect"].endswith("from the local cache") and details["calibrate"].endswith("reused")
    assert "6 from the cache" in details["build"] and "3 of 3 folders' check.json reused" in details["check"]
    assert details["publish"].startswith("unchanged")
    for memo in MEMOS:
        assert any((Path(os.environ["COMPILE_CACHE_DIR"]) / memo).glob("*.json")), memo


def test_data_rewritten_in_place_is_calibrated_and_checked_again(own_data: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert _release(own_data, work).exit_code == 0
    data = tmp_path / "calibration.npz"
    with np.load(data, allow_pickle=False) as arrays:
        fewer = {name: arrays[name][: len(arrays[name]) - 8] for name in arrays.files}
    np.savez(data, **fewer)  # the same path, other samples
    next_version = tmp_path / "next.yaml"
    spec = yaml.safe_load(own_data.read_text())
    next_version.write_text(yaml.safe_dump({**spec, "release": {**spec["release"], "version": "1.0.1"}}))
    again = _release(next_version, work)
    assert again.exit_code == 0, again.stderr
    details = _details(json.loads(again.stdout))
    assert details["calibrate"].endswith("calibrated") and "3 of 3" not in details["check"]


def test_a_damaged_calibration_or_a_lost_check_record_is_made_again(own_data: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert _release(own_data, work).exit_code == 0
    with (work / "calibration" / "int8" / "model.onnx").open("ab") as handle:
        handle.write(b"\0")  # the folder no longer holds what its record says
    (work / "builds" / "rtx-4090" / "check.json").unlink()
    report, imported = _imported(own_data, work)
    details = _details(report)
    assert details["calibrate"].endswith("calibrated")
    assert "3 of 3" not in details["check"]
    assert "onnxruntime" in imported  # the real work ran


DAMAGES = ("empty", "not-json", "other-key", "huge", "fifo", "folder")


def _damage(entry: Path, damage: str) -> None:
    entry.unlink()
    if damage == "fifo":
        os.mkfifo(entry)
    elif damage == "folder":
        entry.mkdir()
    elif damage == "huge":  # past any entry's limit, sparse: no disk is spent on it
        with entry.open("wb") as handle:
            handle.truncate(65 << 20)
    else:
        entry.write_bytes({"empty": b"", "not-json": b"{" * 1000, "other-key": b'{"key": "0", "value": 1}'}[damage])


def test_memo_entries_that_are_not_ours_are_no_memo(own_data: Path, tmp_path: Path) -> None:
    """Every memo entry replaced by nothing, not JSON, an entry of another key, more than any entry holds, a FIFO
    (must not block) or a folder, one damage after the other: each release answers by each stage's content key,
    as before any memo, and changes nothing. The run has a cache of its own: every entry in it is this release's."""
    cache = tmp_path / "cache"
    env = {**os.environ, "COMPILE_CACHE_DIR": str(cache)}
    work = tmp_path / "work"
    assert _release(own_data, work, env=env).exit_code == 0
    for damage in DAMAGES:
        entries = [entry for memo in MEMOS for entry in (cache / memo).glob("*.json")]
        assert len(entries) >= len(MEMOS), damage
        for entry in entries:
            _damage(entry, damage)
        again = _release(own_data, work, env=env)
        assert again.exit_code == 0, (damage, again.stderr)
        report = json.loads(again.stdout)
        assert report["published"]["status"] == "unchanged", damage
        assert all(e["cache_hit"] for e in report["engines"]), damage
        assert _details(report)["calibrate"].endswith("reused"), damage  # by the folder's content key
        for entry in entries:
            if entry.is_dir():
                entry.rmdir()  # a folder in its place costs only that memo: cleared for the next damage
