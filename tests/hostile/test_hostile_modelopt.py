"""A hostile `$COMPILE_MODELOPT_PYTHON` and what ModelOpt cannot do: `calibrate --quantizer modelopt` says one
`error:` line (exit 3 naming the variable; exit 2 for options ModelOpt lacks), no traceback, before any output."""

from __future__ import annotations

import os
import sys

import pytest

from compiler.core.modelopt import ENV
from tests.support.cli import assert_clean_error, run_cli


def _script(path, text: str, mode: int = 0o755):
    path.write_text(text)
    path.chmod(mode)
    return str(path)


INTERPRETERS = {
    "unset": lambda tmp: None,
    "empty": lambda tmp: "",
    "blank": lambda tmp: "   ",
    "missing": lambda tmp: str(tmp / "no" / "python"),
    "a folder": lambda tmp: str(tmp),
    "not executable": lambda tmp: _script(tmp / "python", "#!/bin/sh\nexit 0\n", 0o644),
    "fails": lambda tmp: "/bin/false",
    "no modelopt": lambda tmp: sys.executable,  # ours: onnxruntime, not ModelOpt
    "prints a list": lambda tmp: _script(tmp / "python", "#!/bin/sh\necho '[1, 2]'\n"),
    "prints junk": lambda tmp: _script(tmp / "python", "#!/bin/sh\nprintf '\\033[2J{not json'\n"),
    "dies of a signal": lambda tmp: _script(tmp / "python", "#!/bin/sh\nkill -SEGV $$\n"),
}


@pytest.mark.parametrize("case", list(INTERPRETERS))
def test_a_bad_modelopt_interpreter_is_exit_3_naming_the_variable(tmp_path, digits_model, digits_data, case):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    value = INTERPRETERS[case](tmp_path)
    if value is not None:
        env[ENV] = value
    out = tmp_path / "out"
    done = run_cli("calibrate", digits_model, "--data", digits_data, "--quantizer", "modelopt", "--out", out,
                   env=env, timeout=300)
    line = assert_clean_error(done, 3, f"${ENV}", "--quantizer onnxruntime")
    assert "\x1b" not in line
    assert not out.exists()


@pytest.mark.parametrize(("args", "named"), [
    (["--method", "percentile"], "--method percentile"),
    (["--fallback", "auto"], "--fallback auto"),
    (["--quantizer", "tensorrt"], "--quantizer tensorrt"),
    (["--quantizer", ""], "--quantizer"),
])
def test_what_modelopt_cannot_do_is_refused_before_any_work(tmp_path, digits_model, digits_data, args, named):
    out = tmp_path / "out"
    done = run_cli("calibrate", digits_model, "--data", digits_data, "--quantizer", "modelopt", *args, "--out", out,
                   env={**os.environ, ENV: "/no/such/python"}, timeout=120)
    assert_clean_error(done, 2, named)
    assert not out.exists()


def test_doctor_says_why_modelopt_is_not_usable(tmp_path):
    done = run_cli("doctor", "--json", env={**os.environ, ENV: str(tmp_path / "none")})
    assert done.exit_code == 0, done.stderr
    assert '"modelopt": "not usable: $COMPILE_MODELOPT_PYTHON=' in done.stdout
