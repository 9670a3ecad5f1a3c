"""Re-releasing what is already published (issue 41): an unchanged pipeline run again from a fresh work folder is
`unchanged` (what a release hashes leaves out wall-clock seconds and the paths a calibration was made at); a fresh
runner whose rebuilt plans differ only in bytes (TensorRT builds are not bit-identical) is `rebuilt`, exit 0, and
the published plans stay; anything else that differs is still a conflict (exit 4)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from compiler.releases import resolve
from tests.pipeline.test_release import _pipeline, _release
from tests.support.cli import assert_clean_error, run_cli


def test_an_unchanged_pipeline_released_again_from_a_fresh_work_folder_is_unchanged(tmp_path):
    pipeline = _pipeline(tmp_path)
    first = _release(pipeline, tmp_path / "work-a")
    assert first.exit_code == 0, first.stderr
    again = _release(pipeline, tmp_path / "work-b")  # another checkout's folder: other paths, other timings
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["published"]["status"] == "unchanged"


def _rebuilt(build: Path, out: Path) -> Path:
    """The build folder as a runner with an empty cache makes it again: the same inputs, other plan bytes."""
    shutil.copytree(build, out)
    engine_dir = next(out.glob("*/*/engine.plan")).parent
    plan = engine_dir / "engine.plan"
    plan.write_bytes(plan.read_bytes() + b"\0" * 16)
    record = json.loads((engine_dir / "engine.json").read_text())
    record["sha256"], record["size_bytes"] = hashlib.sha256(plan.read_bytes()).hexdigest(), plan.stat().st_size
    (engine_dir / "engine.json").write_text(json.dumps(record))
    return out


def test_plans_rebuilt_from_the_same_inputs_keep_the_published_ones(built_digits, tmp_path):
    build = built_digits(("rtx-4090",), ("fp16",))
    store = tmp_path / "store"
    assert run_cli("publish", build, "--store", store, "--name", "digits", "--version", "1.0.0").exit_code == 0
    published = resolve(str(store), "digits@1.0.0").manifest.content.engines[0].plan
    again = run_cli("publish", _rebuilt(build, tmp_path / "rebuilt"), "--store", store, "--name", "digits",
                    "--version", "1.0.0", "--json")  # fmt: skip
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "rebuilt"
    assert resolve(str(store), "digits@1.0.0").manifest.content.engines[0].plan == published
    shown = run_cli("publish", tmp_path / "rebuilt", "--store", store, "--name", "digits", "--version", "1.0.0")
    assert "already published from these inputs" in shown.stdout


def test_other_inputs_under_a_published_version_are_still_a_conflict(built_digits, tmp_path):
    store = tmp_path / "store"
    fp16 = built_digits(("rtx-4090",), ("fp16",))
    assert run_cli("publish", fp16, "--store", store, "--name", "digits", "--version", "1.0.0").exit_code == 0
    fp32 = built_digits(("rtx-4090",), ("fp32",))
    refused = run_cli("publish", fp32, "--store", store, "--name", "digits", "--version", "1.0.0")
    assert_clean_error(refused, 4, "already published", "with other content")
