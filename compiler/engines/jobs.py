"""Deciding the targets of `compile build`: every check that can fail before a build (exit 2/3), the model each
precision builds from (the source, its FP16 conversion, a calibration's Q/DQ model) and each target's cache key.
"""

from __future__ import annotations

import platform
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.backends import load_backend
from compiler.backends.base import BuildSpec
from compiler.cache.remote import configured, open_remote
from compiler.cache.reuse import open_tier
from compiler.core.digest import finish_model_digest, hash_model_file_mapped
from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.files import check_writable_folder, hash_json, stat_key, writable_folder
from compiler.core.options import BuildOptions
from compiler.core.paths import check_not_overwriting
from compiler.core.plugins import backend_kind
from compiler.core.profiles import (
    ProfileSet,
    load_profiles,
    load_sku_catalog,
    profiles_problem,
    static_profiles,
    validate_profiles,
)
from compiler.core.records import BUILD_FORMAT, CALIBRATION_FILES, CALIBRATION_RECORD, PRECISIONS, Precision, Progress
from compiler.data.dims import renamed_path
from compiler.data.protobuf_inputs import skim_inputs
from compiler.engines.cache import BuildCache
from compiler.engines.remote_tier import fetch_prepared, send_prepared

MODEL_FACTS = "model"
"""The build cache's facts kind for a model file: its inputs, external files and sha256."""

FileStats = list[tuple[str, list[Any]]]
"""(path, :func:`compiler.core.files.stat_key`) of a model file and its external data, taken before they were read."""


@dataclass(frozen=True)
class BuildJob:
    """One target: what to build, from which model, into which folder, under which cache key."""

    sku: str
    precision: Precision
    backend: str
    spec: BuildSpec
    key_material: dict[str, Any]
    """Everything that determines the engine except the built model's digest."""
    cache_root: Path
    use_cache: bool
    target_dir: Path
    model_digest: str | Future[str]
    """The source model's sha256, or a Future while it is computed on a second core beside the first build."""
    prepared_sha256: str | None
    """The digest of the model prepared for this precision (FP16 conversion, Q/DQ model); None when the build
    reads the source model itself (fp32)."""
    calibration_sha256: str | None
    source_stat: FileStats
    built_stat: FileStats
    """The same for the model actually built when that is another file (fp16, int8/fp8); empty otherwise."""
    remote_cache: str | None = None
    """The remote cache's URI (:mod:`compiler.cache.remote`), when one is configured and the cache is on."""
    explain: bool = False
    excluded: tuple[str, ...] = ()
    """Nodes its calibration kept in higher precision (calibration.json's ``excluded``)."""
    refusal: str | None = None
    """Why the target is not built though its inputs are valid (its calibration failed its gates): it fails, with
    this as its error, and the other targets go on."""

    @property
    def model_sha256(self) -> str:
        return self.model_digest if isinstance(self.model_digest, str) else self.model_digest.result()

    @property
    def built_sha256(self) -> str:
        """The digest of the model the engine is built from, whichever it is."""
        return self.prepared_sha256 or self.model_sha256

    @property
    def cache_key(self) -> str:
        return engine_key(self.key_material, self.built_sha256)

    @property
    def digest_pending(self) -> bool:
        return not isinstance(self.model_digest, str) and not self.model_digest.done()


def engine_key(material: dict[str, Any], model_digest: str | None) -> str:
    """The cache key of an engine: its key material and the digest of the model it is built from."""
    return hash_json({**material, "model": model_digest})


