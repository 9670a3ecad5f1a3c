"""The releases the report tests look at, made once per session: the bundled example, and the example with an
accuracy gate it fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.pipeline.test_release import EXAMPLE, _pipeline, _release


@pytest.fixture(scope="session")
def released(tmp_path_factory) -> Path:
    """The bundled example released into a folder store: its work folder."""
    tmp = tmp_path_factory.mktemp("report")
    result = _release(_pipeline(tmp), tmp / "work")
    assert result.exit_code == 0, result.stderr
    return tmp / "work"


@pytest.fixture(scope="session")
def failed(tmp_path_factory) -> Path:
    """A release of the example whose accuracy gate fails (nothing published): its work folder."""
    tmp = tmp_path_factory.mktemp("report-failed")
    check = yaml.safe_load(EXAMPLE.read_text())["check"]
    check["data"] = str(EXAMPLE.parent / check["data"])
    result = _release(_pipeline(tmp, check={**check, "min_cosine": {"": 0.9999999}}), tmp / "work")
    assert result.exit_code == 1, result.stderr
    return tmp / "work"
