"""``compile export triton``: a release as a Triton model repository, one plan per compute capability.

    DIR/<model>/config.pbtxt          platform tensorrt_plan, cc_model_filenames, batching, warmup, profiles
    DIR/<model>/<N>/<sku>-<precision>.plan
    DIR/<model>/warmup/golden-<digest>  one golden sample per input (when the model batches)

Triton's TensorRT backend runs datacenter TensorRT, and a plan loads only under the runtime versions its manifest
entry names: a TensorRT-RTX plan, or one the target Triton release's TensorRT may not load, is refused before
anything is fetched (exit 2), naming the plan, its runtime and what to do. Triton picks the plan by the GPU's
compute capability as the exact string ``"<major>.<minor>"`` in ``cc_model_filenames``; ``default_model_filename``
is left unset unless asked, so a GPU the release has no engine for fails to load the model instead of loading a
plan built for another GPU. Every plan is fetched through the pull's verified path (streamed, hashed, compared
with the manifest) into a staged folder renamed into place, and its header must not name another runtime than
the manifest claims; an existing version folder is never overwritten with other content (exit 4).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from compiler.core.errors import CheckFailed, Conflict, EnvironmentProblem, InvalidInput
from compiler.core.files import (
    NotRegularFile,
    check_writable_folder,
    default_cache_dir,
    open_lock_file,
    sweep_partials,
    writable_folder,
    write_atomic,
)
from compiler.core.options import TritonOptions
from compiler.core.plugins import TRITON_RUNTIME
from compiler.core.records import ReleaseEngine, ReleaseManifest
from compiler.core.runtimes import FAMILY_NAMES, claimed_by_header
from compiler.export import engine_per_capability
from compiler.export.triton_config import WARMUP_FOLDER, TritonConfig, parse_config, render_config
from compiler.export.triton_releases import releases_running, tensorrt_of
from compiler.releases.fetch import fetch_verified, resolve_trusted
from compiler.releases.golden import read_golden
from compiler.releases.pull import release_warnings
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

if TYPE_CHECKING:
    from compiler.releases.manifest import Resolved

MODEL_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
CONFIG = "config.pbtxt"


class TritonExport(BaseModel):
    release: str
    version: str
    model: str
    model_dir: str
    model_version: int
    """The numeric version folder written (``--model-version``)."""
    triton: str
    """The Triton the repository is for, and the TensorRT it runs."""
    status: str
    """``written``, or ``unchanged`` when the repository already held this version with these plans."""
    plans: dict[str, str]
    """Compute capability -> plan file (in the version folder)."""
    sha256: dict[str, str]
    """Plan file -> sha256, as verified while written."""
    max_batch_size: int
    """0 when Triton cannot batch the model; ``batching`` says why."""
    preferred_batch_sizes: list[int]
    batching: str
    warmup: list[str]
    """The files written to ``<model>/warmup/`` for ``model_warmup`` (empty: ``batching`` or the config says why)."""
    notes: list[str] = []
    """What the server needs besides the repository (a version-compatible plan: Triton's version-compatible
    TensorRT backend setting)."""
    seconds: float
    warnings: list[str] = []
    """The release's failures (its check failed, or it was published with --allow-failed), one per line."""


