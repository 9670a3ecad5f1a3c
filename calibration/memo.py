"""A calibration asked for again with nothing changed: its gated result remembered in the local cache, keyed by the
stat of the model, data and labels files (a write always moves their ctime), every option, and the installed
versions of what computes it. A re-release then finds its calibration with a stat, a small read and the check of
the folder's files against their record, and imports no onnx, numpy or onnxruntime (the content key alone needs
the model parsed and the data hashed). The memo names the folder's content key; the folder itself is the result, as
it is for any reuse, so a memo never stands for files that are not there.

Not remembered (made or reused the usual way every time): a model with external data, an image folder (a file
changed inside it moves no stat of the folder), a ``--metric`` (the user's code may change), ``--no-reuse``."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from calibration.reuse import reusable
from compiler.core.files import NotRegularFile, default_cache_dir, read_regular, write_atomic
from compiler.core.memo import memo_key, recalled, remember
from compiler.core.options import CalibrationOptions
from compiler.core.records import CALIBRATION_FORMAT, CALIBRATION_VERDICT, CacheOutcome, CalibrationResult
from compiler.data.protobuf_inputs import skim_inputs

if TYPE_CHECKING:
    from compiler.core.records import Progress
    from compiler.core.reuse import RemoteTier
    from compiler.data.datasets import ImagePreprocess

FORMAT = 1
KIND = "calibration-memos"
MAX_VERDICT_BYTES = 1 << 20


class Remembered(BaseModel):
    key: str
    result: CalibrationResult
    verdict: str
    """verdict.json as the calibration wrote it beside its record."""


def calibrate(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: CalibrationOptions | None = None,
    *,
    preprocess: ImagePreprocess | None = None,
    staged: bool = False,
    progress: Progress | None = None,
    tier: RemoteTier | None = None,
) -> CalibrationResult:
    """:func:`calibration.api.calibrate`, answered from the memo when nothing it reads changed and ``out`` still
    holds the calibration it names, intact."""
    options = options or CalibrationOptions()
    out = Path(out)
    key = _key(Path(model), Path(data), out, options, preprocess)
    root = default_cache_dir() / KIND
    if key is not None and (found := _recalled(root, key, out)) is not None:
        return found
    from calibration.api import calibrate as calibrate_now

    result = calibrate_now(
        model, data, out, options, preprocess=preprocess, staged=staged, progress=progress, tier=tier
    )
    if key is not None and skim_inputs(Path(model)) is not None:
        with suppress(OSError, NotRegularFile, UnicodeDecodeError):  # no verdict to keep: no memo
            verdict = read_regular(out / CALIBRATION_VERDICT, MAX_VERDICT_BYTES)
            if len(verdict) <= MAX_VERDICT_BYTES:
                entry = Remembered(key=key, result=result.model_copy(update={"cache": None}), verdict=verdict.decode())
                remember(root, key, entry)
    return result


def _key(model: Path, data: Path, out: Path, options: CalibrationOptions, preprocess) -> str | None:
    """The memo's key for these inputs as they are now; None when they are not remembered (module docstring) or
    one cannot be keyed: the calibration then says why."""
    if not options.reuse or options.metric is not None or preprocess is not None:
        return None
    files = [model, data, *([Path(options.labels)] if options.labels else [])]
    given = [str(model), str(data), str(out.resolve())]
    return memo_key(KIND, files, FORMAT, CALIBRATION_FORMAT, given, options.model_dump(mode="json"))


def _recalled(root: Path, key: str, out: Path) -> CalibrationResult | None:
    """The remembered result when ``out`` holds the calibration it names, intact (verdict.json written again if it
    went missing), told it came from the folder; else None."""
    found = recalled(root, key, Remembered)
    if found is None or reusable(out, found.result.cache_key) is None:
        return None
    verdict, wanted = out / CALIBRATION_VERDICT, found.verdict.encode()
    try:
        same = read_regular(verdict, len(wanted)) == wanted
    except (OSError, NotRegularFile):
        same = False
    if not same:
        write_atomic(verdict, wanted)
    outcome = CacheOutcome(source="hit")
    return found.result.model_copy(update={"cache": outcome, "reused": True, "out": str(out)})
