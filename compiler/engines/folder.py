"""The one reader of a build folder (``compile build``'s output), for check, publish and the pipeline: every
record through :func:`~compiler.core.record_files.read_record`, every path derived from the folder itself (never
taken from a record), and each model an engine was built from found and proven by its digest before anything reads
it as that model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.core.digest import finish_model_digest, hash_model_file
from compiler.core.errors import InvalidInput
from compiler.core.files import default_cache_dir, file_sha256
from compiler.core.record_files import parse_record, read_record, read_record_bytes
from compiler.core.records import SKU_NAME, BuildReport, EngineRecord, LayersRecord, Precision, Status, TargetStatus
from compiler.stores.base import SHA256

if TYPE_CHECKING:  # reading a build folder (publish, a reused check) must not import onnx
    from compiler.data.model import OnnxModel

REBUILD = "re-run compile build"
MAX_LOG_BYTES = 64 << 20
"""build.log holds the builder's INFO and WARNING lines (KBs); a bigger file is not ours."""
_INPUT_FILENAME = re.compile(r"^\[INFO\] Input filename:\s+(?P<path>.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Target:
    """One SKU x precision of the build: its status and, when it built, its records, log and plan."""

    status: TargetStatus
    folder: Path
    engine: EngineRecord | None = None
    layers: LayersRecord | None = None
    layers_digest: tuple[str, int] | None = None
    """layers.json's (sha256, size), from the very bytes that were validated."""
    log: str | None = None
    plan: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.status.sku}/{self.status.precision}"

    @property
    def missing(self) -> bool:
        """It built, yet its folder holds no engine.plan (removed since)."""
        return self.status.status == Status.OK and self.engine is None


@dataclass(frozen=True)
class BuildFolder:
    root: Path
    report: BuildReport
    targets: list[Target]

    @property
    def built(self) -> list[Target]:
        return [t for t in self.targets if t.engine is not None]


def read_build(root: Path, *, hash_plans: bool = True) -> BuildFolder:
    """The build folder's build.json and, for every target that built, its engine.json, layers.json and
    build.log when there, each checked against the others and the plan against engine.json's size (and sha256,
    unless ``hash_plans`` is off for a reader that hashes the plan as it streams it). A target that built but
    has no engine.plan any more is returned as :attr:`Target.missing`, for the caller to judge."""
    root = Path(root)
    record = root / "build.json"
    if not root.is_dir():
        raise InvalidInput(f"{root}: not a build folder (not a folder at all); pass the --out folder of compile build")
    if not record.is_file():
        raise InvalidInput(f"{root}: not a build folder (no build.json); pass the --out folder of compile build")
    report = read_record(_inside(root, record), BuildReport, REBUILD)
    seen: set[tuple[str, str]] = set()
    targets = []
    for status in report.targets:
        if not SKU_NAME.fullmatch(status.sku) or ".." in status.sku:
            raise InvalidInput(f"{record}: target SKU {status.sku[:80]!r} is not a SKU name; {REBUILD}")
        if (status.sku, status.precision) in seen:
            raise InvalidInput(f"{record}: target {status.sku}/{status.precision} is listed twice; {REBUILD}")
        seen.add((status.sku, status.precision))
        folder = root / status.sku / status.precision.value  # never the record's own `path`
        plan = folder / "engine.plan"
        built = status.status == Status.OK and (plan.exists() or plan.is_symlink())
        targets.append(
            _target(root, folder, status, report.model_sha256, hash_plans) if built else Target(status, folder)
        )
    if not targets:
        raise InvalidInput(f"{record}: lists no targets; {REBUILD}")
    return BuildFolder(root, report, targets)


