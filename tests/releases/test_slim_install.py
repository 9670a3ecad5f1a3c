"""A slim consumer install: `pip install trt-compile` (no extra) pulls, verifies and lists releases without onnx,
onnxruntime or Polygraphy, from the folder store and from a registry; a command that needs them says which extra to
install (exit 3). The install is made for real, in a fresh venv, from a copy of this source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO, CliResult, assert_clean_error, run_cli
from tests.support.digits import DIGITS_MODEL, build_args
from tests.support.keys import write_keys

SOURCES = ("pyproject.toml", "README.md", "compiler", "calibration")


@pytest.fixture(scope="module")
def slim(tmp_path_factory) -> Path:
    """A venv with the base package only, installed from the registries with CI's pinned versions."""
    root = tmp_path_factory.mktemp("slim")
    (root / "src").mkdir()
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / "src" / name)
    subprocess.run([sys.executable, "-m", "venv", root / "venv"], check=True)
    subprocess.run(
        [
            root / "venv" / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            REPO / ".ci" / "constraints.txt",
            root / "src",
        ],
        check=True,
        timeout=1200,
    )
    return root / "venv"


def _slim_cli(venv: Path, *args, env=None) -> CliResult:
    done = subprocess.run(
        [venv / "bin" / "compile", *map(str, args)], capture_output=True, text=True, timeout=300, env=env
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def test_the_slim_install_has_none_of_the_build_packages(slim):
    script = "import importlib.util as u; print([m for m in ('onnx', 'onnxruntime', 'polygraphy') if u.find_spec(m)])"
    done = subprocess.run([slim / "bin" / "python", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", ["folder", "oci"])
def test_the_slim_install_pulls_a_verified_plan(slim, kind, request, tmp_path, built_digits):
    (tmp_path / "keys").mkdir()
    keys = write_keys(tmp_path / "keys")
    store = str(tmp_path / "store") if kind == "folder" else request.getfixturevalue("registry").uri()
    engines = built_digits()
    published = run_cli("publish", engines, "--name", "digits", "--version", "1.0.0", "--store", store,
                        "--sign-key", keys["p256"])  # fmt: skip
    assert published.exit_code == 0, published.stderr
    out = tmp_path / "digits.plan"
    pulled = _slim_cli(slim, "pull", "digits@1.0.0", "--sku", "rtx-4090", "--store", store, "--out", out,
                       "--verify-key", keys["p256.pub"])  # fmt: skip
    assert pulled.exit_code == 0, pulled.stderr
    assert out.read_bytes() == (engines / "rtx-4090" / "fp16" / "engine.plan").read_bytes()
    verified = _slim_cli(slim, "verify", "digits@1.0.0", "--store", store, "--key", keys["p256.pub"])
    assert verified.exit_code == 0, verified.stderr
    assert _slim_cli(slim, "ls", "--store", store).exit_code == 0


def test_a_command_that_needs_the_build_extra_names_it(slim, tmp_path):
    assert_clean_error(_slim_cli(slim, "inspect", DIGITS_MODEL), 3, "needs onnx", "trt-compile[rtx]")
    built = _slim_cli(slim, *build_args(tmp_path / "engines"))
    assert_clean_error(built, 3, "trt-compile[rtx]")
