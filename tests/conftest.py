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

from tests.support.cli import EXAMPLES, REPO

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
    return EXAMPLES / "digits_cnn.onnx"


@pytest.fixture(scope="session")
def digits_data() -> Path:
    return EXAMPLES / "digits.npz"


@pytest.fixture(scope="session")
def digits_profiles() -> Path:
    return REPO / "profiles" / "digits.yaml"


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
