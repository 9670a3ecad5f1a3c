"""A calibration made before, reused: from the folder itself when its key matches and its files are intact, else
from the remote cache tier (fetched, verified against its own record, refused when it contradicts it); one made
here is sent there, through the one reuse protocol of every cached stage (:class:`compiler.core.reuse.Reuse`).
Calibration may not import :mod:`compiler.cache`: it is handed the tier (:class:`compiler.core.reuse.RemoteTier`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from calibration.folder import RERUN, read_calibration
from compiler.core.errors import InvalidInput
from compiler.core.files import replace_dir, staging_folder, writable_folder
from compiler.core.record_files import read_record
from compiler.core.records import CALIBRATION_FILES, CALIBRATION_RECORD, AccuracyReport, CacheOutcome, CalibrationResult
from compiler.core.reuse import Refused, RemoteTier, Reuse, with_warning

KIND = "calibrations"
"""The remote cache's name for calibration folders."""


def look_up(
    out: Path, key: str, record: dict[str, Any], reuse: bool, staged: bool, tier: RemoteTier | None
) -> tuple[CalibrationResult | None, CacheOutcome]:
    """The result of ``key`` (its ``cache`` saying where it came from) from ``out`` or, put into ``out``, from the
    remote cache; else None and why it was a miss. ``reuse`` False (``--no-reuse``) looks nowhere."""
    if not reuse:
        return None, CacheOutcome(source="miss", reason="--no-reuse")
    found, outcome = Reuse(tier, KIND, key).take(
        lambda: reusable(out, key),
        lambda folder, _: _kept(folder, key, out, staged),
        staging=lambda: staging_folder(out.parent, out.name),
        missing="not in the folder",
    )
    if found is not None:
        return found.model_copy(update={"cache": outcome, "out": str(out)}), outcome
    if tier is not None:
        outcome = outcome.model_copy(update={"reason": tier.explain_calibration(record, [out], outcome.reason)})
    return None, outcome


def _kept(staging: Path, key: str, out: Path, staged: bool) -> CalibrationResult:
    """A fetched calibration, verified against its own record and put in ``out`` (whole, by a rename when
    ``staged``; file by file, ``calibration.json`` last, otherwise); :class:`Refused` when it contradicts them."""
    found = reusable(staging, key)
    if found is None:
        raise Refused("its files contradict its calibration.json or its key")
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
    return found


def sent(result: CalibrationResult, out: Path, tier: RemoteTier | None, miss: CacheOutcome) -> CalibrationResult:
    """A result made here, sent to the remote cache (a failure there is a warning: the result is whole)."""
    material = result.record().model_dump(mode="json")
    warning = Reuse(tier, KIND, result.cache_key).send(out, [*result.files, CALIBRATION_RECORD], material)
    return result.model_copy(update={"cache": with_warning(miss, warning)})


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
