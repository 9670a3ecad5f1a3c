"""Shared fixtures: the bundled example, a private build cache, and the real S3 server and OCI registry.
Helpers live in tests/support/."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from tests.support.digits import DIGITS_DATA, DIGITS_MODEL, DIGITS_PROFILES, BuiltDigits

settings.register_profile("no-database", database=None)
settings.load_profile("no-database")  # hypothesis would keep an example database in .hypothesis/ of the checkout
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="compile-tests-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)  # and its caches, which it writes while the test modules import
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)


@pytest.fixture(scope="session", autouse=True)
def private_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test (and every CLI it runs) uses a build cache of the session's own, never the user's
    ~/.cache/compile; a test that needs an empty cache passes --cache-dir of its own."""
    cache = tmp_path_factory.mktemp("build-cache")
    os.environ["COMPILE_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def digits_model() -> Path:
    return DIGITS_MODEL


@pytest.fixture(scope="session")
def digits_data() -> Path:
    return DIGITS_DATA


@pytest.fixture(scope="session")
def digits_profiles() -> Path:
    return DIGITS_PROFILES


@pytest.fixture(scope="session")
def built_digits(tmp_path_factory: pytest.TempPathFactory) -> BuiltDigits:
    """``built_digits(skus, precisions, checked=..., data=...)``: the digits example's build folder for those
    arguments, built once in the session and shared (tests/support/digits.py); copy it before changing it."""
    return BuiltDigits(tmp_path_factory.mktemp("built-digits"))


@pytest.fixture(scope="session")
def outlier(tmp_path_factory) -> tuple[Path, Path, Path]:
    """An MLP whose one activation channel is ~1000x the others (tests/fixtures/make_outlier_mlp.py): model, data,
    profiles. Plain per-tensor INT8 collapses on it."""
    from tests.fixtures import make_outlier_mlp

    folder = tmp_path_factory.mktemp("outlier")
    model, data = make_outlier_mlp.save(folder / "outlier.onnx")
    return model, data, make_outlier_mlp.profiles(folder / "profiles.yaml")


@pytest.fixture(scope="session")
def s3():
    """One SeaweedFS server for the session (each test takes a bucket or prefix of its own)."""
    from tests.support.s3server import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def registry():
    """One OCI registry (CNCF Distribution) for the session; each store takes a repository of its own."""
    from tests.support.registry import registry_server

    with registry_server() as server:
        yield server


@pytest.fixture(scope="session")
def released(tmp_path_factory) -> Path:
    """The bundled example released into a folder store (``../artifacts``): its work folder (the report tests)."""
    from tests.pipeline.test_release import _pipeline, _release

    tmp = tmp_path_factory.mktemp("report")
    result = _release(_pipeline(tmp), tmp / "work")
    assert result.exit_code == 0, result.stderr
    return tmp / "work"


@pytest.fixture(scope="session")
def failed_release(tmp_path_factory) -> Path:
    """A release of the example whose accuracy gate fails (nothing published): its work folder."""
    tmp = tmp_path_factory.mktemp("report-failed")
    import yaml

    from tests.pipeline.test_release import EXAMPLE, _pipeline, _release

    check = yaml.safe_load(EXAMPLE.read_text())["check"]
    check["data"] = str(EXAMPLE.parent / check["data"])
    result = _release(_pipeline(tmp, check={**check, "min_cosine": {"": 0.9999999}}), tmp / "work")
    assert result.exit_code == 1, result.stderr
    return tmp / "work"
