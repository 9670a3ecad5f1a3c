"""Fixtures of the hostile-input suite, and its summary at the end of the pytest run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import generators
from tests.hostile.harness import TALLY, Sandbox, run
from tests.support.cli import run_cli
from tests.support.digits import build_args, run_calibrate


@pytest.fixture(scope="session")
def hostile_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every case's sandbox is made; a case that breaks the contract keeps its sandbox for a look."""
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="session")
def calibration_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid int8 calibration folder of the digits model, made once by `compile calibrate` (mutated copies of it
    are the calibration-folder cases)."""
    root = tmp_path_factory.mktemp("hostile-calibration")
    data = root / "data.npz"
    np.savez(data, **{generators.MODEL_INPUT: generators.digits_samples()})
    out = root / "calibration"
    result = run_calibrate(out, "--precision", "int8", "--json", data=data, cwd=root)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["files"].keys() >= {"model.onnx"}
    return out


@pytest.fixture(scope="session")
def normal_build_peak(tmp_path_factory: pytest.TempPathFactory) -> int | None:
    """A normal build under the suite's limits (it must pass, or the limits are wrong, not the code)."""
    root = tmp_path_factory.mktemp("hostile-normal")
    (root / "case").mkdir()
    box = Sandbox(root / "case")
    done = run(
        box,
        build_args(
            str(box.out),
            ("rtx-4090",),
            ("fp32", "fp16"),
            model=str(generators.DIGITS_MODEL),
            profiles=str(generators.DIGITS_PROFILES),
        ),
    )
    assert done.result is not None and done.result.exit_code == 0, done.result
    shutil.rmtree(root, ignore_errors=True)
    return done.peak_rss


def pytest_terminal_summary(terminalreporter) -> None:
    if not TALLY.cases:
        return
    write = terminalreporter.write_line
    terminalreporter.section("hostile inputs")
    families: dict[str, list[int]] = {}
    for test, count in TALLY.cases.items():
        family = test.split("[")[0]
        families.setdefault(family, [0, 0])[0] += count
    for found in TALLY.breaks:
        families.setdefault(found.test.split("[")[0], [0, 0])[1] += 1
    for test, count in TALLY.cases.items():
        broken = sum(1 for b in TALLY.breaks if b.test == test)
        write(f"{test}: {count} cases, {broken} broke the contract ({TALLY.seconds[test]:.1f} s)")
    total = sum(TALLY.cases.values())
    write(
        "per family: "
        + ", ".join(f"{name} {cases} cases / {broken} breaks" for name, (cases, broken) in families.items())
    )
    write(
        f"total: {total} generated cases, {len(TALLY.breaks)} broke the contract, {sum(TALLY.seconds.values()):.1f} s"
    )


@pytest.fixture(scope="session")
def store_build(built_digits) -> Path:
    """A build folder of the digits model (fp16 for rtx-3090 and rtx-4090) with the check.json `compile check`
    writes: what the publish cases damage copies of."""
    return built_digits(("rtx-3090", "rtx-4090"), ("fp16",), checked=True)


@pytest.fixture(scope="session")
def store_template(tmp_path_factory: pytest.TempPathFactory, store_build: Path) -> Path:
    """A local store holding digits@1.0.0 and digits@1.0.1 (the same build) with the channel stable at 1.0.0:
    what the store-contents cases damage copies of."""
    root = tmp_path_factory.mktemp("hostile-store")
    store = root / "store"
    for version in ("1.0.0", "1.0.1"):
        result = run_cli("publish", store_build, "--store", store, "--name", "digits", "--version", version, cwd=root)
        assert result.exit_code == 0, result.stderr
    result = run_cli("promote", "digits@1.0.0", "--channel", "stable", "--store", store, cwd=root)
    assert result.exit_code == 0, result.stderr
    return store
