"""Paths a command writes, checked against the paths it reads, before any work."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from compiler.core.errors import InvalidInput


def _identity(path: Path) -> tuple[int, int] | None:
    """The file a path names, as the kernel knows it (device, inode), symlinks followed; None if there is none."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # missing, under a file, a NUL in the name: nothing there to overwrite
        return None
    return info.st_dev, info.st_ino


def check_not_overwriting(
    outputs: Iterable[Path], inputs: Iterable[Path], role: str, replaced: Iterable[Path] = ()
) -> None:
    """Refuse (InvalidInput naming ``role``, the option that chose where to write) when writing ``outputs`` would
    overwrite one of ``inputs``: the same path, or another name for the same file (a symlink, a hard link, a
    folder reached two ways), compared by device and inode rather than by spelling.

    ``replaced`` are folders that are replaced whole when the work is done (staged outputs): every input inside
    one (or that is one) would go too.
    """
    sources: dict[tuple[int, int], Path] = {}
    for path in inputs:
        identity = _identity(Path(path))
        if identity is not None:
            sources.setdefault(identity, Path(path))
    for output in outputs:
        identity = _identity(Path(output))
        if identity is not None and identity in sources:
            source = sources[identity]
            how = (
                ""
                if os.path.abspath(source) == os.path.abspath(output)
                else " (the same file under another name: a symlink or hard link)"
            )
            raise InvalidInput(
                f"{role} {Path(output).parent}: writing {Path(output).name} there would overwrite "
                f"the input {source}{how}; choose another {role} folder"
            )
    for folder in replaced:
        identity = _identity(folder)
        if identity is None:
            continue
        for source in sources.values():
            real = Path(os.path.realpath(source))
            if any(_identity(place) == identity for place in (real, *real.parents)):
                raise InvalidInput(
                    f"{role} {folder}: the folder is replaced when the run ends, and the input "
                    f"{source} is inside it; choose another {role} folder"
                )
