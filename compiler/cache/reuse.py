"""The remote tier a stage is handed (:class:`compiler.core.reuse.RemoteTier`), over the remote cache: calibration
and the backends' TensorRT view may not import this layer, so whoever calls them (the CLI, the pipeline, the build)
opens it here and hands it down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler.cache.explain import calibration_candidates, calibration_material, describe
from compiler.cache.remote import Damaged, configured, open_remote
from compiler.core.errors import CompileError
from compiler.core.records import CacheOutcome
from compiler.core.reuse import Digests, Material, RemoteTier


def open_tier(uri: str | None = None, explain: bool = False) -> RemoteTier:
    """The remote cache at ``uri`` (else $COMPILE_REMOTE_CACHE; none when neither is set: nothing is fetched or
    sent), and whether misses are explained."""
    return _StoreTier(uri, explain)


class _StoreTier:
    """:class:`RemoteTier` over :class:`~compiler.cache.remote.RemoteCache` (``remote``: None without a URI)."""

    def __init__(self, uri: str | None, explain: bool) -> None:
        self.uri = configured(uri)
        self.remote = open_remote(self.uri) if self.uri else None
        self.explain_misses = explain

    def fetch(self, kind: str, key: str, folder: Path, digests: dict[str, str] | None = None) -> CacheOutcome:
        if self.remote is None:
            return CacheOutcome(source="miss", reason="not in the local cache")
        try:
            index = self.remote.fetch(kind, key, folder)
            if index is None:
                return CacheOutcome(source="miss", reason="in neither the local nor the remote cache")
        except Damaged as exc:
            return CacheOutcome(source="miss", reason="the remote entry was damaged", warning=str(exc))
        except CompileError as exc:
            return CacheOutcome(
                source="miss", reason="the remote cache did not answer", warning=self.remote.unreachable(kind, key, exc)
            )
        if digests is not None:
            digests.update({name: entry.sha256 for name, entry in index.files.items()})
        return CacheOutcome(source="remote")

    def refuse(self, kind: str, key: str, why: str) -> CacheOutcome:
        assert self.remote is not None
        return CacheOutcome(
            source="miss", reason="the remote entry was damaged", warning=str(self.remote.damaged(kind, key, why))
        )

    def send(
        self, kind: str, key: str, folder: Path, names: list[str], material: Material, digests: Digests
    ) -> str | None:
        if self.remote is None:
            return None
        return self.remote.send_quietly(kind, key, folder, names, material=material or {}, digests=digests)

    def explain_calibration(self, record: dict[str, Any], folders: list[Path], reason: str) -> str:
        if not self.explain_misses:
            return reason
        candidates = calibration_candidates(folders)
        if self.remote is not None:
            candidates += [
                (label, calibration_material(material)) for label, material in self.remote.materials("calibrations")
            ]
        return describe("calibration", calibration_material(record), candidates)
