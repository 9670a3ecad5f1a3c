"""Which TensorRT each Triton release runs, and whether a plan loads there.

Source: NVIDIA's Triton "Release Compatibility Matrix", the TensorRT column of its `trtllm-python-py3` container
table (triton-inference-server/server, docs/introduction/compatibility.md; published at
https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/introduction/compatibility.html),
read 2026-12. It is the one table of Triton releases and their TensorRT versions NVIDIA publishes; the `-py3`
image of a month lists its TensorRT in that month's release notes
(https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/) and may differ (25.10's `-py3`
image is based on CUDA 13.0.2, its `trtllm-python-py3` image on CUDA 12.9.1). For such an image pass the
server's own TensorRT version (``--triton-tensorrt``; ``ls /opt/tritonserver/backends/tensorrt`` and
``dpkg -l | grep nvinfer`` in the container tell). 24.04 is left out: its TensorRT (9.3.0.post12.dev1) is a
pre-release build no plan of ours names.
"""

from __future__ import annotations

import re

from compiler.core.errors import InvalidInput
from compiler.core.runtimes import parse_version

TRITON_TENSORRT: dict[str, str] = {
    "26.07": "10.14.1.48",
    "26.06": "10.14.1.48",
    "26.05": "10.14.1.48",
    "26.04": "10.14.1.48",
    "26.03": "10.14.1.48",
    "26.02": "10.13.3.9",
    "26.01": "10.13.3.9",
    "25.12": "10.13.3.9",
    "25.11": "10.13.3.9",
    "25.10": "10.11.0.33",
    "25.09": "10.11.0.33",
    "25.08": "10.11.0.33",
    "25.07": "10.10.0.31",
    "25.06": "10.10.0.31",
    "25.05": "10.9.0.34",
    "25.04": "10.9.0.34",
    "25.03": "10.9.0.34",
    "25.02": "10.8.0.43",
    "25.01": "10.8.0.43",
    "24.12": "10.7.0",
    "24.11": "10.6.0",
    "24.10": "10.4.0",
    "24.09": "10.4.0",
    "24.08": "10.3.0",
    "24.07": "10.1.0",
    "24.06": "10.0.1",
    "24.05": "10.0.1.6",
}
"""Triton release (``YY.MM``) -> the TensorRT version its container runs (as published: some without a build
number, which then stands for every build of that release)."""
RELEASE = re.compile(r"[0-9]{2}\.[0-9]{2}")


def tensorrt_of(release: str | None, tensorrt: str | None) -> tuple[str, str]:
    """(what the target is called, the TensorRT version it runs), from ``--triton-release`` or the server's
    TensorRT given directly (``--triton-tensorrt``, which wins: it is what the server says of itself)."""
    if tensorrt is not None:
        try:
            parse_version(tensorrt)
        except ValueError as exc:
            raise InvalidInput(f"--triton-tensorrt: {exc}") from None
        return (
            f"Triton {release} (TensorRT {tensorrt})" if release else f"a Triton server with TensorRT {tensorrt}",
            tensorrt,
        )
    known = ", ".join(sorted(TRITON_TENSORRT))
    if release is None:
        raise InvalidInput(
            f"name the Triton release the repository is for: --triton-release YY.MM (one of {known}), "
            "or the server's TensorRT version with --triton-tensorrt VERSION"
        )
    if not isinstance(release, str) or not RELEASE.fullmatch(release):
        raise InvalidInput(f"--triton-release {str(release)[:40]!r}: give a release as YY.MM (e.g. 25.10)")
    if release not in TRITON_TENSORRT:
        raise InvalidInput(
            f"--triton-release {release}: not in the table of Triton releases this version knows "
            f"({known}); pass the server's TensorRT version with --triton-tensorrt VERSION"
        )
    return f"Triton {release} (TensorRT {TRITON_TENSORRT[release]})", TRITON_TENSORRT[release]


def releases_running(loads) -> list[str]:
    """The releases of the table whose TensorRT a plan's runtime may load (``loads``: Runtime.loads)."""
    return [release for release, version in sorted(TRITON_TENSORRT.items()) if loads(version)]
