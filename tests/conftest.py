"""Shared test helpers: the bundled example model and running the real CLI in a subprocess."""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

settings.register_profile("no-database", database=None)
settings.load_profile("no-database")  # hypothesis would keep an example database in .hypothesis/ of the checkout
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="compile-tests-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)  # and its caches, which it writes while the test modules import
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "compiler" / "examples"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 900, preexec_fn: Callable[[], None] | None = None) -> CliResult:
    """Run `compile ARGS...` the way a user does: a separate process, real exit code and streams
    (``preexec_fn`` sets limits in that process)."""
    done = subprocess.run(
        [sys.executable, "-m", "compiler", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, preexec_fn=preexec_fn,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def files_of_at_most(kib: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child a real write failure (EFBIG past RLIMIT_FSIZE), as a full disk would."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib << 10, kib << 10))

    return limit


def assert_clean_error(result: CliResult, exit_code: int, *fragments: str) -> str:
    """One `error:` line naming the problem, the documented exit code, and no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


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
def s3():
    """One SeaweedFS server for the session (each test takes a bucket or prefix of its own)."""
    from tests.s3server import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def registry():
    """One OCI registry (CNCF Distribution) for the session; each store takes a repository of its own."""
    from tests.registry import registry_server

    with registry_server() as server:
        yield server
