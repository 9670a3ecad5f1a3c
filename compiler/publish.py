"""``compile publish``: a build folder becomes an immutable release in a store.

The folder is read and verified first (build.json, each target's engine.json, its plan's size; check.json when
present), so nothing is sent for a build that cannot be published. Then the blobs the store lacks go up, each
verified against its recorded sha256 as it is read, and the manifest is written last, create-only: a publisher
killed midway leaves blobs nobody refers to and no release, and a re-run completes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from compiler.errors import CheckFailed, Conflict, InvalidInput
from compiler.files import hash_json
from compiler.records import (
    CHECK_RECORD,
    BlobRef,
    BuildReport,
    CheckReport,
    EngineRecord,
    LayersRecord,
    Progress,
    ReleaseCheck,
    ReleaseContent,
    ReleaseEngine,
    ReleaseManifest,
    Status,
    read_record,
    read_record_bytes,
)
from compiler.releases import parse_manifest, provenance
from compiler.stores import Store, open_store
from compiler.stores.base import SHA256, VerifyingReader, check_name, check_version

BUILD_HINT = "give the folder `compile build --out` wrote"


class PublishResult(BaseModel):
    store: str
    name: str
    version: str
    status: str
    """``published``, or ``unchanged`` when the store already held this exact release."""
    engines: int
    content_sha256: str
    uploaded_blobs: int
    uploaded_bytes: int
    present_blobs: int
    skipped_targets: list[str]
    """Targets left out with ``--allow-failed`` (sku/precision: status)."""
    seconds: float


@dataclass
class _Blob:
    path: Path
    ref: BlobRef


@dataclass
class _Release:
    content: ReleaseContent
    blobs: list[_Blob] = field(default_factory=list)
    check_report: _Blob | None = None
    skipped: list[str] = field(default_factory=list)


def publish(build_dir: Path, store: str | Store, name: str, version: str, *, allow_failed: bool = False,
            progress: Progress | None = None) -> PublishResult:
    """Publish ``build_dir`` as ``name@version``. Raises CheckFailed (a failed build or check), InvalidInput (not a
    build folder), Conflict (the version exists with other content), EnvironmentProblem (the store)."""
    started = time.monotonic()
    check_name(name)
    check_version(version)
    release = _read_build(Path(build_dir), name, version, allow_failed)
    content_sha256 = hash_json(release.content.model_dump(mode="json"))
    store = store if isinstance(store, Store) else open_store(store, create=True)

    def result(status: str, uploaded: list[_Blob], present: int) -> PublishResult:
        return PublishResult(store=store.uri, name=name, version=version, status=status,
                             engines=len(release.content.engines), content_sha256=content_sha256,
                             uploaded_blobs=len(uploaded), uploaded_bytes=sum(b.ref.size_bytes for b in uploaded),
                             present_blobs=present, skipped_targets=release.skipped,
                             seconds=round(time.monotonic() - started, 3))

    existing = store.read_manifest(name, version)
    if existing is not None:
        _same_or_conflict(existing, content_sha256, store, name, version)
        return result("unchanged", [], 0)
    blobs = release.blobs + ([release.check_report] if release.check_report else [])
    uploaded, present = _upload_missing(store, name, blobs, progress)
    manifest = ReleaseManifest(content=release.content, content_sha256=content_sha256, published=provenance(),
                               check_report=release.check_report.ref if release.check_report else None)
    raced = store.create_manifest(name, version, manifest.model_dump_json(indent=2).encode())
    if raced is not None:  # another publisher wrote this version between our look and our write
        _same_or_conflict(raced, content_sha256, store, name, version)
        return result("unchanged", uploaded, present)
    return result("published", uploaded, present)


def _same_or_conflict(existing: bytes, content_sha256: str, store: Store, name: str, version: str) -> None:
    if parse_manifest(existing, store, name, version).content_sha256 != content_sha256:
        raise Conflict(f"{name}@{version} is already published in {store.uri} with other content; releases are "
                       "immutable: publish a new version")


def _upload_missing(store: Store, name: str, blobs: list[_Blob], progress: Progress | None) -> tuple[list[_Blob], int]:
    """Send the blobs the store lacks (by digest); a blob of the wrong size there is damaged and sent again."""
    uploaded: list[_Blob] = []
    unique = list({blob.ref.sha256: blob for blob in blobs}.values())
    for done, blob in enumerate(unique):
        if progress:
            progress("upload", done, len(unique))
        if store.blob_size(name, blob.ref.sha256) == blob.ref.size_bytes:
            continue
        with VerifyingReader(blob.path, blob.ref.sha256, blob.ref.size_bytes) as source:
            store.put_blob(name, blob.ref.sha256, source)
        uploaded.append(blob)
    if progress:
        progress("upload", len(unique), len(unique))
    return uploaded, len(unique) - len(uploaded)


def _read_build(build_dir: Path, name: str, version: str, allow_failed: bool) -> _Release:
    if not build_dir.is_dir():
        raise InvalidInput(f"{build_dir}: not a folder; {BUILD_HINT}")
    report = read_record(_inside(build_dir, Path("build.json")), BuildReport, BUILD_HINT)
    listed = [(t.sku, t.precision) for t in report.targets]
    twice = next((t for i, t in enumerate(listed) if t in listed[:i]), None)
    if twice is not None:
        raise InvalidInput(f"{build_dir / 'build.json'}: target {twice[0]}/{twice[1]} is listed twice; build "
                           f"{build_dir} again")
    problems = [f"{t.sku}/{t.precision}: {t.status}" + (f" ({t.errors[0]})" if t.errors else "")
                for t in report.failed]
    check, check_blob = _read_check(build_dir)
    if check is not None and not check.passed:
        problems.append(f"{CHECK_RECORD}: the check failed")
    if problems and not allow_failed:
        raise CheckFailed(f"{build_dir}: not publishable: {'; '.join(problems)}; fix the build (or pass "
                          "--allow-failed to publish the targets that succeeded)")
    engines, blobs = [], []
    for target in report.targets:
        if target.status == Status.OK:
            engine, files = _read_target(build_dir, target.sku, target.precision, report.model_sha256)
            engines.append(engine)
            blobs += files
    if not engines:
        raise CheckFailed(f"{build_dir}: no target built; nothing to publish")
    content = ReleaseContent(name=name, version=version, model_sha256=report.model_sha256,
                             model_name=Path(report.model).name, check=check,
                             engines=sorted(engines, key=lambda e: (e.sku, e.precision)))
    return _Release(content, blobs, check_blob, [p for p in problems if not p.startswith(CHECK_RECORD)])


def _read_target(build_dir: Path, sku: str, precision: str, model_sha256: str) -> tuple[ReleaseEngine, list[_Blob]]:
    """One built target, found where `compile build` puts it (``<sku>/<precision>/``, not the path build.json
    recorded, which is as the user typed it) and checked against what build.json says it is."""
    folder = _inside(build_dir, Path(sku) / precision)
    hint = f"build {build_dir} again"
    record = read_record(_inside(build_dir, Path(sku) / precision / "engine.json"), EngineRecord, hint)
    if (record.sku, record.precision, record.model_sha256) != (sku, precision, model_sha256):
        raise InvalidInput(f"{folder / 'engine.json'}: records {record.sku}/{record.precision} of model "
                           f"{record.model_sha256[:12]}, not {sku}/{precision} of {model_sha256[:12]} as build.json "
                           f"says; {hint}")
    if not SHA256.fullmatch(record.sha256):  # it names a blob: checked before any request, like every key
        raise InvalidInput(f"{folder / 'engine.json'}: sha256 {record.sha256!r} is not a sha256 digest; {hint}")
    plan = _inside(build_dir, Path(sku) / precision / "engine.plan")
    if not plan.is_file() or plan.stat().st_size != record.size_bytes:
        raise InvalidInput(f"{plan}: missing or not the {record.size_bytes} bytes engine.json records; {hint}")
    files = [_Blob(plan, BlobRef(sha256=record.sha256, size_bytes=record.size_bytes))]
    layers_path = folder / "layers.json"
    layers = None
    if layers_path.exists() or layers_path.is_symlink():
        layers_path = _inside(build_dir, Path(sku) / precision / "layers.json")
        read_record(layers_path, LayersRecord, hint)
        layers = _blob_of(layers_path, hint)
        files.append(layers)
    engine = ReleaseEngine(sku=record.sku, compute_capabilities=record.compute_capabilities,
                           precision=record.precision, profiles=record.profiles, backend=record.backend,
                           builder_options=record.builder_options, plan=files[0].ref,
                           layers=layers.ref if layers else None, built_model_sha256=record.built_model_sha256,
                           calibration_sha256=record.calibration_sha256, plan_header=record.plan_header)
    return engine, files


def _read_check(build_dir: Path) -> tuple[ReleaseCheck | None, _Blob | None]:
    """check.json's verdict, when `compile check` ran on the folder."""
    path = build_dir / CHECK_RECORD
    if not (path.exists() or path.is_symlink()):
        return None, None
    path = _inside(build_dir, Path(CHECK_RECORD))
    hint = f"run compile check {build_dir} again"
    report = read_record(path, CheckReport, hint)
    return ReleaseCheck(passed=report.passed, summary=report.counts), _blob_of(path, hint)


def _blob_of(path: Path, hint: str) -> _Blob:
    import hashlib

    data = read_record_bytes(path, hint)
    return _Blob(path, BlobRef(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)))


def _inside(root: Path, relative: Path) -> Path:
    """``root / relative``, refused when a part is not a plain name or a link leads out of the build folder."""
    if any(part in ("", ".", "..") or "/" in part or "\0" in part for part in relative.parts) or relative.is_absolute():
        raise InvalidInput(f"{root}/build.json: target {relative} is not a folder name; build {root} again")
    path = root / relative
    if not path.resolve().is_relative_to(root.resolve()):
        raise InvalidInput(f"{path}: leads out of the build folder {root} through a symbolic link; build again")
    return path

