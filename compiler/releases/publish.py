"""``compile publish``: a build folder becomes an immutable release in a store.

The folder is read and verified first (build.json, each target's engine.json, its plan's size; check.json when
present), so nothing is sent for a build that cannot be published. Then the blobs the store lacks go up, each
verified against its recorded sha256 as it is read, and the manifest is written last, create-only: a publisher
killed midway leaves blobs nobody refers to and no release, and a re-run completes it. A lease taken before the
first look at the store keeps every blob the release names from ``compile gc`` until the manifest is there
(:mod:`compiler.cache.lease`); a publish that outlived its lease, or found a gc sweeping, looks again before its
manifest and sends what went.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from compiler.cache.lease import Lease
from compiler.core.errors import CheckFailed, Conflict, EnvironmentProblem, InvalidInput
from compiler.core.files import hash_json
from compiler.core.options import PublishOptions
from compiler.core.record_files import Record, parse_record, read_record_bytes
from compiler.core.records import (
    CHECK_RECORD,
    GOLDEN_FILE,
    GOLDEN_MAX_BYTES,
    BlobRef,
    BuildReport,
    CheckReport,
    GoldenRecord,
    Progress,
    ReleaseCheck,
    ReleaseContent,
    ReleaseEngine,
    ReleaseManifest,
    StagedPart,
    TensorSignature,
)
from compiler.core.runtimes import runtime_of
from compiler.engines.folder import Target, read_build
from compiler.releases.attest import attest
from compiler.releases.manifest import damaged, holds, provenance, refuse_shadowing
from compiler.releases.provenance import BuildContext
from compiler.releases.repair import repair_blobs
from compiler.stores import Store, open_store
from compiler.stores.base import VerifyingReader, check_name, check_version, staging_key

if TYPE_CHECKING:
    from compiler.backends.base import TensorRTBackend


class PublishResult(BaseModel):
    store: str
    name: str
    version: str
    status: str
    """``published``; ``unchanged`` when the store already held this exact release (``repaired`` when it did but
    ``--repair`` replaced damaged blobs of it: counted as sent); ``staged`` or ``already staged`` for one job's
    part of a sharded release."""
    engines: int
    content_sha256: str
    uploaded_blobs: int
    uploaded_bytes: int
    present_blobs: int
    skipped_targets: list[str]
    """Targets left out with ``--allow-failed`` (sku/precision: status)."""
    seconds: float
    signature: str = "unsigned"
    """``written``, ``already there`` (the first signature stays) or ``unsigned`` (no key given)."""
    provenance: str = ""
    """``written`` or ``already there``; empty for a staged part."""
    public_key: str | None = None
    """Signed with an HSM or KMS key: its public half (PEM), which verifiers give to ``compile verify --key``."""
    signed_by: str | None = None
    """Signed keyless: the CI identity Fulcio certified (``compile verify --identity``)."""
    model_signature: str | None = None
    """Signed: the OpenSSF model_signing signature of the pulled release, ``written``, ``already there`` or why
    none was written (docs/provenance.md)."""


@dataclass
class _Blob:
    path: Path
    ref: BlobRef


@dataclass
class Release:
    """What a set of build folders publishes: the content, and the files behind its blobs."""

    content: ReleaseContent
    blobs: list[_Blob] = field(default_factory=list)
    check_reports: list[_Blob] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)

    @functools.cached_property
    def content_sha256(self) -> str:
        return hash_json(self.content.model_dump(mode="json"))


def publish(
    build_dirs: Path | list[Path],
    store: str | Store,
    name: str,
    version: str,
    options: PublishOptions | None = None,
    *,
    progress: Progress | None = None,
    signer=None,
    context: BuildContext | None = None,
) -> PublishResult:
    """Publish one or more build folders (of one model) as ``name@version``, with its provenance, signed by
    ``signer`` (:func:`compiler.releases.attest.signer_of`) when given. Raises CheckFailed (a failed build or
    check, unless ``options.allow_failed``), InvalidInput (not a build folder), Conflict (the version exists with
    other content), EnvironmentProblem (the store). ``options.repair``: first read back every blob of the folders
    the store holds and replace the damaged ones (:mod:`compiler.releases.repair`)."""
    started = time.monotonic()
    options = options or PublishOptions()
    release = read_builds(build_dirs, name, version, options.allow_failed, golden=options.golden)
    store = open_store(store, create=True)
    repaired = repair_blobs(store, name, release.blobs + release.check_reports) if options.repair else []
    existing = store.read_manifest(name, version)
    if existing is not None:
        status = same_or_conflict(existing, release.content, store, name, version)
        return _attested(
            store,
            release,
            _result(
                store,
                release,
                "repaired" if repaired else status,
                repaired,
                _held(release) - len(repaired),
                started,
            ),
            signer,
            context,
        )
    uploaded, present = _upload_leased(store, name, version, release.blobs + release.check_reports, progress)
    status = _create(store, release, [b.ref for b in release.check_reports])
    return _attested(store, release, _result(store, release, status, uploaded, present, started), signer, context)


def _attested(
    store: Store, release: Release, result: PublishResult, signer, context: BuildContext | None
) -> PublishResult:
    """The result once the provenance (and signature) are beside the manifest (docs/provenance.md)."""
    outcome = attest(store, release.content, release.content_sha256, signer, context)
    return result.model_copy(update=outcome)


Jobs = dict[str, list[str]]
"""A sharded release's jobs: SKU -> the precisions its part must hold."""