def plan_builds(
    model: str | Path,
    profiles: str | Path | None,
    skus: str | list[str],
    precisions: str | list[str],
    out: str | Path,
    options: BuildOptions | None = None,
    calibration_progress: Progress | None = None,
) -> list[BuildJob]:
    """Every check that can fail before a build, and the jobs that follow from them (the output folder is made,
    proven writable, last)."""
    options = options or BuildOptions()
    model, out = Path(model), Path(out)
    skus, precisions = _named_targets(skus, precisions)
    cache = BuildCache(options.cache_dir)
    writable_folder(
        cache.root, "--cache-dir" if options.cache_dir else "build cache (set --cache-dir or COMPILE_CACHE_DIR)"
    )
    if options.dim:  # TensorRT parses a renamed copy: its digest keys everything below
        model = renamed_path(model, options.dim, cache.root)
    model_stat = _stat_or_none(model)  # before anything reads the model
    source = _model_facts(model, model_stat, cache)
    profile_set = load_profiles(profiles) if profiles is not None else static_profiles(model, source["inputs"])
    errors = validate_profiles(profile_set, source["inputs"]) or _limit_errors(model, profile_set, cache)
    if errors:
        raise profiles_problem(profiles or model, errors, hint="see compile inspect --profiles")
    catalog = load_sku_catalog(extra=options.skus)
    targets = {name: catalog.skus[name] for name in dict.fromkeys(map(catalog.name_of, skus))}  # RTX-4090 too
    backends = _backends(targets, precisions, options)
    # before the costly part (calibration, FP16 conversion); the folders are made only once it has passed
    check_writable_folder(out, "--out")
    target_dirs = [out / sku / precision for sku in targets for precision in precisions]
    for folder in target_dirs:
        check_writable_folder(folder, "--out")
    check_not_overwriting(
        [out / "build.json"], _inputs(model, source["files"], profiles, options, cache), "--out", replaced=target_dirs
    )
    digest = source["sha256"]
    remote = configured(options.remote_cache) if options.use_cache else None
    if remote is not None:
        open_remote(remote)  # a URI it cannot be is refused now, before any work
    prepared = {p: _prepare(p, model, digest, options, cache, calibration_progress, remote) for p in precisions}
    excluded = {p: _excluded(options.calibration, p) if prepared[p][3] else () for p in precisions}
    refusals = {p: _failed_calibration(p, options, cache, digest) if prepared[p][3] else None for p in precisions}
    common = {
        "cache_root": cache.root,
        "use_cache": options.use_cache,
        "model_digest": digest,
        "source_stat": _files_stat(model, model_stat, source["files"]),
        "remote_cache": remote,
        "explain": options.explain,
    }
    jobs = []
    for sku, target in targets.items():
        backend = backends[target.backend if options.backend is None else options.backend]
        for precision in precisions:
            made = prepared[precision], excluded[precision], refusals[precision]
            jobs.append(_job(sku, target, backend, precision, *made, profile_set, options, out, common))
    writable_folder(out, "--out")
    return jobs


def _named_targets(skus: str | list[str], precisions: str | list[str]) -> tuple[list[str], list[Precision]]:
    """The SKUs and precisions asked for (one name or several), refused when none or unknown; precisions once each."""
    skus, precisions = ([names] if isinstance(names, str) else list(names) for names in (skus, precisions))
    if not skus:
        raise InvalidInput("no --sku given; name at least one SKU of the catalog (compile skus lists them)")
    if not precisions:
        raise InvalidInput("no --precision given; choose from " + ", ".join(PRECISIONS))
    for precision in precisions:
        if precision not in PRECISIONS:
            raise InvalidInput(f"unknown precision '{precision}'; choose from {', '.join(PRECISIONS)}")
    return skus, [Precision(p) for p in dict.fromkeys(precisions)]


def _backends(targets: dict, precisions: list[Precision], options: BuildOptions) -> dict:
    """The backend of each target's SKU (or --backend), loaded once each and asked whether it builds for the SKU's
    compute capability; fp8 refused for a SKU older than 8.9."""
    backends = {}
    for sku, target in targets.items():
        name = target.backend if options.backend is None else options.backend
        if name not in backends:
            backends[name] = load_backend(name)
        kind = backend_kind(name)
        if kind is not None and kind.needs_target_gpu:  # it builds on the GPU itself: the host is the SKU's machine
            problem = target.host_problem(platform.machine(), backends[name].version)
            if problem:
                raise EnvironmentProblem(f"SKU '{sku}': {problem}")
        backends[name].check_targets((target.compute_capability,))
    if Precision.FP8 in precisions:
        for sku, target in targets.items():
            if not target.takes_fp8:
                raise InvalidInput(
                    f"fp8 needs compute capability 8.9 or newer; SKU '{sku}' is "
                    f"{target.compute_capability}; drop fp8 or that SKU"
                )
    return backends


