"""Reading a build folder (``compile build``'s output) as ``compile check`` needs it: every record through
:func:`~compiler.records.read_record`, every path derived from the folder itself (never taken from a record),
and each model an engine was built from found and proven by its digest before anything reads it as that model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from compiler.digest import finish_model_digest, hash_model_file
from compiler.errors import InvalidInput
from compiler.files import default_cache_dir, file_sha256
from compiler.model import OnnxModel, load_model
from compiler.records import (
    BuildReport,
    EngineRecord,
    LayersRecord,
    Precision,
    Status,
    TargetStatus,
    read_record,
    read_record_bytes,
)

REBUILD = "re-run compile build"
MAX_LOG_BYTES = 64 << 20
"""build.log holds the builder's INFO and WARNING lines (KBs); a bigger file is not ours."""
_SKU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_INPUT_FILENAME = re.compile(r"^\[INFO\] Input filename:\s+(?P<path>.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Target:
    """One SKU x precision of the build: its status and, when it built, its records and log."""

    status: TargetStatus
    folder: Path
    engine: EngineRecord | None = None
    layers: LayersRecord | None = None
    log: str = ""

    @property
    def label(self) -> str:
        return f"{self.status.sku}/{self.status.precision}"


@dataclass(frozen=True)
class BuildFolder:
    root: Path
    report: BuildReport
    targets: list[Target]


def read_build(root: Path) -> BuildFolder:
    """The build folder's build.json and, for every target that built, its engine.json, layers.json and
    build.log, each checked against the others and the plan against its recorded sha256."""
    root = Path(root)
    record = root / "build.json"
    if not root.is_dir():
        raise InvalidInput(f"{root}: not a build folder (not a folder at all); pass the --out folder of "
                           f"compile build")
    if not record.is_file():
        raise InvalidInput(f"{root}: not a build folder (no build.json); pass the --out folder of compile build")
    report = read_record(_inside(root, record), BuildReport, REBUILD)
    seen: set[tuple[str, str]] = set()
    targets = []
    for status in report.targets:
        if not _SKU_NAME.fullmatch(status.sku) or ".." in status.sku:
            raise InvalidInput(f"{record}: target SKU {status.sku!r} is not a SKU name; {REBUILD}")
        if (status.sku, status.precision) in seen:
            raise InvalidInput(f"{record}: target {status.sku}/{status.precision} is listed twice; {REBUILD}")
        seen.add((status.sku, status.precision))
        folder = root / status.sku / status.precision.value  # never the record's own `path`
        targets.append(_target(root, folder, status) if status.status == Status.OK else Target(status, folder))
    if not targets:
        raise InvalidInput(f"{record}: lists no targets; {REBUILD}")
    return BuildFolder(root, report, targets)


def _inside(root: Path, path: Path) -> Path:
    """``path``, refused when it (or a link on the way) leads out of the build folder or is not a regular file."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise InvalidInput(f"{path}: leads out of the build folder {root} (a link to {path.resolve()}); copy "
                           f"the folder without links or {REBUILD}")
    if not path.is_file():
        raise InvalidInput(f"{path}: missing or not a regular file; {REBUILD}")
    return path


def _target(root: Path, folder: Path, status: TargetStatus) -> Target:
    engine = read_record(_inside(root, folder / "engine.json"), EngineRecord, REBUILD)
    if (engine.sku, engine.precision) != (status.sku, status.precision):
        raise InvalidInput(f"{folder / 'engine.json'}: describes {engine.sku}/{engine.precision}, not the "
                           f"{status.sku}/{status.precision} build.json lists there; {REBUILD}")
    layers = read_record(_inside(root, folder / "layers.json"), LayersRecord, REBUILD)
    plan = _inside(root, folder / "engine.plan")
    if plan.stat().st_size != engine.size_bytes or file_sha256(plan) != engine.sha256:
        raise InvalidInput(f"{plan}: not the plan engine.json records (its size or sha256 differs); {REBUILD}")
    log = read_record_bytes(_inside(root, folder / "build.log"), REBUILD)
    if len(log) > MAX_LOG_BYTES:
        raise InvalidInput(f"{folder / 'build.log'}: larger than any build.log we write; {REBUILD}")
    return Target(status, folder, engine, layers, log.decode("utf-8", "replace"))


def source_model(build: BuildFolder, override: Path | None) -> OnnxModel:
    """The FP32 model the build was made from (``override``, or build.json's), shape-inferred, proven by its
    sha256 to be the one the build recorded."""
    path = Path(override) if override is not None else Path(build.report.model)
    hint = "pass the model with --model FILE" if override is None else "pass the model compile build was given"
    if not path.is_file():
        raise InvalidInput(f"{path}: the build's model is not there (build.json names it); {hint}")
    model = load_model(path, check=False)
    if model.sha256 != build.report.model_sha256:
        raise InvalidInput(f"{path}: not the model of this build (its sha256 {model.sha256[:12]}… is not the "
                           f"{build.report.model_sha256[:12]}… build.json records); {hint}")
    return model


def built_model(target: Target, source: OnnxModel, cache_dir: Path | None = None) -> tuple[Path | None, str]:
    """The model ``target``'s engine was built from (the source, its FP16 conversion or a Q/DQ model) and where it
    was found; None and where it was looked for when no candidate has the digest engine.json records."""
    engine = target.engine
    assert engine is not None
    if engine.precision == Precision.FP32:
        return (source.path, "the source model") if engine.built_model_sha256 == source.sha256 else \
            (None, "the source model's digest differs from built_model_sha256")
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    candidates = [Path(m["path"]) for m in _INPUT_FILENAME.finditer(target.log)]  # what TensorRT parsed
    if engine.precision == Precision.FP16:
        candidates.append(cache / "prepared" / source.sha256 / "fp16.onnx")
    else:
        folders = cache / "calibrations" / source.sha256
        candidates += sorted(folders.glob(f"{engine.precision}-*/model.onnx")) if folders.is_dir() else []
    for candidate in dict.fromkeys(candidates):
        if _is_built_model(candidate, engine):
            return candidate, str(candidate)
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates)) or "nowhere"
    return None, f"no model with the digest engine.json records (looked at {looked})"


def _is_built_model(path: Path, engine: EngineRecord) -> bool:
    """Whether ``path`` is a regular file whose digest (with its external data) is the engine's built model's;
    a calibration's Q/DQ model also needs its folder's calibration.json to be the one the build used."""
    try:
        if not path.is_file():  # not a FIFO or a device: nothing here may block or read without end
            return False
        if engine.calibration_sha256 is not None:
            record = path.parent / "calibration.json"
            if not record.is_file() or file_sha256(record) != engine.calibration_sha256:
                return False
        model = load_model(path, infer_shapes=False, check=False, digest=False)
        digest = finish_model_digest(hash_model_file(path), model.external_files)
    except (InvalidInput, OSError):
        return False
    return digest == engine.built_model_sha256