def stage(
    build_dirs: Path | list[Path],
    store: str | Store,
    name: str,
    version: str,
    job: str,
    *,
    pipeline_sha256: str | None = None,
    progress: Progress | None = None,
    golden: bool = True,
) -> PublishResult:
    """One CI job's part of a sharded release: its blobs sent and its part recorded, create-only; a retried job
    finds its part there and changes nothing (Conflict when a part of another pipeline is there)."""
    started = time.monotonic()
    release = read_builds(build_dirs, name, version, allow_failed=False, golden=golden)
    store = open_store(store, create=True)
    uploaded, present = _upload_leased(store, name, version, release.blobs + release.check_reports, progress, job)
    part = StagedPart(
        job=job,
        content=release.content,
        check_reports=[b.ref for b in release.check_reports],
        staged=provenance(),
        pipeline_sha256=pipeline_sha256,
    )
    earlier = store.stage(name, version, job, part.model_dump_json(indent=2).encode())
    if earlier is not None:
        staged_part(store, name, version, job, earlier, pipeline_sha256)
    return _result(store, release, "staged" if earlier is None else "already staged", uploaded, present, started)


def staged_part(
    store: Store,
    name: str,
    version: str,
    job: str,
    data: bytes,
    pipeline_sha256: str | None,
    precisions: list[str] | None = None,
) -> StagedPart:
    """A job's staged part, refused unless it is whole and of this pipeline (Conflict) and, when ``precisions``
    are given, holds exactly the job's engines (CheckFailed)."""
    key = staging_key(name, version, job)
    part = _parse_part(store, name, version, job, data)
    if pipeline_sha256 is not None and part.pipeline_sha256 != pipeline_sha256:
        raise Conflict(
            f"store {store.uri}: {key} was staged by another pipeline file (sha256 "
            f"{(part.pipeline_sha256 or 'none')[:12]}, this one {pipeline_sha256[:12]}); release a new "
            "version, or remove the staged part if nothing was published from it"
        )
    if precisions is not None:
        have = sorted(f"{e.sku}/{e.precision}" for e in part.content.engines)
        want = sorted(f"{job}/{p}" for p in precisions)
        if have != want:
            raise CheckFailed(
                f"store {store.uri}: {key} holds {', '.join(have)}, not the job's {', '.join(want)}; "
                "run that job again for a new version"
            )
    return part