def _job(
    sku, target, backend, precision, prepared, excluded, refusal, profile_set, options, out: Path, common: dict
) -> BuildJob:
    """One SKU x precision: the build it runs and the key material of its cache entry."""
    built_model, built_sha, built_stat, calibration_sha = prepared
    spec = BuildSpec(
        model_path=built_model,
        profiles=tuple(profile_set.profiles),
        compute_capabilities=(target.compute_capability,),
        workspace_mb=options.workspace_mb,
        optimization_level=options.optimization_level,
        sku=sku,
        state_dir=common["cache_root"],
    )
    material = {
        "format": BUILD_FORMAT,
        "profiles": [p.model_dump() for p in spec.profiles],
        "precision": precision.value,
        "compute_capabilities": spec.compute_capabilities,
        "backend": [backend.name, backend.version],
        "options": spec.options(),
    }
    return BuildJob(
        sku=sku,
        precision=precision,
        backend=backend.name,
        spec=spec,
        key_material=material,
        target_dir=out / sku / precision,
        prepared_sha256=built_sha,
        calibration_sha256=calibration_sha,
        built_stat=built_stat,
        excluded=excluded,
        refusal=refusal,
        **common,
    )


def _inputs(
    model: Path, external: list[str], profiles: str | Path | None, options: BuildOptions, cache: BuildCache
) -> list[Path]:
    """Every file the build reads, and the cache it writes to: what no output of the run may overwrite or replace."""
    inputs = [model, *map(Path, external), *([Path(profiles)] if profiles is not None else []), cache.root]
    for folder, files in (
        *((c, (*CALIBRATION_FILES, CALIBRATION_RECORD)) for c in options.calibration),
        (options.data, ("preprocess.yaml",)),
    ):
        if folder is not None:
            inputs += [Path(folder), *(Path(folder) / name for name in files)]
    return inputs


def _stat_or_none(path: Path) -> list[Any] | None:
    try:
        return stat_key(path)
    except OSError:
        return None  # not a readable file: reading it raises the precise error


def _model_facts(
    path: Path, stat: list[Any] | None, cache: BuildCache, file_sha256: str | None = None
) -> dict[str, Any]:
    """The model's inputs, external data files and sha256, read (by :func:`skim_inputs`, or a full safe load when
    the skim cannot vouch for the file) only when the file changed since last time; ``file_sha256``, the file's
    sha256 when the caller has just verified it, is its digest when it has no external data (not hashed again).

    After a change the digest is left computing on a second core (``"sha256"`` is then a Future): an fp32 build
    starts at once and looks the cache up when the digest is known. A skimmed file is parsed in full there too,
    while the builds run: a file protobuf refuses fails the digest, and so the run, as invalid input.
    """
    if not path.is_file():
        from compiler.data.model import load_model

        load_model(path)  # raises the precise error
    memo: Path | None
    memo, facts = cache.recall(MODEL_FACTS, [path])
    if facts is not None:
        return facts
    if file_sha256 is not None:  # facts of the file as it was verified: kept under the stat taken before, or not
        memo = cache.recall(MODEL_FACTS, [path], stat=lambda _: stat)[0] if stat is not None else None
    # A thread of its own that ends with the digest: the CLI's exit waits for working threads, not idle ones.
    pool = ThreadPoolExecutor(1, thread_name_prefix="compile-digest")
    try:
        # one GIL-free update over a mapping of the file, so the Python work that follows runs beside it
        model_file = pool.submit(hash_model_file_mapped, path) if file_sha256 is None else None
        inputs, external_files = skim_inputs(path), ()
        skimmed = inputs is not None
        if not skimmed:
            # what the skim leaves to it (external data, anything unusual): the full safe load
            inputs, external_files = _parse(path)
        facts = {"inputs": inputs, "files": [str(f) for f in external_files]}

        def digest() -> str:
            if file_sha256 is not None and not external_files:
                sha = file_sha256
            else:
                hashed = model_file.result() if model_file else hash_model_file_mapped(path)
                sha = finish_model_digest(hashed, external_files)
            if skimmed:  # the skim reads only the way to the inputs: protobuf itself must accept the whole file
                _parse(path)
            if memo is not None:
                cache.memorize(memo, {**facts, "sha256": sha})
            return sha

        return {**facts, "sha256": pool.submit(digest)}
    finally:
        pool.shutdown(wait=False)  # queued work still runs


