"""The content-addressed build cache and a stat-keyed facts cache.

An engine entry is keyed by a hash of everything that determines it (never of the
plan: plans differ byte-wise between identical builds). Entries are written to a
temporary folder and renamed into place, so concurrent builds of the same key never
see half an entry: the first rename wins and the others discard their copy.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from compiler.core.files import (
    content_stat,
    copy_file,
    default_cache_dir,
    file_sha256,
    hash_json,
    staging_folder,
    stat_key,
    write_atomic,
)

ENGINE_FILES = ("engine.plan", "engine.json", "layers.json", "build.log")
PLAN_SHA256 = "plan-sha256"
"""The facts kind for cached plans' sha256, remembered by :func:`content_stat`."""


class BuildCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root else default_cache_dir()

    def file_sha256(self, path: Path) -> str:
        """sha256 of a file, remembered by its stat so a warm re-run does not re-read GBs."""
        return self.remember("sha256", [path], lambda: {"sha256": file_sha256(path)})["sha256"]

    def plan_intact(self, plan: Path, sha256: str) -> bool:
        """Whether a cached plan still has the bytes it was stored with. Hits copy it into OUT folders (a
        reflink where the filesystem has them), so only an edit of the cache itself changes it; it is hashed again
        only when its size, mtime or inode moved, so a hit stays a stat and a small read."""
        facts = self.remember(PLAN_SHA256, [plan], lambda: {"sha256": file_sha256(plan)}, stat=content_stat)
        return facts["sha256"] == sha256

    def remember(
        self,
        kind: str,
        paths: list[Path],
        compute: Callable[[], dict[str, Any]],
        stat: Callable[[Path], list[Any]] = stat_key,
    ) -> dict[str, Any]:
        """A JSON-able fact about files, recomputed only when one of them changes (size, mtime, inode)."""
        memo, facts = self.recall(kind, paths, stat)
        if facts is None:
            facts = compute()
            self.memorize(memo, facts)
        return facts

    def recall(
        self, kind: str, paths: list[Path], stat: Callable[[Path], list[Any]] = stat_key
    ) -> tuple[Path, dict[str, Any] | None]:
        """Where the facts about these files (as they are now) live, and the facts if they are known.

        Facts may name more files under ``"files"``; those must be unchanged too.
        """
        memo = self.root / "facts" / kind / hash_json([kind, *map(stat, paths)])
        try:
            facts = json.loads(memo.read_text())
            if all(stat_key(Path(f)) == before for f, before in facts.get("files_stat", [])):
                return memo, facts
        except (OSError, ValueError):
            pass
        return memo, None

    def memorize(self, memo: Path, facts: dict[str, Any]) -> None:
        """Keep facts at the place :meth:`recall` named (taken before computing them, so a file
        that changed meanwhile is simply not found next time). Best effort: facts that cannot be
        kept (a full disk) are computed again next time, and the run that computed them goes on."""
        facts = {**facts, "files_stat": [[str(f), stat_key(Path(f))] for f in facts.get("files", [])]}
        with suppress(OSError):
            write_atomic(memo, json.dumps(facts).encode())

    def entry(self, key: str) -> Path:
        return self.root / "engines" / key[:2] / key

    def lookup(self, key: str) -> Path | None:
        """The entry for ``key`` when it has every file. Entries are renamed into place whole, so one that is there
        but lacks a file was damaged (a file deleted by hand or by a cleaner): it is evicted, for the next store to
        replace. Whether it is there is looked at first: one that lands between two looks is whole, not damaged."""
        entry = self.entry(key)
        if not entry.is_dir():  # looked at first: an entry renamed into place between two looks is whole
            return None
        if all((entry / name).is_file() for name in ENGINE_FILES):
            return entry
        self.evict(key)
        return None

    def evict(self, key: str) -> None:
        """Drop a damaged entry (renamed away first, so readers never see it half-deleted)."""
        entry = self.entry(key)
        doomed = entry.with_name(f".evicted-{entry.name}-{os.getpid()}")
        try:
            os.rename(entry, doomed)
        except OSError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def store(self, key: str, source: Path, plan_sha256: str) -> None:
        """Copy a finished build folder into the cache; a concurrent writer of the same key may win."""
        entry = self.entry(key)
        if entry.exists():
            return
        with staging_folder(entry.parent, key[:12]) as staging:
            try:
                for name in ENGINE_FILES:
                    copy_file(source / name, staging / name)
                os.rename(staging, entry)
            except OSError:
                if not entry.exists():
                    raise
                return
        memo, _ = self.recall(PLAN_SHA256, [entry / "engine.plan"], content_stat)
        self.memorize(memo, {"sha256": plan_sha256})  # the first hit need not hash the plan again

    def model_entry(self, sha256: str) -> Path:
        """Where the model an engine was built from (FP16 conversion, Q/DQ model) is kept, by its digest."""
        return self.root / "models" / sha256[:2] / sha256

    def keep_model(self, sha256: str, files: list[Path]) -> None:
        """Keep a built model (``files``: the model, then its external data files) under its digest, so check
        measures an engine's accuracy even after the calibration folder it came from moved or went. Entries are
        renamed into place whole; a model whose external data is outside its folder is not kept."""
        entry = self.model_entry(sha256)
        if entry.exists():
            return
        model, *external = files
        try:
            names = [file.relative_to(model.parent) for file in external]
        except ValueError:
            return
        with staging_folder(entry.parent, sha256[:12]) as staging:
            try:
                copy_file(model, staging / "model.onnx")
                for file, name in zip(external, names, strict=True):
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    copy_file(file, staging / name)
                os.rename(staging, entry)
            except OSError:
                if not entry.exists():
                    raise
