"""A hostile `$COMPILE_MODELOPT_PYTHON` and what ModelOpt cannot do: `calibrate --quantizer modelopt` says one
`error:` line (exit 3 naming the variable; exit 2 for options ModelOpt lacks), no traceback, before any output."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.core.modelopt import ENV
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import calibrate_args, run_calibrate


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
def test_a_bad_modelopt_interpreter_is_exit_3_naming_the_variable(tmp_path, case):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    value = INTERPRETERS[case](tmp_path)
    if value is not None:
        env[ENV] = value
    out = tmp_path / "out"
    done = run_calibrate(out, "--quantizer", "modelopt", env=env, timeout=300)
    line = assert_clean_error(done, 3, f"${ENV}", "--quantizer onnxruntime")
    assert "\x1b" not in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--method", "percentile"], "--method percentile"),
        (["--fallback", "auto"], "--fallback auto"),
        (["--quantizer", "tensorrt"], "--quantizer tensorrt"),
        (["--quantizer", ""], "--quantizer"),
    ],
)
def test_what_modelopt_cannot_do_is_refused_before_any_work(tmp_path, args, named):
    out = tmp_path / "out"
    done = run_calibrate(out, "--quantizer", "modelopt", *args, env={**os.environ, ENV: "/no/such/python"}, timeout=120)
    assert_clean_error(done, 2, named)
    assert not out.exists()


def test_doctor_says_why_modelopt_is_not_usable(tmp_path):
    done = run_cli("doctor", "--json", env={**os.environ, ENV: str(tmp_path / "none")})
    assert done.exit_code == 0, done.stderr
    assert '"modelopt": "not usable: $COMPILE_MODELOPT_PYTHON=' in done.stdout


def test_an_interpreter_that_writes_escapes_to_stderr_is_named_in_one_printable_line(tmp_path):
    python = _script(tmp_path / "python", "#!/bin/sh\nprintf 'boom\\033]0;title\\007\\033[2J' >&2\nexit 1\n")
    done = run_calibrate(tmp_path / "out", "--quantizer", "modelopt", env={**os.environ, ENV: python}, timeout=120)
    line = assert_clean_error(done, 3, f"${ENV}", "boom")
    assert "\x1b" not in line and "\x07" not in line


def test_a_modelopt_whose_import_breaks_in_the_quantizer_is_exit_3(tmp_path):
    """The metadata says ModelOpt is there (the quick check calibrate makes), but importing it fails (a broken cupy
    or torch): the quantizer's ImportError is an environment problem, not a failed calibration."""
    versions = (
        '{"modelopt": "0.47.0", "modelopt_onnxruntime": "1.24.4", "modelopt_onnx": "1.21.0", '
        '"modelopt_torch": "2.13.0"}'
    )
    python = _script(
        tmp_path / "python",
        f"#!/bin/sh\nif [ \"$1\" = -c ]; then echo '{versions}'; exit 0; fi\n"
        "echo \"ModuleNotFoundError: No module named 'cupy'\" >&2\nexit 1\n",
    )
    done = run_calibrate(tmp_path / "out", "--quantizer", "modelopt", env={**os.environ, ENV: python}, timeout=300)
    assert_clean_error(done, 3, f"${ENV}", "cupy", "--quantizer onnxruntime")
    assert not (tmp_path / "out" / "calibration.json").exists()


MEASURE = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "compiler", *sys.argv[1:]], capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10)
"""


@pytest.mark.parametrize("stage", ["probe", "quantizer"])
def test_an_interpreter_that_prints_400_mb_costs_megabytes_not_gigabytes(tmp_path, stage):
    """Issue 39, class 10: the command's peak RSS (its children's largest, read in a process of its own) stays far
    below the 400 MB the interpreter prints (1.2 GB before: the whole output was kept, decoded)."""
    versions = '{"modelopt": "1", "modelopt_onnxruntime": "1", "modelopt_onnx": "1", "modelopt_torch": "1"}'
    probe = f"if [ \"$1\" = -c ]; then echo '{versions}'; exit 0; fi\n" if stage == "quantizer" else ""
    python = _script(tmp_path / "python", f"#!/bin/sh\n{probe}head -c 400000000 /dev/zero | tr '\\0' x\nexit 1\n")
    args = calibrate_args(tmp_path / "out", "--quantizer", "modelopt")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *map(str, args)], env={**os.environ, ENV: python}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert int(done.stdout) < 300 << 20, int(done.stdout) >> 20
