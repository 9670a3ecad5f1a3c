"""SIGTERM during calibration's long phases (a larger dataset than the bundled one) ends the run within two
seconds with exit 143, leaving no temporary folder and no output that looks finished or is half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import CliResult, assert_clean_error

PROMPT = 2.0
"""Seconds from SIGTERM to the process's end."""


@pytest.fixture(scope="module")
def larger_data(tmp_path_factory, digits_data) -> Path:
    """The digits 30 times over (53,910 samples): calibration takes seconds, not a fraction of one."""
    images = np.load(digits_data, allow_pickle=False)["image"]
    path = tmp_path_factory.mktemp("larger") / "digits-x30.npz"
    np.savez_compressed(path, image=np.tile(images, (30, 1, 1, 1)))
    return path


def _started(tmp_path: Path, model: Path, data: Path, method: str):
    work, out = tmp_path / "tmp", tmp_path / "out"
    work.mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "compiler",
            "calibrate",
            str(model),
            "--data",
            str(data),
            "--out",
            str(out),
            "--method",
            method,
        ],
        env={**os.environ, "TMPDIR": str(work)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, work, out


def _wait_for(process, condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the phase never came"
        time.sleep(0.002)


def _stop_and_check(process, work: Path, out: Path) -> None:
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert_clean_error(CliResult(process.returncode, stdout, stderr), 143, "error: terminated")
    assert took < PROMPT, took
    assert not list(work.glob("calibrate-*"))
    assert not list(out.rglob("*")) if out.exists() else True, sorted(out.rglob("*"))  # no model, whole or cut


def _collecting(work: Path) -> bool:
    """onnxruntime runs the FP32 model over the calibration samples: its calibrator's model (percentile's, with
    each tensor's tail appended: calibration.tails) is written."""
    return bool(list(work.glob("calibrate-*/augmented.onnx")) or list(work.glob("calibrate-*/tails.onnx")))


def _phase_condition(phase: str, work: Path, out: Path, started: float):
    if phase == "collecting":
        return lambda: _collecting(work) and time.monotonic() - started > 0
    if phase == "late-collecting":
        return lambda: _collecting(work) and time.monotonic() - started > 3
    return lambda: any(out.glob(".calibrate-*/model.onnx")) or (out / "model.onnx").exists()  # held-out


@pytest.mark.parametrize(
    ("method", "phase"),
    [
        ("minmax", "collecting"),
        ("entropy", "late-collecting"),
        ("percentile", "late-collecting"),
        ("minmax", "held-out"),
    ],
)
def test_sigterm_is_honoured_promptly(tmp_path, digits_model, larger_data, method, phase):
    process, work, out = _started(tmp_path, digits_model, larger_data, method)
    try:
        _wait_for(process, _phase_condition(phase, work, out, time.monotonic()))
        _stop_and_check(process, work, out)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