def export_triton(
    store: str | Store,
    ref: str | Ref,
    repo: Path,
    options: TritonOptions | None = None,
    *,
    cache_dir: Path | None = None,
    **keywords: Any,
) -> TritonExport:
    """Write ``ref`` into the Triton model repository ``repo`` as ``<model>/<model_version>/`` for the Triton
    ``options.triton_release`` (``YY.MM``; or name its TensorRT with ``triton_tensorrt``). ``default_plan`` (a
    compute capability of the release) also sets ``default_model_filename``. ``triton_version`` is the deprecated
    name of ``model_version``. With ``verify_key`` (else ``$COMPILE_VERIFY_KEY``) nothing is written unless the
    release is signed by it. The options may be given as keywords instead (``triton_release="25.10"``)."""
    started = time.monotonic()
    options = TritonOptions.given(options, keywords)
    repo = Path(repo)
    version_folder = _model_version(options.model_version, options.triton_version)
    check_writable_folder(repo, "--repo")  # made (parents too) once the release is resolved and trusted
    model_name = options.model_name
    if model_name is not None and (not MODEL_NAME.fullmatch(model_name) or ".." in model_name):
        raise InvalidInput(f"--model-name {model_name!r}: use 1 to 128 of A-Z a-z 0-9 . _ - (a folder name)")
    triton, tensorrt = tensorrt_of(options.triton_release, options.triton_tensorrt)
    store = open_store(store)
    # with a key: nothing is written for an unsigned release
    resolved = resolve_trusted(store, ref, options.verify_key, allow_yanked=options.allow_yanked)
    manifest = resolved.manifest
    name = model_name or manifest.content.name
    engines = _engines(manifest, options.precision)
    _loadable(manifest, engines, triton, tensorrt)
    plans = _plan_files(engines)
    default_plan = options.default_plan
    if default_plan is not None and default_plan not in plans:
        raise InvalidInput(
            f"--default-plan {default_plan}: the release has no engine for that compute capability; "
            f"it has {', '.join(plans)}"
        )
    cache = (cache_dir or default_cache_dir()) / "pulls" if options.use_cache else None
    golden = read_golden(store, manifest, cache) if manifest.content.golden is not None else None
    config = render_config(name, manifest, engines, plans, default_plan, golden.inputs if golden else None)
    files = {_file_name(e): e for e in engines if _file_name(e) in plans.values()}  # what the config names
    result = TritonExport(
        release=str(resolved.ref),
        version=resolved.version,
        model=name,
        model_dir=str(repo / name),
        model_version=version_folder,
        triton=triton,
        status="written",
        plans=plans,
        sha256=_digests(files),
        max_batch_size=config.batching.max_batch_size,
        preferred_batch_sizes=config.batching.preferred,
        batching=config.batching.reason or f"max_batch_size {config.batching.max_batch_size} from the profiles",
        warmup=sorted(config.warmup),
        notes=_notes(engines),
        seconds=0,
        warnings=release_warnings(manifest),
    )
    # two exports into one model: one at a time, so a config never names the other's
    with model_lock(writable_folder(repo, "--repo"), name):
        result.status = _write_model(store, resolved, files, config, repo / name / str(version_folder), cache)
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _write_model(
    store: Store,
    resolved: Resolved,
    files: dict[str, ReleaseEngine],
    config: TritonConfig,
    target: Path,
    cache: Path | None,
) -> str:
    """Write the model's version folder (``written``), or find it holding these very plans (``unchanged``), then
    its warmup files and config.pbtxt last: Triton sees the model once its files are there. What stands there is
    checked first (a conflict is exit 4); called under :func:`model_lock`."""
    model_dir, config_path = target.parent, target.parent / CONFIG
    _regular_or_absent(config_path)
    if config_path.is_file() and not _same_model(config_path.read_bytes(), config.text.encode()):
        raise Conflict(
            f"{config_path}: describes other plans, inputs, outputs or batching than "
            f"{resolved.ref}; export to another --model-name or --repo, or remove that model folder"
        )
    _write_warmup(model_dir / WARMUP_FOLDER, config.warmup, check_only=True)
    status = "written"
    if target.exists():
        _same_or_conflict(target, _digests(files), resolved.ref)
        status = "unchanged"
    else:
        created = not model_dir.exists()
        model_dir.mkdir(exist_ok=True)
        sweep_partials(model_dir)  # version folders that exports killed midway left
        try:
            _stage(store, resolved.manifest.content.name, files, target, cache)
        except BaseException:
            if created:  # a failed export leaves no empty model folder behind
                with contextlib.suppress(OSError):
                    model_dir.rmdir()
            raise
    _write_warmup(model_dir / WARMUP_FOLDER, config.warmup)
    write_atomic(config_path, config.text.encode())
    return status