def finalize(
    store: str | Store,
    name: str,
    version: str,
    jobs: Jobs,
    pipeline_sha256: str | None = None,
    *,
    signer=None,
    context: BuildContext | None = None,
) -> PublishResult:
    """Publish ``name@version`` from every job's staged part; CheckFailed naming the jobs not staged yet, or a part
    that does not hold its job's engines; Conflict for a part of another pipeline."""
    started = time.monotonic()
    store = open_store(store)
    parts = store.staged(name, version)
    missing = sorted(set(jobs) - set(parts))
    if missing:
        raise CheckFailed(
            f"{name}@{version}: not every job is staged; missing: {', '.join(missing)} (staged: "
            f"{', '.join(sorted(parts)) or 'none'}); run compile release --only-sku for each, then "
            "--finalize again"
        )
    staged = [
        staged_part(store, name, version, job, parts[job], pipeline_sha256, precisions)
        for job, precisions in sorted(jobs.items())
    ]
    content = merge_contents([part.content for part in staged])
    golden = content.golden
    if golden is not None and store.blob_size(name, golden.blob.sha256) != golden.blob.size_bytes:
        raise CheckFailed(
            f"{name}@{version}: the golden inputs (blob sha256:{golden.blob.sha256}) are not in the "
            "store as staged; run the job that checked with --data again"
        )
    for engine in content.engines:
        for blob in filter(None, (engine.plan, engine.layers)):
            if store.blob_size(name, blob.sha256) != blob.size_bytes:
                raise CheckFailed(
                    f"{name}@{version}: blob sha256:{blob.sha256} of {engine.sku}/{engine.precision} "
                    "is not in the store as staged; run that job again"
                )
    release = Release(content)
    existing = store.read_manifest(name, version)
    reports = [ref for part in staged for ref in part.check_reports]
    held = _held(release, reports)
    if existing is not None:
        status = same_or_conflict(existing, release.content, store, name, version)
        return _attested(store, release, _result(store, release, status, [], held, started), signer, context)
    status = _create(store, release, reports)
    return _attested(store, release, _result(store, release, status, [], held, started), signer, context)


def _parse_part(store: Store, name: str, version: str, job: str, data: bytes) -> StagedPart:
    key = staging_key(name, version, job)
    try:
        part = parse_record(data, PurePosixPath(key), StagedPart, "run the job again")  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise CheckFailed(f"store {store.uri}: {exc}") from None
    if (part.job, part.content.name, part.content.version) != (job, name, version):
        raise CheckFailed(
            f"store {store.uri}: {key} describes job {part.job} of "
            f"{part.content.name}@{part.content.version}; run the job again"
        )
    return part


def _create(store: Store, release: Release, check_reports: list[BlobRef]) -> str:
    """Write the manifest, create-only; ``published``, or ``unchanged`` when a racing publisher of the same
    content won (Conflict when it had other content)."""
    content = release.content
    refuse_shadowing(store, content.name, content.version, new="version")
    manifest = ReleaseManifest(
        content=content,
        content_sha256=release.content_sha256,
        published=provenance(),
        check_reports=check_reports,
        excluded=release.excluded,
        failed=release.failed_checks + [f"not built: {s}" for s in release.skipped],
    )
    raced = store.create_manifest(content.name, content.version, manifest.model_dump_json(indent=2).encode())
    if raced is None:
        return "published"
    return same_or_conflict(raced, content, store, content.name, content.version)


def _held(release: Release, reports: list[BlobRef] | None = None) -> int:
    """How many blobs (by digest) the release names: plans, layers.json, golden inputs and check reports
    (``reports``, else its build folders'): all already there when its manifest is, or a finalize found them
    staged."""
    content = release.content
    refs = [ref for e in content.engines for ref in (e.plan, e.layers) if ref is not None]
    refs += reports if reports is not None else [b.ref for b in release.check_reports]
    refs += [content.golden.blob] if content.golden is not None else []
    return len({ref.sha256 for ref in refs})


