"""compile build under stop signals, crashing and killed builders, and a model changed mid-build."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import compiler.core.files
import compiler.engines
from compiler.core.errors import Interrupted, stop_signals_held
from tests.support.cli import CliResult, assert_clean_error
from tests.support.digits import run_build
from tests.support.engines import SKUS
from tests.support.synthetic import resnet


def _start_slow_build(
    tmp_path: Path, jobs: int, cache: bool = False
) -> tuple[subprocess.Popen, Path, list[str], list[int]]:
    """`compile build` of ResNet-50 (batch up to 32) for ``jobs`` SKUs in its own session, returned once every
    target's builder runs, with the pids of the command and all its descendants (its fork server and builders)."""
    model = resnet(tmp_path / "resnet50.onnx", depth=50)
    profiles = tmp_path / "p.yaml"
    profiles.write_text(
        "profiles:\n  - name: p\n    shapes:\n"
        "      image: {min: [1, 3, 224, 224], opt: [8, 3, 224, 224], max: [32, 3, 224, 224]}\n"
    )
    out, skus = tmp_path / "out", list(SKUS)[:jobs]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "compiler",
            "build",
            model,
            "--profiles",
            profiles,
            *[a for sku in skus for a in ("--sku", sku)],
            "--precision",
            "fp32",
            "--out",
            out,
            *([] if cache else ["--no-cache"]),
            "--cache-dir",
            tmp_path / "cache",
            "--jobs",
            str(jobs),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not all(any((out / sku).glob(".fp32-*")) for sku in skus) or len(_builders_of(process.pid)) < jobs:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    time.sleep(0.1)
    servers = _children_of(process.pid)
    return process, out, skus, [process.pid, *servers, *_builders_of(process.pid)]


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, parent pid, ...; [] for a process gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _children_of(parent: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _stat(int(p))[1:2] == [str(parent)]]


def _builders_of(command: int) -> list[int]:
    """The builders a command started: children of its fork server, the command's child."""
    return [builder for server in _children_of(command) for builder in _children_of(server)]


def _still_running(pids: list[int]) -> list[int]:
    """Those of ``pids`` alive and not zombies (a pid reused since is a false alarm the tests can afford)."""
    return [pid for pid in pids if _stat(pid)[:1] not in ([], ["Z"])]