PROFILE_LIMITS = "profile-limits"
"""The build cache's facts kind for what a model's constants allow of a profiles file (errors, if any)."""


def _limit_errors(model: Path, profiles: ProfileSet, cache: BuildCache) -> list[str]:
    """The shapes of the profiles the model cannot run (:func:`compiler.data.shape_limits.profile_limit_errors`),
    found once per model file and profiles (by content: the file may be a pipe, read once)."""

    def compute() -> dict[str, Any]:
        from compiler.data.shape_limits import profile_limit_errors, weightless_model

        return {"errors": profile_limit_errors(weightless_model(model), profiles)}

    digest = hash_json(profiles.model_dump())
    return cache.remember(PROFILE_LIMITS, [model], compute, stat=lambda path: [*stat_key(path), digest])["errors"]


def _parse(path: Path) -> tuple[dict[str, Any], tuple[Path, ...]]:
    """The full safe load of a model (no checker, no shape inference): its input dims and external data files;
    InvalidInput naming what is wrong with it."""
    from compiler.data.model import load_model

    source = load_model(path, infer_shapes=False, check=False, digest=False)
    return source.input_dims(), source.external_files  # the parsed model, as large as the file, is not kept


def _calibration_for(folders: tuple[Path, ...], precision: Precision) -> Path | None:
    """The ``--calibration`` folder of ``precision``: the one whose calibration.json says so; for int8/fp8 the only
    folder given even if it says otherwise (opening it then names the mismatch); None when there is none (fp16
    then converts the model itself)."""
    from calibration.folder import read_calibration

    matching = [f for f in folders if read_calibration(Path(f)).record.precision == precision.value]
    if matching:
        return matching[0]
    if precision != Precision.FP16 and len(folders) == 1:
        return folders[0]
    if precision != Precision.FP16 and folders:
        raise InvalidInput(
            f"--calibration: none of {', '.join(map(str, folders))} is calibrated for {precision}; "
            f"run compile calibrate --precision {precision} and pass its folder too"
        )
    return None


def _failed_calibration(precision: Precision, options: BuildOptions, cache: BuildCache, model_sha) -> str | None:
    """Why ``precision``'s calibration (its ``--calibration`` folder, or the one ``--data`` made) is not built from:
    it failed its accuracy gates and ``--allow-failed`` was not given; None otherwise. A damaged verdict is refused
    (InvalidInput) even with ``--allow-failed``."""
    from calibration.folder import failed_gates

    given = _calibration_for(options.calibration, precision)
    folder = Path(given) if given is not None else _data_calibration(cache, model_sha, precision, options)
    failed = failed_gates(folder)
    if not failed or options.allow_failed:
        return None
    source = f"--calibration {folder}" if given is not None else f"--data {options.data} ({precision})"
    return (
        f"{source}: its calibration failed its accuracy gates ({failed[0]}"
        + (f"; and {len(failed) - 1} more" if len(failed) > 1 else "")
        + "); calibrate again (--exclude, --fallback auto, another method), or pass --allow-failed to build from it "
        "anyway"
    )


def _data_calibration(cache: BuildCache, model_sha, precision: Precision, options: BuildOptions) -> Path:
    """Where ``--data`` calibrates ``precision`` in the build cache."""
    model_sha = model_sha if isinstance(model_sha, str) else model_sha.result()
    return cache.root / "calibrations" / model_sha / f"{precision}-{options.method or 'minmax'}"


