"""A calibration made before, reused: from the folder itself when its key matches and its files are intact, else
from the remote cache tier (fetched, verified against its own record, refused when it contradicts it); one made
here is sent there. Calibration may not import :mod:`compiler.cache`: it is handed a tier (:class:`CacheTier`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from calibration.folder import RERUN, read_calibration
from compiler.core.errors import InvalidInput
from compiler.core.files import replace_dir, staging_folder, writable_folder
from compiler.core.records import (
    CALIBRATION_FILES,
    CALIBRATION_RECORD,
    AccuracyReport,
    CacheOutcome,
    CalibrationResult,
    read_record,
)

KIND = "calibrations"
"""The remote cache's name for calibration folders."""


class CacheTier(Protocol):
    """The caches beyond the folder, as calibration uses them (:class:`compiler.cache.tier.CacheTier` is one)."""

    @property
    def remote(self) -> object | None:
        """The remote cache, None when none is configured."""

    def fetch(self, kind: str, key: str, folder: Path) -> CacheOutcome:
        """``remote`` with the entry's files in ``folder``, else a miss with why."""

    def refuse(self, kind: str, key: str, why: str) -> CacheOutcome:
        """A fetched entry whose content the stage refused."""

    def send(
        self, kind: str, key: str, folder: Path, names: list[str], material: dict[str, Any] | None = None
    ) -> str | None:
        """Send what was made; a warning line when the remote could not take it."""

    def explain_calibration(self, record: dict[str, Any], folders: list[Path], reason: str) -> str:
        """``reason``, or with ``--explain`` which input of the key changed."""


def look_up(
    out: Path, key: str, record: dict[str, Any], reuse: bool, staged: bool, tier: CacheTier | None
) -> tuple[CalibrationResult | None, CacheOutcome]:
    """The result of ``key`` (its ``cache`` saying where it came from) from ``out`` or, put into ``out``, from the
    remote cache; else None and why it was a miss. ``reuse`` False (``--no-reuse``) looks nowhere."""
    if reuse and (previous := reusable(out, key)) is not None:  # same data bytes: already checked
        return previous.model_copy(update={"cache": CacheOutcome(source="hit")}), CacheOutcome(source="hit")
    miss = CacheOutcome(source="miss", reason="not in the folder" if reuse else "--no-reuse")
    if tier is not None and reuse:
        if tier.remote is not None:
            fetched, miss = _from_remote(tier, key, out, staged)
            if fetched is not None:
                return fetched.model_copy(update={"cache": miss}), miss
        miss = miss.model_copy(update={"reason": tier.explain_calibration(record, [out], miss.reason)})
    return None, miss


def _from_remote(tier: CacheTier, key: str, out: Path, staged: bool) -> tuple[CalibrationResult | None, CacheOutcome]:
    """The result of ``key`` from the remote cache, verified against its own record and put in ``out`` (whole, by
    a rename when ``staged``; file by file, ``calibration.json`` last, otherwise)."""
    with staging_folder(out.parent, out.name) as staging:
        outcome = tier.fetch(KIND, key, staging)
        if outcome.source != "remote":
            return None, outcome
        found = reusable(staging, key)
        if found is None:
            return None, tier.refuse(KIND, key, "its files contradict its calibration.json or its key")
        if staged:
            replace_dir(out, staging)
        else:
            writable_folder(out, "--out")
            (out / CALIBRATION_RECORD).unlink(missing_ok=True)
            for name in CALIBRATION_FILES:
                if (staging / name).is_file():
                    os.replace(staging / name, out / name)
                else:
                    (out / name).unlink(missing_ok=True)  # an earlier run's
            os.replace(staging / CALIBRATION_RECORD, out / CALIBRATION_RECORD)
    return found.model_copy(update={"out": str(out)}), outcome


def sent(result: CalibrationResult, out: Path, tier: CacheTier | None, miss: CacheOutcome) -> CalibrationResult:
    """A result made here, sent to the remote cache (a failure there is a warning: the result is whole)."""
    warnings = [miss.warning] if miss.warning else []
    if tier is not None:
        material = result.record().model_dump(mode="json")
        warning = tier.send(KIND, result.cache_key, out, [*result.files, CALIBRATION_RECORD], material)
        warnings += [warning] if warning else []
    return result.model_copy(update={"cache": miss.model_copy(update={"warning": " / ".join(warnings) or None})})


def reusable(out: Path, key: str) -> CalibrationResult | None:
    """The previous run in ``out`` when it had the same content key and its files are intact."""
    try:
        previous = read_calibration(out)
        if previous.record.cache_key != key:
            return None
        previous.verify(out / name for name in previous.record.files)
        report = read_record(out / "report.json", AccuracyReport, RERUN)
    except (InvalidInput, OSError):
        return None
    return CalibrationResult(**previous.record.model_dump(), report=report)
