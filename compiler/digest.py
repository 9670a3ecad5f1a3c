"""A model's sha256 (the file, then its external data), computed on a second core beside other work.

No onnx here: `compile build` hashes a model it never parses with onnx (see :mod:`compiler.skim`).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any


def hash_model_file(path: Path, started: threading.Event | None = None) -> Any:
    """The first part of :attr:`compiler.model.OnnxModel.sha256`: the model file itself.

    One update over a mapping of the file releases the GIL for all of it, so a protobuf parse (which
    holds the GIL) runs beside it; ``started`` is set just before.
    """
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                if started:
                    started.set()
                hasher.update(view)
    if started:
        started.set()
    return hasher


def hash_beside(pool: Executor, path: Path) -> Future[Any]:
    """Start :func:`hash_model_file` on ``pool`` and return once it holds no GIL (not waiting long
    for a pool that is busy with something else)."""
    started = threading.Event()
    future = pool.submit(hash_model_file, path, started)
    started.wait(timeout=0.1)
    return future


def finish_model_digest(hasher: Any, external_files: tuple[Path, ...]) -> str:
    """The rest of :attr:`compiler.model.OnnxModel.sha256`: each external file's name and bytes, in name order."""
    for file in sorted(external_files):
        _hash_file(hasher, file)
    return hasher.hexdigest()


def _hash_file(digest: Any, path: Path) -> None:
    digest.update(b"\0" + path.name.encode() + b"\0")
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