def _result(
    store: Store, release: Release, status: str, uploaded: list[_Blob], present: int, started: float
) -> PublishResult:
    content = release.content
    return PublishResult(
        store=store.uri,
        name=content.name,
        version=content.version,
        status=status,
        engines=len(content.engines),
        content_sha256=release.content_sha256,
        uploaded_blobs=len(uploaded),
        uploaded_bytes=sum(b.ref.size_bytes for b in uploaded),
        present_blobs=present,
        skipped_targets=release.skipped,
        seconds=round(time.monotonic() - started, 3),
    )


def same_or_conflict(existing: bytes, content: ReleaseContent, store: Store, name: str, version: str) -> str:
    """``unchanged`` when the published release is this content, ``rebuilt`` when it was built from the same inputs
    and only the plans' bytes differ (the published plans are kept), else Conflict (:func:`compiler.releases.
    manifest.holds`: the same build published again before and after the runtime was recorded, or from another
    machine, is the same release)."""
    found = holds(existing, store, name, version, content)
    if found is None:
        raise Conflict(
            f"{name}@{version} is already published in {store.uri} with other content; releases are "
            "immutable: publish a new version"
        )
    return "unchanged" if found == "same" else "rebuilt"


def merge_contents(parts: list[ReleaseContent]) -> ReleaseContent:
    """One release of several build folders' (or jobs') engines: one model, each SKU x precision once, the check
    passed only if every part's did."""
    first = parts[0]
    for part in parts[1:]:
        if part.model_sha256 != first.model_sha256:
            raise InvalidInput(
                f"the parts of {first.name}@{first.version} are builds of different models "
                f"({first.model_sha256[:12]}, {part.model_sha256[:12]}); build them from one model"
            )
    engines = sorted((e for part in parts for e in part.engines), key=lambda e: (e.sku, e.precision))
    calibrated: dict[str, set[str]] = {}  # the Q/DQ model each int8/fp8 engine was built from, by digest
    for engine in engines:
        if engine.precision.calibrated:
            calibrated.setdefault(engine.precision, set()).add(engine.built_model_sha256)
    mixed = sorted(p for p, digests in calibrated.items() if len(digests) > 1)
    if mixed:
        raise InvalidInput(
            f"the parts of {first.name}@{first.version} hold {', '.join(mixed)} engines built from "
            "different calibrated models; calibrate once (or alike) and build every part from it"
        )
    targets = [(e.sku, e.precision) for e in engines]
    if len(set(targets)) != len(targets):
        twice = sorted({f"{s}/{p}" for s, p in targets if targets.count((s, p)) > 1})
        raise InvalidInput(f"{first.name}@{first.version}: {', '.join(twice)} built in more than one part")
    checks = [part.check for part in parts]
    check = None
    if all(checks):
        counts: dict[str, int] = {}
        for c in checks:
            for status, count in c.summary.items():
                counts[status] = counts.get(status, 0) + count
        check = ReleaseCheck(passed=all(c.passed for c in checks), summary=counts)
    signed = next((part for part in parts if part.inputs), first)  # a part whose publisher had the model
    golden = next((part.golden for part in parts if part.golden), None)  # the first part checked with --data
    return first.model_copy(
        update={
            "engines": engines,
            "check": check,
            "inputs": signed.inputs,
            "outputs": signed.outputs,
            "golden": golden,
        }
    )


def _upload_leased(
    store: Store, name: str, version: str, blobs: list[_Blob], progress: Progress | None, job: str | None = None
) -> tuple[list[_Blob], int]:
    """:func:`_upload_missing` under a lease on every blob, taken before the first look: when the record naming
    them may be written (the lease still has its tail left, no gc could have removed one unseen), the blobs sent
    (again, if a look after the lease was outlived or a gc was found sweeping missed one) and those found there."""
    lease = Lease(store, name, version, [blob.ref.sha256 for blob in blobs], job)
    lease.take()
    uploaded, present = _upload_missing(store, name, blobs, progress)
    while lease.must_look_again():
        again, _ = _upload_missing(store, name, blobs, None)
        uploaded += again
        present -= len(again)
    return uploaded, present


