"""Every network store operation ends within $COMPILE_STORE_DEADLINE (issue 39, class 8): a registry or S3 endpoint
that accepts connections and never answers, or trickles its answer, is one error line and exit 3 within a few
seconds of the deadline for a store, and a warning (the work goes on locally) for a remote cache."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build
from tests.support.unanswering import unanswering_server

DEADLINE = 2
BOUND = 20
"""Seconds a command may take beyond its own work: the deadline, the interpreter's start, a loaded machine."""


def _uri(kind: str, port: int) -> tuple[str, dict[str, str]]:
    if kind == "oci":
        return f"oci+http://127.0.0.1:{port}/ml", {}
    endpoint = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    return "s3://models/prod", endpoint


def _env(tmp_path, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "COMPILE_STORE_DEADLINE": str(DEADLINE), "COMPILE_CACHE_DIR": str(tmp_path / "c"), **extra}


@pytest.mark.parametrize("mode", ["silent", "trickle"])
@pytest.mark.parametrize("kind", ["oci", "s3"])
def test_a_store_that_never_answers_is_exit_3_at_the_deadline(tmp_path, kind, mode):
    out = tmp_path / "pulled" / "digits.plan"
    out.parent.mkdir()
    with unanswering_server(mode) as port:
        uri, extra = _uri(kind, port)
        started = time.monotonic()
        done = run_cli(
            "pull", "digits@1.0.0", "--store", uri, "--sku", "rtx-4090", "--out", out, env=_env(tmp_path, extra),
            timeout=60,
        )  # fmt: skip
        seconds = time.monotonic() - started
    assert_clean_error(done, 3, f"store {uri}", f"{DEADLINE} s deadline", "COMPILE_STORE_DEADLINE")
    assert seconds < DEADLINE + BOUND, seconds
    assert list(out.parent.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("mode", ["silent", "trickle"])
@pytest.mark.parametrize("kind", ["oci", "s3"])
def test_a_remote_cache_that_never_answers_costs_one_deadline(tmp_path, kind, mode):
    with unanswering_server(mode) as port:
        uri, extra = _uri(kind, port)
        started = time.monotonic()
        done = run_build(tmp_path / "b", ("rtx-4090",), ("fp16",), "--remote-cache", uri, env=_env(tmp_path, extra),
                         timeout=90)  # fmt: skip
        seconds = time.monotonic() - started
    assert done.exit_code == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings and all(f"{DEADLINE} s deadline" in line for line in warnings), done.stderr
    assert seconds < DEADLINE + BOUND + 10, seconds  # the build's own seconds besides
    assert (tmp_path / "b" / "rtx-4090" / "fp16" / "engine.plan").is_file()


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_deadline_that_is_no_number_of_seconds_is_exit_2(tmp_path, value):
    done = run_cli(
        "ls", "--store", "oci+http://127.0.0.1:9/ml", env={**os.environ, "COMPILE_STORE_DEADLINE": value}, timeout=60
    )
    assert_clean_error(done, 2, "COMPILE_STORE_DEADLINE")
