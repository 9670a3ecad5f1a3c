"""A real OCI registry for the tests: Debian's ``docker-registry`` (CNCF Distribution) on a free local port.

Each registry keeps its blobs in a temporary folder and speaks plain HTTP on 127.0.0.1, so the tests reach it as
``oci+http://127.0.0.1:PORT/<repository>``. Tests that need one skip with a reason when the binary is missing
(``apt-get install docker-registry``; `.ci/run` installs it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "docker-registry"
READY_SECONDS = 20.0


@dataclass
class Registry:
    host: str
    root: Path
    process: subprocess.Popen

    def uri(self, repository: str | None = None) -> str:
        """A store URI; a repository of its own unless named, so tests sharing the registry do not meet."""
        return f"oci+http://{self.host}/{repository or 't' + uuid.uuid4().hex[:12]}"

    def blob_file(self, sha256: str) -> Path:
        """Where Distribution's filesystem driver keeps a blob's bytes (shared by every repository)."""
        return self.root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / sha256[:2] / sha256 / "data"

    def uploads(self, uri: str, name: str) -> list[Path]:
        """The unfinished uploads of release ``name`` in store ``uri``."""
        repository = uri.split("/", 3)[3]
        folder = self.root / "data" / "docker" / "registry" / "v2" / "repositories" / repository / name / "_uploads"
        return sorted(folder.glob("*/data"))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_registry(root: Path, port: int | None = None) -> Registry:
    """Start a registry storing under ``root``; return once ``GET /v2/`` answers 200."""
    if shutil.which(BINARY) is None:
        pytest.fail(f"{BINARY} is not installed (apt-get install docker-registry; .ci/run installs it)")
    port = port or free_port()
    config = root / "config.yml"
    config.write_text(f"""version: 0.1
log: {{level: warn, accesslog: {{disabled: true}}}}
storage:
  filesystem: {{rootdirectory: {root / "data"}}}
  delete: {{enabled: true}}
http: {{addr: "127.0.0.1:{port}"}}
""")
    log = open(root / "registry.log", "ab")  # noqa: SIM115 - the child owns it; closed with the process
    process = subprocess.Popen(
        [BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    registry = Registry(f"127.0.0.1:{port}", root, process)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{BINARY} exited ({process.returncode}): {(root / 'registry.log').read_text()}")
        try:
            with urllib.request.urlopen(f"http://{registry.host}/v2/", timeout=1) as response:
                if response.status == 200:
                    return registry
        except OSError:
            time.sleep(0.05)
    registry.stop()
    raise RuntimeError(f"{BINARY} did not answer GET /v2/ within {READY_SECONDS} s")


@contextlib.contextmanager
def registry_server() -> Iterator[Registry]:
    """A registry for the block, removed with its data afterwards."""
    root = Path(tempfile.mkdtemp(prefix="compile-registry-"))
    started = start_registry(root)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


def environment_without_credentials(home: Path) -> dict[str, str]:
    """A child environment whose Docker config is an empty folder: no credentials of the machine leak in."""
    env = dict(os.environ, DOCKER_CONFIG=str(home), HOME=str(home))
    env.pop("REGISTRY_AUTH_FILE", None)
    return env