def _upload_missing(store: Store, name: str, blobs: list[_Blob], progress: Progress | None) -> tuple[list[_Blob], int]:
    """Send the blobs the store lacks (by digest), each verified as it is read. Blobs are create-only: one of the
    digest already there is never replaced, so a stored blob of another size than these verified bytes is damaged
    store content (exit 1), left for its owner to repair."""
    uploaded: list[_Blob] = []
    unique = list({blob.ref.sha256: blob for blob in blobs}.values())
    for done, blob in enumerate(unique):
        if progress:
            progress("upload", done, len(unique))
        stored = store.blob_size(name, blob.ref.sha256)
        if stored == blob.ref.size_bytes:
            continue
        hint = (
            {"recorded": "check.json records: the file changed after the check; run compile check again"}
            if blob.path.name == GOLDEN_FILE
            else {}
        )
        with VerifyingReader(blob.path, blob.ref.sha256, blob.ref.size_bytes, **hint) as source:
            created = store.put_blob(name, blob.ref.sha256, source)
        if not created or stored is not None:
            stored = store.blob_size(name, blob.ref.sha256)
            if stored != blob.ref.size_bytes:
                raise damaged(
                    store,
                    f"blobs/sha256/{blob.ref.sha256}",
                    f"{stored} bytes stored, while the {blob.ref.size_bytes} bytes of {blob.path} hash "
                    "to its digest; it is never replaced",
                )
        uploaded.append(blob)
    if progress:
        progress("upload", len(unique), len(unique))
    return uploaded, len(unique) - len(uploaded)


def read_builds(
    build_dirs: Path | list[Path], name: str, version: str, allow_failed: bool, *, golden: bool = True
) -> Release:
    """Every build folder read and verified (nothing is sent for a build that cannot be published); without
    ``golden``, the golden inputs the check kept are left out (data that may not leave)."""
    check_name(name)
    check_version(version)
    folders = [Path(build_dirs)] if isinstance(build_dirs, str | Path) else [Path(d) for d in build_dirs]
    parts = [_read_build(folder, name, version, allow_failed, golden) for folder in folders]
    return Release(
        merge_contents([p.content for p in parts]),
        [b for p in parts for b in p.blobs],
        [b for p in parts for b in p.check_reports],
        [s for p in parts for s in p.skipped],
        [f for p in parts for f in p.failed_checks],
        {k: v for p in parts for k, v in p.excluded.items()},
    )


def _read_build(build_dir: Path, name: str, version: str, allow_failed: bool, keep_golden: bool) -> Release:
    build = read_build(build_dir, hash_plans=False)  # each plan is hashed as it is sent
    report = build.report
    problems = [f"{t.sku}/{t.precision}: {t.status}" + (f" ({t.errors[0]})" if t.errors else "") for t in report.failed]
    problems += [f"{t.label}: missing (no {t.folder / 'engine.plan'})" for t in build.targets if t.missing]
    engines = [_release_engine(t) for t in build.built]
    blobs = [blob for t in build.built for blob in _blobs(t)]
    check, check_blob, golden, failed_checks, shares = _read_check(build_dir, engines)
    engines = [e.model_copy(update={"low_precision_share": shares.get((e.sku, e.precision))}) for e in engines]
    golden = golden if keep_golden else None
    if golden is not None:
        blobs.append(_Blob(_inside(build_dir, Path(GOLDEN_FILE)), golden.blob))
    if check is not None and not check.passed:
        problems.append(f"{CHECK_RECORD}: the check failed")
    if problems and not allow_failed:
        raise CheckFailed(
            f"{build_dir}: not publishable: {'; '.join(problems)}; fix the build (or pass "
            "--allow-failed to publish the targets that succeeded)"
        )
    if not engines:
        raise CheckFailed(f"{build_dir}: no target built; nothing to publish")
    inputs, outputs = _signature(report)
    content = ReleaseContent(
        name=name,
        version=version,
        model_sha256=report.model_sha256,
        model_name=Path(report.model).name,
        check=check,
        engines=sorted(engines, key=lambda e: (e.sku, e.precision)),
        inputs=inputs,
        outputs=outputs,
        golden=golden,
    )
    return Release(
        content,
        blobs,
        [check_blob] if check_blob else [],
        [p for p in problems if not p.startswith(CHECK_RECORD)],
        failed_checks,
        {t.label: t.engine.excluded for t in build.built if t.engine.excluded},
    )


