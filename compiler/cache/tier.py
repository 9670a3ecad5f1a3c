"""The caches beyond a stage's own folder, as a stage that must not import them sees them (calibration imports only
compiler.core and compiler.data): fetch and send whole folders of the remote cache, and explain a miss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler.cache.explain import calibration_candidates, calibration_material, describe
from compiler.cache.remote import Damaged, configured, open_remote
from compiler.core.errors import CompileError
from compiler.core.records import CacheOutcome


class CacheTier:
    """The remote cache at ``uri`` (or $COMPILE_REMOTE_CACHE; none when neither is set) and whether misses are
    explained."""

    def __init__(self, uri: str | None = None, explain: bool = False, local_folders: list[Path] | None = None) -> None:
        self.uri = configured(uri)
        self.remote = open_remote(self.uri) if self.uri else None
        self.explain_misses = explain
        self.local_folders = local_folders or []

    def fetch(self, kind: str, key: str, folder: Path) -> CacheOutcome:
        """``remote`` with the entry's files in ``folder``, else a miss with why (and a warning line for a damaged
        entry or a remote that did not answer)."""
        if self.remote is None:
            return CacheOutcome(source="miss", reason="not in the local cache")
        try:
            if self.remote.fetch(kind, key, folder) is None:
                return CacheOutcome(source="miss", reason="in neither the local nor the remote cache")
        except Damaged as exc:
            return CacheOutcome(source="miss", reason="the remote entry was damaged", warning=str(exc))
        except CompileError as exc:
            return CacheOutcome(
                source="miss", reason="the remote cache did not answer", warning=self.remote.unreachable(kind, key, exc)
            )
        return CacheOutcome(source="remote")

    def refuse(self, kind: str, key: str, why: str) -> CacheOutcome:
        """A fetched entry whose content the stage refused (its records contradict the key)."""
        assert self.remote is not None
        return CacheOutcome(
            source="miss", reason="the remote entry was damaged", warning=str(self.remote.damaged(kind, key, why))
        )

    def send(
        self, kind: str, key: str, folder: Path, names: list[str], material: dict[str, Any] | None = None
    ) -> str | None:
        """Send what was made; a warning line when the remote could not take it."""
        if self.remote is None:
            return None
        return self.remote.send_quietly(kind, key, folder, names, material=material or {})

    def explain_calibration(self, record: dict[str, Any], folders: list[Path], reason: str) -> str:
        if not self.explain_misses:
            return reason
        candidates = calibration_candidates([*folders, *self.local_folders])
        if self.remote is not None:
            candidates += [
                (label, calibration_material(material)) for label, material in self.remote.materials("calibrations")
            ]
        return describe("calibration", calibration_material(record), candidates)
