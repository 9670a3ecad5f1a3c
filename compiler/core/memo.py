"""The stat-keyed memos of a re-run that changed nothing (inspect, calibrate and check each keep one): a stage's
answer remembered in the local cache under a key made of its input files' stat (a write always moves a file's
ctime), its options and the installed versions of what computes it, so asking again costs a stat and a small read
instead of parsing models and hashing data. An entry is a pydantic record naming its key; anything else found
there (too big, unparsable, of another key) is no memo, and a memo that cannot be written costs only the reuse."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from compiler.core.files import NotRegularFile, default_cache_dir, hash_json, read_regular, stat_key, write_atomic

MAX_ENTRY_BYTES = 64 << 20
TOOLS = ("trt-compile", "onnxruntime", "onnx", "numpy", "polygraphy", "nvidia-modelopt", "tensorrt-rtx", "tensorrt")
"""Whose installed versions enter every memo's key (read from their metadata: nothing is imported)."""

Entry = TypeVar("Entry", bound=BaseModel)


def memo_key(kind: str, files: list[Path], *values: Any) -> str | None:
    """The key of ``kind``'s memo for ``files`` as they are now and ``values``; None when a file cannot be keyed
    (missing, not a regular file): the stage then runs and says why."""
    try:
        if not all(Path(f).is_file() for f in files):
            return None
        stats = [stat_key(Path(f)) for f in files]
    except OSError:
        return None
    return hash_json([kind, stats, _installed(), *values])


def recalled(root: Path, key: str, entry: type[Entry]) -> Entry | None:
    """The entry kept under ``key`` in ``root``, or None."""
    try:
        data = read_regular(root / f"{key}.json", MAX_ENTRY_BYTES)
        found = entry.model_validate_json(data) if len(data) <= MAX_ENTRY_BYTES else None
    except (OSError, NotRegularFile, ValidationError, ValueError):
        return None
    return found if found is not None and getattr(found, "key", None) == key else None


def remember(root: Path, key: str, entry: BaseModel) -> None:
    with suppress(OSError):  # best effort: a read-only or full cache costs only the memo
        write_atomic(root / f"{key}.json", entry.model_dump_json().encode())


class _Value(BaseModel):
    key: str
    value: Any


def remembered_value(kind: str, compute: Callable[[], Any], *values: Any) -> Any:
    """What ``compute`` returns (JSON) for ``values`` and the installed tools, computed once per key."""
    root = default_cache_dir() / kind
    key = memo_key(kind, [], *values)
    found = recalled(root, key, _Value) if key is not None else None
    if found is not None:
        return found.value
    value = compute()
    if key is not None:
        remember(root, key, _Value(key=key, value=value))
    return value


def unchanged(files: list[tuple[str, list[Any]]], stat: Callable[[Path], list[Any]] = stat_key) -> bool:
    """Whether every (path, ``stat``) an entry lists still has that stat."""
    try:
        return all(stat(Path(path)) == before for path, before in files)
    except OSError:
        return False


@cache
def _installed() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for tool in TOOLS:
        try:
            versions[tool] = version(tool)
        except PackageNotFoundError:
            versions[tool] = None
    return versions