class _Signature(BaseModel):
    """A model's signature remembered by its file's stat (:mod:`compiler.core.memo`; not one with external data,
    whose files the stat does not cover): a re-release parses no model."""

    key: str
    sha256: str
    inputs: list[TensorSignature]
    outputs: list[TensorSignature]
    external: bool


def _signature(report: BuildReport) -> tuple[list[TensorSignature] | None, list[TensorSignature] | None]:
    """The model's inputs and outputs, if the model build.json names is still there and still that model (a
    build folder carried to another machine publishes without them)."""
    from compiler.core.files import default_cache_dir
    from compiler.core.memo import memo_key, recalled, remember

    path = Path(report.model)
    memos = default_cache_dir() / "model-signatures"
    key = memo_key("model-signatures", [path], str(path))
    found = recalled(memos, key, _Signature) if key is not None else None
    if found is None:
        found = _read_signature(path, key or "")
        if found is None:
            return None, None
        if key is not None and not found.external:
            remember(memos, key, found)
    return (found.inputs, found.outputs) if found.sha256 == report.model_sha256 else (None, None)


def _read_signature(path: Path, key: str) -> _Signature | None:
    from compiler.data.model import load_model, tensor_info

    if not path.is_file():
        return None
    try:
        model = load_model(path, infer_shapes=False, check=False)
    except InvalidInput:
        return None
    inputs = [TensorSignature(**tensor.model_dump()) for tensor in model.inputs()]
    outputs = [TensorSignature(**tensor_info(value).model_dump()) for value in model.proto.graph.output]
    return _Signature(key=key, sha256=model.sha256, inputs=inputs, outputs=outputs, external=bool(model.external_files))


def _blobs(target: Target) -> list[_Blob]:
    """The plan and layers.json of a built target, as the blobs they become."""
    engine = target.engine
    blobs = [_Blob(target.plan, BlobRef(sha256=engine.sha256, size_bytes=engine.size_bytes))]
    if target.layers_digest is not None:
        sha256, size = target.layers_digest
        blobs.append(_Blob(target.folder / "layers.json", BlobRef(sha256=sha256, size_bytes=size)))
    return blobs


