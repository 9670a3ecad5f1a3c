"""What the engine tests share: a calibration of the digits CNN and the cold build of its matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.digits import run_calibrate
from tests.support.engines import matrix_args


@pytest.fixture(scope="package")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="package")
def int8_calibration(workspace) -> Path:
    out = workspace / "calibration-int8"
    result = run_calibrate(out, "--precision", "int8", "--json")
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="package")
def matrix(workspace, int8_calibration):
    """Two SKUs x fp32/fp16/int8 with the two profiles of profiles/digits.yaml, built cold."""
    out, cache = workspace / "engines", workspace / "cache"
    result = run_cli(*matrix_args(out, cache, int8_calibration))
    assert result.exit_code == 0, result.stderr
    return out, cache, json.loads(result.stdout)