def _model_version(model_version: int | None, triton_version: int | None) -> int:
    if triton_version is not None:
        import warnings

        warnings.warn(
            "export_triton(triton_version=...) is deprecated: it names the model's version folder; use model_version",
            DeprecationWarning,
            stacklevel=3,
        )
    if triton_version is not None and model_version is not None and triton_version != model_version:
        raise InvalidInput(
            f"--triton-version {triton_version} and --model-version {model_version} disagree; "
            "--triton-version is the deprecated name of --model-version: give only --model-version"
        )
    chosen = model_version if model_version is not None else triton_version if triton_version is not None else 1
    flag = "--model-version" if model_version is not None or triton_version is None else "--triton-version"
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen < 2**63:
        raise InvalidInput(f"{flag} {chosen}: give a positive integer (Triton's model version folders are numbers)")
    return chosen


def _loadable(manifest: ReleaseManifest, engines: list[ReleaseEngine], triton: str, tensorrt: str) -> None:
    """Refuse (exit 2) an engine Triton's TensorRT backend cannot load, naming it, its runtime and what to do."""
    release = f"{manifest.content.name}@{manifest.content.version}"
    for engine in engines:
        runtime, plan = engine.runtime, _file_name(engine)
        if runtime.family != TRITON_RUNTIME:
            raise InvalidInput(
                f"{release}: plan {plan} is a {runtime.name} plan; Triton's TensorRT backend ({triton}) runs "
                f"datacenter TensorRT, which cannot load it: build the {engine.sku} engines with datacenter TensorRT "
                f"on a runner of that SKU (backend: tensorrt) and publish them, or serve this plan where the "
                f"TensorRT-RTX runtime loads it (compile export rtx)"
            )
        if not runtime.loads(tensorrt):
            matching = releases_running(runtime.loads)
            raise InvalidInput(
                f"{release}: plan {plan} is a {runtime.name} plan (loads with {runtime.loads_with}), and "
                f"{triton} cannot load it: "
                + (
                    f"pick a Triton release that runs a TensorRT it loads ({', '.join(matching)}), "
                    if matching
                    else "no Triton release of the table runs a TensorRT it loads; "
                )
                + f"or build the {engine.sku} engine again with TensorRT {tensorrt}"
            )


def _notes(engines: list[ReleaseEngine]) -> list[str]:
    if any(e.runtime.version_compatible for e in engines):
        return [
            "version-compatible plans: start Triton with --backend-config=tensorrt,version-compatible=true "
            "(they carry a lean runtime Triton runs only when told to)"
        ]
    return []


def _same_model(existing: bytes, written: bytes) -> bool:
    """Whether config.pbtxt already describes this model: the same message apart from its warmup samples (which
    name golden files by content, so the next release of the same plans is the same model, its next version)."""
    old, new = parse_config(existing), parse_config(written)
    if old is None or new is None:
        return False
    old.ClearField("model_warmup")
    new.ClearField("model_warmup")
    return old == new


def _write_warmup(folder: Path, files: dict[str, bytes], *, check_only: bool = False) -> None:
    """The golden samples Triton warms the model up with; a file of that name (its content digest) holding other
    bytes is never replaced (exit 4), and that is found before anything is written (``check_only``)."""
    if not files:
        return
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise Conflict(f"{folder}: not a folder of warmup files; remove it or export to another --model-name")
    for file, data in sorted(files.items()):
        path = folder / file
        if path.is_symlink() or (
            path.exists() and (not path.is_file() or path.stat().st_size != len(data) or path.read_bytes() != data)
        ):
            raise Conflict(f"{path}: holds other bytes than the golden sample it is named for; remove it")
        if not check_only and not path.exists():
            folder.mkdir(exist_ok=True)
            write_atomic(path, data)


