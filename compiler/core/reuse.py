"""The one reuse protocol of every cached stage: a result is taken from where the stage keeps it (``hit``), else
fetched from the remote tier into a staging folder, verified by the stage and kept (``remote``), else made here and
sent to the tier. An entry the stage's verify step refuses is dropped in one warning line, as is a tier that cannot
answer or take what was made: the stage then makes it, and only the reuse is lost. A cached stage writes its key,
its lookup and its verify step, nothing else.

It lives in core, below every layer, because calibration and the backends' TensorRT view may import neither
``compiler.cache`` nor the stores: they are handed a :class:`RemoteTier` (``compiler.cache.reuse.open_tier``) by
whoever calls them (the CLI, the pipeline, the build).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from compiler.core.records import CacheOutcome

T = TypeVar("T")
Material = dict[str, Any] | None
"""What an entry's index says of how it was made (``--explain`` compares it); None: nothing."""
Digests = dict[str, str] | None
"""File name -> sha256, of files already verified (a plan's), or filled by a fetch; None: not asked."""


class RemoteTier(Protocol):
    """The remote cache as a stage is handed it: entries of a ``kind`` under a content key, fetched and sent as
    whole folders, each file verified against its index by the tier itself."""

    uri: str | None
    """The remote cache's URI; None when none is configured (nothing is fetched or sent)."""
    explain_misses: bool
    """Whether a miss says which input of the key changed (``--explain``)."""

    def fetch(self, kind: str, key: str, folder: Path, digests: dict[str, str] | None = None) -> CacheOutcome:
        """``remote`` with the entry's files in ``folder`` (and their sha256, each file verified against it, in
        ``digests`` when given), else a miss with why (and a warning line)."""
        ...

    def refuse(self, kind: str, key: str, why: str) -> CacheOutcome:
        """A fetched entry the stage refused: dropped from the remote, said in a warning line."""
        ...

    def send(
        self, kind: str, key: str, folder: Path, names: list[str], material: Material, digests: Digests
    ) -> str | None:
        """Send what was made; a warning line when the remote could not take it."""
        ...

    def explain_calibration(self, record: dict[str, Any], folders: list[Path], reason: str) -> str:
        """``--explain``'s line for a calibration miss (calibration may not import the explainer itself)."""
        ...


class Refused(Exception):
    """Raised by a verify step: the fetched entry contradicts its key (the message says how)."""


@contextmanager
def temporary_folder(prefix: str = "compile-reuse-", parent: Path | None = None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as folder:
        yield Path(folder)


def with_warning(outcome: CacheOutcome, *lines: str | None) -> CacheOutcome:
    """``outcome`` with more warning lines joined to its own (none: unchanged)."""
    joined = " / ".join(filter(None, [outcome.warning, *lines])) or None
    return outcome if joined == outcome.warning else outcome.model_copy(update={"warning": joined})


@dataclass(frozen=True)
class Reuse:
    """One result's way through the protocol: ``kind`` and ``key`` name its entry in the tier (None: no tier)."""

    tier: RemoteTier | None
    kind: str
    key: str

    @property
    def remote(self) -> bool:
        return self.tier is not None and self.tier.uri is not None

    def take(
        self,
        local: Callable[[], T | None],
        verify: Callable[[Path, dict[str, str]], T],
        staging: Callable[[], AbstractContextManager[Path]] = temporary_folder,
        missing: str = "not in the local cache",
    ) -> tuple[T | None, CacheOutcome]:
        """What ``local`` finds (``hit``), else :meth:`fetch`'s; ``missing`` is the miss's reason without a remote."""
        found = local()
        if found is not None:
            return found, CacheOutcome(source="hit")
        if not self.remote:
            return None, CacheOutcome(source="miss", reason=missing)
        return self.fetch(verify, staging)

    def fetch(
        self,
        verify: Callable[[Path, dict[str, str]], T],
        staging: Callable[[], AbstractContextManager[Path]] = temporary_folder,
    ) -> tuple[T | None, CacheOutcome]:
        """The entry fetched into a ``staging`` folder and handed to ``verify`` with its files' sha256 (each file
        already verified against it), which keeps it where the stage keeps its results and returns it, or raises
        :class:`Refused`: ``remote``, else a miss with why."""
        assert self.tier is not None
        digests: dict[str, str] = {}
        with staging() as folder:
            outcome = self.tier.fetch(self.kind, self.key, folder, digests)
            if outcome.source != "remote":
                return None, outcome
            try:
                return verify(folder, digests), outcome
            except Refused as exc:
                return None, self.tier.refuse(self.kind, self.key, str(exc))

    def send(self, folder: Path, names: list[str], material: Material = None, digests: Digests = None) -> str | None:
        """Send what was made here (``names`` in ``folder``): a warning line when the tier could not take it."""
        if not self.remote:
            return None
        assert self.tier is not None
        return self.tier.send(self.kind, self.key, folder, names, material, digests)