def _inside(root: Path, path: Path) -> Path:
    """``path``, refused when it (or a link on the way) leads out of the build folder or is not a regular file."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise InvalidInput(
            f"{path}: leads out of the build folder {root} (a link to {path.resolve()}); copy "
            f"the folder without links or {REBUILD}"
        )
    if not path.is_file():
        raise InvalidInput(f"{path}: missing or not a regular file; {REBUILD}")
    return path


def _optional(root: Path, path: Path) -> Path | None:
    return _inside(root, path) if path.exists() or path.is_symlink() else None


def _target(root: Path, folder: Path, status: TargetStatus, model_sha256: str, hash_plan: bool) -> Target:
    engine = read_record(_inside(root, folder / "engine.json"), EngineRecord, REBUILD)
    if (engine.sku, engine.precision, engine.model_sha256) != (status.sku, status.precision, model_sha256):
        raise InvalidInput(
            f"{folder / 'engine.json'}: describes {engine.sku}/{engine.precision} of model "
            f"{engine.model_sha256[:12]}, not the {status.sku}/{status.precision} of "
            f"{model_sha256[:12]} build.json lists there; {REBUILD}"
        )
    if not SHA256.fullmatch(engine.sha256):  # it names a blob in a store: checked like every key
        raise InvalidInput(f"{folder / 'engine.json'}: sha256 {engine.sha256[:80]!r} is not a sha256 digest; {REBUILD}")
    plan = _inside(root, folder / "engine.plan")
    if plan.stat().st_size != engine.size_bytes or (hash_plan and file_sha256(plan) != engine.sha256):
        raise InvalidInput(f"{plan}: not the plan engine.json records (its size or sha256 differs); {REBUILD}")
    layers, layers_digest = None, None
    layers_path = _optional(root, folder / "layers.json")
    if layers_path is not None:
        data = read_record_bytes(layers_path, REBUILD)
        layers = parse_record(data, layers_path, LayersRecord, REBUILD)
        layers_digest = (hashlib.sha256(data).hexdigest(), len(data))
    log = None
    log_path = _optional(root, folder / "build.log")
    if log_path is not None:
        data = read_record_bytes(log_path, REBUILD)
        if len(data) > MAX_LOG_BYTES:
            raise InvalidInput(f"{log_path}: larger than any build.log we write; {REBUILD}")
        log = data.decode("utf-8", "replace")
    return Target(status, folder, engine, layers, layers_digest, log, plan)


def source_model(
    build: BuildFolder, override: Path | None, dims: tuple[str, ...] = (), cache_dir: Path | None = None
) -> OnnxModel:
    """The FP32 model the build was made from (``override``, or build.json's, renamed by ``dims`` as the build's
    ``--dim`` renamed it), shape-inferred, proven by its sha256 to be the one the build recorded."""
    path = Path(override) if override is not None else Path(build.report.model)
    hint = "pass the model with --model FILE" if override is None else "pass the model compile build was given"
    if not path.is_file():
        raise InvalidInput(f"{path}: the build's model is not there (build.json names it); {hint}")
    from compiler.data.dims import renamed_path
    from compiler.data.model import load_model

    model = load_model(renamed_path(path, dims, cache_dir or default_cache_dir()), check=False)  # path without dims
    if model.sha256 != build.report.model_sha256:
        raise InvalidInput(
            f"{path}: not the model of this build (its sha256 {model.sha256[:12]}… is not the "
            f"{build.report.model_sha256[:12]}… build.json records); {hint}"
            + ("" if dims else " (and the --dim renames the build was given)")
        )
    return model


def built_model(
    target: Target, source: OnnxModel, cache_dir: Path | None = None, calibrations: tuple[Path, ...] = ()
) -> tuple[Path | None, str]:
    """The model ``target``'s engine was built from (the source, its FP16 conversion or a Q/DQ model) and where it
    was found; None and where it was looked for when no candidate has the digest engine.json records.

    Looked for, in order: the calibration folders given now (``calibrations``), the build cache's copy kept by
    digest at build time, the file TensorRT parsed (build.log), the cache's calibrations and FP16 conversions.
    The digest alone proves a candidate: the same bytes measure the same accuracy wherever they are."""
    engine = target.engine
    assert engine is not None
    if engine.precision == Precision.FP32:
        return (
            (source.path, "the source model")
            if engine.built_model_sha256 == source.sha256
            else (None, "the source model's digest differs from built_model_sha256")
        )
    from compiler.engines.cache import BuildCache

    cache = BuildCache(Path(cache_dir) if cache_dir else default_cache_dir())
    candidates = [Path(folder) / "model.onnx" for folder in calibrations]
    candidates.append(cache.model_entry(engine.built_model_sha256) / "model.onnx")
    candidates += [Path(m["path"]) for m in _INPUT_FILENAME.finditer(target.log or "")]  # what TensorRT parsed
    if engine.precision == Precision.FP16:
        candidates += sorted(cache.root.glob(f"prepared/{source.sha256}-c*/fp16.onnx"))  # of every conversion version
    else:
        folders = cache.root / "calibrations" / source.sha256
        candidates += sorted(folders.glob(f"{engine.precision}-*/model.onnx")) if folders.is_dir() else []
    for candidate in dict.fromkeys(candidates):
        if _is_built_model(candidate, engine):
            return candidate, str(candidate)
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates)) or "nowhere"
    return None, f"no model with the digest engine.json records (looked at {looked})"


def _is_built_model(path: Path, engine: EngineRecord) -> bool:
    """Whether ``path`` is a regular file whose digest (with its external data) is the engine's built model's."""
    try:
        if not path.is_file():  # not a FIFO or a device: nothing here may block or read without end
            return False
        from compiler.data.model import load_model

        model = load_model(path, infer_shapes=False, check=False, digest=False)
        digest = finish_model_digest(hash_model_file(path), model.external_files)
    except (InvalidInput, OSError):
        return False
    return digest == engine.built_model_sha256