def _excluded(folders: tuple[Path, ...], precision: Precision) -> tuple[str, ...]:
    """What the calibration of ``precision`` kept in higher precision, for engine.json and the release."""
    from calibration.folder import read_calibration

    folder = _calibration_for(folders, precision)
    return tuple(read_calibration(Path(folder)).record.excluded) if folder is not None else ()


def _prepare(
    precision: Precision,
    model: Path,
    model_sha: str | Future[str],
    options: BuildOptions,
    cache: BuildCache,
    calibration_progress: Progress | None,
    remote: str | None,
) -> tuple[Path, str | None, FileStats, str | None]:
    """The ONNX model this precision builds from: (path, its digest or None for the model itself, the stat of its
    files, the calibration record's sha256)."""
    if precision == Precision.FP32:
        return model, None, [], None
    model_sha = model_sha if isinstance(model_sha, str) else model_sha.result()
    folder = _calibration_for(options.calibration, precision)
    if precision == Precision.FP16 and folder is None:
        from calibration import FP16_CONVERSION

        converted = cache.root / "prepared" / f"{model_sha}-c{FP16_CONVERSION}" / "fp16.onnx"
        key = (model_sha, FP16_CONVERSION)
        if not converted.is_file() and not (remote and fetch_prepared(remote, model, key, converted)):
            from calibration import convert_fp16

            convert_fp16(model, converted)  # writes a staging file and renames it into place
            if remote:
                send_prepared(remote, key, converted)
        return converted, *_prepared_digest(converted, cache, stat_key(converted)), None
    if folder is None and options.data is not None:
        from calibration import calibrate
        from compiler.core.options import CalibrationOptions

        folder = _data_calibration(cache, model_sha, precision, options)
        calibrate(
            model,
            options.data,
            folder,
            CalibrationOptions(precision=precision.value, method=options.method or "minmax"),
            staged=True,
            progress=calibration_progress,
            tier=open_tier(remote) if remote else None,
        )
    if folder is None:
        raise InvalidInput(
            f"{precision} needs calibration: pass --data DATA.npz to calibrate now, or run "
            f"compile calibrate --precision {precision} and pass its folder with --calibration DIR"
        )
    from calibration.folder import open_calibration

    calibrated = open_calibration(Path(folder), precision.value, model_sha)
    path_stat = _stat_or_none(calibrated.model)  # before anything reads it (verify names a missing file)
    [verified] = calibrated.verify([calibrated.model], cache.file_sha256)  # before anything parses it
    # refuses external data outside the folder
    digest, built_stat = _prepared_digest(calibrated.model, cache, path_stat, verified)
    calibrated.verify([Path(path) for path, _ in built_stat[1:]], cache.file_sha256)
    return calibrated.model, digest, built_stat, calibrated.content_sha256


def _prepared_digest(
    path: Path, cache: BuildCache, path_stat: list[Any] | None, file_sha256: str | None = None
) -> tuple[str, FileStats]:
    """The digest of a model the build reads instead of the source (FP16, Q/DQ), external data included, and the
    stat of its files (``path_stat``: taken before anything read it, None when there was none to take, which the
    build takes for a change); read like the source model, so its external data may not leave its folder either.
    ``file_sha256``: what a calibration record vouched for, the digest whatever the file holds by now (a file
    replaced since then then fails its target, its stat moved and its bytes another digest)."""
    facts = _model_facts(path, path_stat, cache, file_sha256)
    digest = facts["sha256"] if isinstance(facts["sha256"], str) else facts["sha256"].result()
    if file_sha256 is not None and not facts["files"]:
        digest = file_sha256
    return digest, _files_stat(path, path_stat, facts["files"])


def _files_stat(model: Path, model_stat: list[Any] | None, external: list[str]) -> FileStats:
    """(path, stat key) of a model, taken before it was read, and of its external data files: what the target
    compares after its build to know the model did not change meanwhile."""
    return [(str(model), model_stat), *((f, stat_key(Path(f))) for f in external)]