def _release_engine(target: Target) -> ReleaseEngine:
    """A built target as the manifest lists it."""
    record = target.engine
    blobs = _blobs(target)
    try:
        return ReleaseEngine(
            sku=record.sku,
            compute_capabilities=record.compute_capabilities,
            precision=record.precision,
            profiles=record.profiles,
            backend=record.backend,
            builder_options=record.builder_options,
            plan=blobs[0].ref,
            layers=blobs[1].ref if len(blobs) > 1 else None,
            built_model_sha256=record.built_model_sha256,
            calibration_sha256=record.calibration_sha256,
            plan_header=_plan_header(target),
            runtime=runtime_of(record.backend, record.builder_options),
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        from compiler.core.yaml import describe_validation_error

        why = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise InvalidInput(f"{target.folder / 'engine.json'}: {why}; build it again") from None


@functools.cache
def _header_reader(name: str) -> TensorRTBackend | None:
    """The backend that reads its plans' headers (once per publish of thousands of targets); None when its
    TensorRT is not installed here."""
    from compiler.backends import load_backend

    try:
        return load_backend(name)
    except EnvironmentProblem:
        return None


def _plan_header(target: Target) -> dict | None:
    """What the plan's own header says, refused (exit 2) where its compute capabilities disagree with engine.json's:
    a serving host resolves on the manifest's, so the plan itself decides. engine.json's header is kept where this
    machine cannot read the edition's header (its TensorRT is not installed)."""
    record = target.engine
    backend = _header_reader(record.backend.get("name", ""))
    if backend is None:
        return record.plan_header
    with open(target.plan, "rb") as handle:
        head = handle.read(backend.plan_header_bytes)
    header = backend.plan_header(head)
    if header is None:
        return record.plan_header
    if sorted(header["compute_capabilities"]) != sorted(record.compute_capabilities):
        raise InvalidInput(
            f"{target.plan}: its header says compute capabilities "
            f"{', '.join(header['compute_capabilities']) or 'none'}, its engine.json "
            f"{', '.join(record.compute_capabilities)}; the folder was edited after the build: build "
            "again"
        )
    return header


def _read_check(
    build_dir: Path, engines: list[ReleaseEngine]
) -> tuple[ReleaseCheck | None, _Blob | None, GoldenRecord | None, list[str], dict[tuple[str, str], float]]:
    """check.json's verdict, golden inputs, failed checks (named) and each int8/fp8 engine's low-precision share
    (its precision-gain), when `compile check` ran on the folder, refused (exit 1) unless it judged exactly the
    engines being published: a folder built again after its check keeps the old check.json. golden.npz is sent as
    the check recorded it (its digest is verified as it is read)."""
    path = build_dir / CHECK_RECORD
    if not (path.exists() or path.is_symlink()):
        return None, None, None, [], {}
    path = _inside(build_dir, Path(CHECK_RECORD))
    hint = f"run compile check {build_dir} again"
    report, blob = _record_blob(path, CheckReport, hint)
    judged = {(e.sku, e.precision): e.engine_sha256 for e in report.engines}
    stale = sorted(f"{e.sku}/{e.precision}" for e in engines if judged.get((e.sku, e.precision)) != e.plan.sha256)
    if stale:
        raise CheckFailed(
            f"{path}: judged other engines than {', '.join(stale)} now in {build_dir} (built again since?); {hint}"
        )
    golden = report.golden
    if golden is not None and (golden.blob.size_bytes > GOLDEN_MAX_BYTES or not (build_dir / GOLDEN_FILE).is_file()):
        raise CheckFailed(
            f"{build_dir / GOLDEN_FILE}: missing, or larger than the {GOLDEN_MAX_BYTES} bytes golden "
            f"inputs may weigh, while {path} records it; {hint}"
        )
    failed = [f"{where} {check.name}: {check.summary}" for where, check in report.failures]
    shares = {
        (e.sku, str(e.precision)): float(c.figures["share"])
        for e in report.engines
        for c in e.checks
        if c.name == "precision-gain" and isinstance(c.figures.get("share"), int | float)
    }
    return ReleaseCheck(passed=report.passed, summary=report.counts), blob, golden, failed, shares


def _record_blob(path: Path, kind: type[Record], hint: str) -> tuple[Record, _Blob]:
    """A record validated and its blob, from one read: the bytes hashed are the bytes that were validated."""
    import hashlib

    data = read_record_bytes(path, hint)
    return (
        parse_record(data, path, kind, hint),
        _Blob(path, BlobRef(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))),
    )


def _inside(root: Path, relative: Path) -> Path:
    """``root / relative``, refused when a link leads out of the build folder."""
    path = root / relative
    if not path.resolve().is_relative_to(root.resolve()):
        raise InvalidInput(f"{path}: leads out of the build folder {root} through a symbolic link; build again")
    return path
