"""A check asked for again with nothing changed: which check.json answers it, remembered (:mod:`compiler.core.memo`)
by each engine's plan digest (engine.json's: it binds model, calibration and build), the stat of the
source model, the samples, the rules, SKU, profiles and labels files and each calibration's record, every option and
the installed versions of what judges. A re-release then finds its verdict with a few small reads and imports no
onnx, numpy or onnxruntime; the check.json itself still has to say it was made from the inputs the memo names.

Not remembered (checked or reused the usual way every time): a source model with external data, an image folder of
samples (a file changed inside moves no stat of the folder), ``--dim``, a ``--metric`` (the user's code may change),
``--no-reuse``, a verdict made without some engine's built model at hand (it is looked for again next time). A
remembered verdict also needs each built model it measured to keep its stat (a cache clean removes them)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from compiler.check.report import earlier_report
from compiler.core.files import NotRegularFile, content_stat, default_cache_dir, read_regular
from compiler.core.jsonio import parse_json
from compiler.core.memo import memo_key, recalled, remember, unchanged
from compiler.core.options import CheckOptions
from compiler.core.records import CHECK_FORMAT, CHECK_RECORD, CacheOutcome, CheckReport
from compiler.data.protobuf_inputs import skim_inputs

if TYPE_CHECKING:
    from compiler.core.records import Progress
    from compiler.core.reuse import RemoteTier

FORMAT = 1
KIND = "check-memos"
MAX_RECORD_BYTES = 16 << 20


class Remembered(BaseModel):
    key: str
    inputs_sha256: str
    files: list[tuple[str, list[Any]]]
    """Each engine's built model, with its stat when the verdict was made (without ctime: a build cache hit links
    the cache's copy again, which moves ctime and not the bytes)."""


def check(
    build_dir: str | Path,
    options: CheckOptions | None = None,
    progress: Progress | None = None,
    tier: RemoteTier | None = None,
) -> CheckReport:
    """:func:`compiler.check.checks.check`, answered from the build folder's check.json when the memo says nothing
    it reads changed since that verdict."""
    options = options or CheckOptions()
    root = Path(build_dir)
    key = _key(root, options)
    memos = (options.cache_dir or default_cache_dir()) / KIND
    found = recalled(memos, key, Remembered) if key is not None else None
    if found is not None and unchanged(found.files, content_stat):
        report = earlier_report(root / CHECK_RECORD, found.inputs_sha256)
        if report is not None:
            return report.model_copy(update={"cache": CacheOutcome(source="hit")})
    from compiler.check.checks import check as check_now

    report = check_now(root, options, progress, tier)
    models = report._built_models
    if key is not None and report.inputs_sha256 and all(models) and skim_inputs(Path(report.model)) is not None:
        files = [(path, content_stat(Path(path))) for path in models if path]
        remember(memos, key, Remembered(key=key, inputs_sha256=report.inputs_sha256, files=files))
    return report


def _key(root: Path, options: CheckOptions) -> str | None:
    """The memo's key for this folder and options as they are now; None when they are not remembered (module
    docstring) or cannot be keyed (no build.json, an engine record unreadable): the check then says why."""
    if not options.reuse or options.metric is not None or options.dim:
        return None
    try:
        build = _record(root / "build.json")
        targets = [[t["sku"], t["precision"], t["status"], t["path"]] for t in build["targets"]]
        engines = [_plan_sha256(Path(t[3]) / "engine.json") for t in targets]
        model = Path(options.model or build["model"])
    except (OSError, NotRegularFile, ValueError, KeyError, TypeError):
        return None
    files = [model, *(p for p in (options.data, options.rules, options.skus, options.profiles, options.labels) if p)]
    files += [Path(c) / "calibration.json" for c in options.calibration]
    cache_dir = str((options.cache_dir or default_cache_dir()).resolve())
    given = [str(root.resolve()), [str(f) for f in files], cache_dir]
    return memo_key(KIND, files, FORMAT, CHECK_FORMAT, given, targets, engines, options.model_dump(mode="json"))


def _record(path: Path) -> Any:
    """A small JSON record, read bounded in size and depth (UnreadableJson, a ValueError, otherwise)."""
    return parse_json(read_regular(path, MAX_RECORD_BYTES), MAX_RECORD_BYTES)


def _plan_sha256(path: Path) -> str | None:
    """The plan's digest an engine's record holds (what the check's own key takes: it binds the model, calibration
    and build, while the rest of the record says how this run came by it); None where no engine was built."""
    try:
        return str(_record(path)["sha256"])
    except FileNotFoundError:
        return None