def _engines(manifest: ReleaseManifest, precision: str | None) -> list[ReleaseEngine]:
    release = f"{manifest.content.name}@{manifest.content.version}"
    engines = [e for e in manifest.content.engines if precision is None or e.precision == precision]
    precisions = sorted({e.precision.value for e in manifest.content.engines})
    if not engines:
        what = f"no {precision} engine" if precision else "no engines"
        raise InvalidInput(f"{release} has {what}" + (f"; it has {', '.join(precisions)}" if precisions else ""))
    if len({e.precision for e in engines}) > 1:
        raise InvalidInput(
            f"{release} has engines of {', '.join(precisions)}; one Triton model serves one "
            f"precision: add --precision {' or '.join(precisions)}"
        )
    return engines


def _file_name(engine: ReleaseEngine) -> str:
    return f"{engine.sku}-{engine.precision.value}.plan"


def _plan_files(engines: list[ReleaseEngine]) -> dict[str, str]:
    """Compute capability -> plan file, in compute capability order."""
    owner = engine_per_capability(
        engines, "Triton picks plans by compute capability only: publish one of them per compute capability"
    )
    plans = {capability: _file_name(engine) for capability, engine in owner.items()}
    return dict(sorted(plans.items(), key=lambda item: tuple(int(p) for p in item[0].split("."))))


def _stage(store: Store, name: str, files: dict[str, ReleaseEngine], target: Path, cache: Path | None) -> None:
    """Fetch every plan verified into a hidden sibling, then rename it to ``target`` in one step."""
    staged = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.partial")
    staged.mkdir()
    try:
        for file, engine in files.items():
            fetch_verified(store, name, engine.plan.sha256, engine.plan.size_bytes, staged / file, cache)
            with open(staged / file, "rb") as handle:
                claimed = claimed_by_header(handle.read(4))
            if claimed is not None and claimed != engine.runtime.family:
                raise CheckFailed(
                    f"store {store.uri}: {name}'s plan {file} claims to be a {engine.runtime.name} plan "
                    f"but its header is a {FAMILY_NAMES[claimed]} plan's; nothing was exported; "
                    "republish the release from its build folder"
                )
        try:
            os.rename(staged, target)  # fails if another export put the version there meanwhile
        except OSError:
            if not target.exists():
                raise
            _same_or_conflict(target, _digests(files), name)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _digests(files: dict[str, ReleaseEngine]) -> dict[str, str]:
    """Plan file -> the sha256 the manifest records for it: what the version folder must hold."""
    return {file: engine.plan.sha256 for file, engine in files.items()}


def _same_or_conflict(target: Path, expected: dict[str, str], ref: object) -> None:
    found = {}
    for path in sorted(target.iterdir()) if target.is_dir() else []:
        if not path.is_file() or path.is_symlink():
            found[path.name] = "not a plain file"
            continue
        with open(path, "rb") as handle:
            found[path.name] = hashlib.file_digest(handle, "sha256").hexdigest()
    if found != expected:
        raise Conflict(
            f"{target}: this Triton version folder holds other files than {ref}'s plans; pass another "
            "--model-version (a new number), or remove it"
        )


def _regular_or_absent(path: Path) -> None:
    """config.pbtxt is replaced whole, never written through: what stands there must be a plain file (a link, a
    FIFO or a folder is someone else's, refused rather than replaced or read)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise InvalidInput(
            f"{path}: not a regular file (a link, FIFO or folder stands there); remove it, or export "
            "to another --model-name"
        )


@contextlib.contextmanager
def model_lock(repo: Path, name: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``REPO/.<model>.lock`` while an export writes that model (released when the file
    closes, also when the process dies). Opened without following a link or blocking on a FIFO that stands there
    (O_NOFOLLOW, O_NONBLOCK); anything but a regular file is refused."""
    path = repo / f".{name}.lock"
    try:
        lock = open_lock_file(path)
    except NotRegularFile as exc:
        raise InvalidInput(
            f"--repo {repo}: {path.name} is {exc.what}, not the lock file exports use; remove it"
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"--repo {repo}: cannot open {path.name} ({exc.strerror or exc})") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