def _outliving(pids: list[int], seconds: float = 30) -> list[int]:
    """Those of ``pids`` still running ``seconds`` on: a fork server ends as soon as it reads that its command's
    pipe closed, and builders asked to stop end at their monitor's next look."""
    deadline = time.monotonic() + seconds
    while _still_running(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _still_running(pids)


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(
    ("send", "code", "line"),
    [
        (lambda process: os.killpg(process.pid, signal.SIGINT), 130, "error: interrupted"),  # a terminal's Ctrl-C
        (lambda process: process.send_signal(signal.SIGTERM), 143, "error: terminated"),  # a CI job cancelled
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_signal_cancels_the_build_and_leaves_no_plan(tmp_path, jobs, send, code, line):
    """A real signal while TensorRT builds: the builders stop through their progress monitors, no plan and no
    staging folder stays, build.json says cancelled, and with --jobs 2 no worker outlives the command."""
    process, out, skus, family = _start_slow_build(tmp_path, jobs)
    send(process)
    stdout, stderr = process.communicate(timeout=120)
    assert assert_clean_error(CliResult(process.returncode, stdout, stderr), code) == line
    for sku in skus:
        assert list((out / sku).iterdir()) == []
    statuses = json.loads((out / "build.json").read_text())["targets"]
    assert [(t["sku"], t["status"], t["errors"]) for t in statuses] == [
        (sku, "cancelled", ["build cancelled"]) for sku in skus
    ]
    assert _outliving(family) == []


@pytest.mark.parametrize("signals", [1, 2], ids=["one signal, the grace runs out", "a second signal"])
def test_a_builder_that_does_not_stop_is_killed_and_its_target_cancelled(tmp_path, signals):
    """A builder that ignores its monitor (here: frozen with SIGSTOP) is killed 10 s after the stop, or at once on a
    second signal; its target is cancelled (not failed), build.json is written and nothing is left behind."""
    process, out, [sku], family = _start_slow_build(tmp_path, 1)
    [builder] = _builders_of(process.pid)
    os.kill(builder, signal.SIGSTOP)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    if signals == 2:
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - started
    assert assert_clean_error(CliResult(process.returncode, stdout, stderr), 130) == "error: interrupted"
    assert (took < 5) if signals == 2 else (9 < took < 20), took
    [status] = json.loads((out / "build.json").read_text())["targets"]
    assert (status["status"], status["errors"]) == ("cancelled", ["build cancelled"])
    assert list((out / sku).iterdir()) == []
    assert _outliving(family) == []


def test_a_worker_killed_outright_fails_its_targets_and_the_run_still_reports(tmp_path):
    """What the OOM killer does to one --jobs worker: the run ends with exit 1 and a build.json naming the failed
    targets instead of an internal error and no report; no process building into OUT outlives the command."""
    process, out, skus, family = _start_slow_build(tmp_path, 2)
    workers = _builders_of(process.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)
    assert_clean_error(
        CliResult(process.returncode, stdout, stderr),
        1,
        "builds failed",
        "the TensorRT builder process died of SIGKILL",
    )
    statuses = json.loads((out / "build.json").read_text())["targets"]
    assert [t["sku"] for t in statuses] == skus
    assert any(t["status"] == "failed" and "builder process died of SIGKILL" in t["errors"][0] for t in statuses)
    for target in statuses:  # a target is either failed (no plan) or whole
        plan = out / target["sku"] / "fp32" / "engine.plan"
        assert plan.is_file() == (target["status"] == "ok")
    assert _outliving(family) == []


@pytest.mark.parametrize("crash", [signal.SIGSEGV, signal.SIGABRT], ids=["SIGSEGV", "SIGABRT"])
def test_a_builder_that_crashes_fails_its_target_with_jobs_1_too(tmp_path, crash):
    """TensorRT-RTX's builder dies of SIGSEGV on some graphs. Every build runs in a child process, --jobs 1
    included, so the crash is one failed target naming the signal: the run goes on, writes build.json and exits 1,
    and leaves no staging folder (it used to die with 139, print nothing and leave the staging folder)."""
    process, out, [sku], _ = _start_slow_build(tmp_path, 1)
    [builder] = _builders_of(process.pid)
    os.kill(builder, crash)
    stdout, stderr = process.communicate(timeout=120)
    line = assert_clean_error(
        CliResult(process.returncode, stdout, stderr),
        1,
        "1 of 1 builds failed",
        f"the TensorRT builder process died of {crash.name}",
    )
    [status] = json.loads((out / "build.json").read_text())["targets"]
    assert status["status"] == "failed" and crash.name in status["errors"][0] and status["errors"][0] in line
    assert sorted(p.name for p in (out / sku).iterdir()) == ["fp32"]  # no staging folder left
    assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
    assert crash.name in (out / sku / "fp32" / "build.log").read_text()


def test_a_stop_signal_during_a_held_block_arrives_when_it_ends():
    """Where a folder is made and its removal set up, Ctrl-C and SIGTERM wait: raised between the two they would
    leave the folder behind (seen once in CI as an empty calibrate-* folder in $TMPDIR)."""

    def stop(signum, frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    steps = []
    try:
        with pytest.raises(Interrupted):
            with stop_signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                steps.append("the held block ran to its end")
            steps.append("after the block")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert steps == ["the held block ran to its end"]


def test_a_stop_signal_while_a_file_is_written_atomically_waits_until_it_is_in_place(tmp_path, monkeypatch):
    """A stop raised right after write_atomic creates its hidden temporary file (before the ``try`` that would
    remove it) would leave that file behind: the write finishes, then the stop arrives."""

    def stop(signum, frame):
        raise Interrupted(signum)

    def open_then_stop(*args, **kwargs):
        handle = open(*args, **kwargs)  # noqa: SIM115 - write_atomic closes it
        os.kill(os.getpid(), signal.SIGTERM)
        return handle

    monkeypatch.setattr(compiler.core.files, "open", open_then_stop, raising=False)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Interrupted):
            compiler.core.files.write_atomic(tmp_path / "engine.json", b'{"whole": true}')
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [p.name for p in tmp_path.iterdir()] == ["engine.json"]
    assert (tmp_path / "engine.json").read_bytes() == b'{"whole": true}'


def test_workers_of_a_killed_command_stop_instead_of_building_on(tmp_path):
    """SIGKILL cannot be handled: the parent dies at once, and its worker processes notice through their
    progress monitors and stop, leaving no plan put in place after the command has ended."""
    process, out, skus, family = _start_slow_build(tmp_path, 2)
    process.kill()
    process.wait(timeout=10)
    assert _outliving(family) == []
    for sku in skus:
        assert not (out / sku / "fp32").exists()
        assert list((out / sku).iterdir()) == []


def test_the_staging_folder_of_a_killed_run_is_swept_by_the_next_one(tmp_path):
    """A run killed outright with its builder (SIGKILL to the process group, as a container's end does) leaves its
    staging folder behind; the next build of that target removes it, but not one that a live run holds, nor one
    made too recently for its run to have locked it."""
    process, out, [sku], family = _start_slow_build(tmp_path, 1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    assert _outliving(family, 10) == []  # the builder, killed with it, is reaped by init
    [killed] = (out / sku).glob(".fp32-*")
    held, young = out / sku / f".fp32-{'a' * 12}", out / sku / f".fp32-{'b' * 12}"
    held.mkdir()
    young.mkdir()
    long_ago = time.time() - 120
    for folder in (killed, held):
        os.utime(folder, (long_ago, long_ago))
    handle = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a run still building there holds it
        result = run_build(out, (sku,), ("fp32",), "--cache-dir", tmp_path / "cache", "--json")
    finally:
        os.close(handle)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (out / sku).iterdir()) == sorted(["fp32", held.name, young.name])


@pytest.mark.parametrize("same_bytes", [True, False], ids=["rewritten-same-bytes", "changed-bytes"])
def test_a_model_changed_during_its_build_fails_the_target_instead_of_caching_a_mislabelled_plan(tmp_path, same_bytes):
    """The model file is replaced (new inode) while TensorRT builds: with other bytes the plan may be of a model
    other than the digest recorded, so the target fails and nothing is cached; the same bytes are no change."""
    process, out, [sku], _ = _start_slow_build(tmp_path, 1, cache=True)
    model = tmp_path / "resnet50.onnx"
    data = bytearray(model.read_bytes())
    if not same_bytes:
        data[len(data) // 2 : len(data) // 2 + 8] = bytes(8)  # inside the weights: still a valid model
    (tmp_path / "next.onnx").write_bytes(data)
    os.replace(tmp_path / "next.onnx", model)
    stdout, stderr = process.communicate(timeout=300)
    engines = list((tmp_path / "cache").glob("engines/*/*/engine.plan"))
    if same_bytes:
        assert process.returncode == 0, stderr
        [plan] = engines
        assert plan.read_bytes() == (out / sku / "fp32" / "engine.plan").read_bytes()
    else:
        assert_clean_error(
            CliResult(process.returncode, stdout, stderr),
            1,
            "1 of 1 builds failed",
            f"{model} changed while its engine was built",
            "run compile build again",
        )
        assert sorted(p.name for p in (out / sku / "fp32").iterdir()) == ["build.log"]
        assert engines == []
