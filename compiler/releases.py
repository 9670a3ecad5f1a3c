"""Reading and moving published releases: resolve, pull, ls, promote — the consumer's Python API.

A serving host does::

    from compiler.releases import pull
    result = pull("s3://models/prod", "digits@stable", sku="auto", out=Path("/models/digits.plan"))

and gets the one plan for its GPU's compute capability, verified against the manifest's sha256, or an error.
Every request a pull makes is by key (manifest, channel, blob), so its cost does not grow with the store.
"""

from __future__ import annotations

import getpass
import os
import random
import socket
import time
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from compiler.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.files import default_cache_dir, file_sha256, hash_json, link_or_copy, write_atomic
from compiler.records import (
    RELEASE_FORMAT,
    ChannelMove,
    ChannelRecord,
    Provenance,
    ReleaseEngine,
    ReleaseManifest,
    parse_record,
)
from compiler.stores import Store, open_store
from compiler.stores.base import VERSION, HashingSink, Ref, check_channel, check_sha256, manifest_key

NAME_MAX = 255
"""The longest file name (bytes) Linux filesystems take."""
PROMOTE_SECONDS = 60.0
"""How long a promotion keeps retrying against concurrent ones before it gives up."""


def provenance() -> Provenance:
    """Who is publishing or promoting, from where, and when (UTC)."""
    from compiler import version

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid {os.getuid()}"
    return Provenance(by=user, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), host=socket.gethostname(),
                      tool_version=version())


def _damaged(store: Store, key: str, what: str) -> CheckFailed:
    return CheckFailed(f"store {store.uri}: {key} is damaged ({what}); publish it again or ask who owns the store")


def parse_manifest(data: bytes, store: Store, name: str, version: str) -> ReleaseManifest:
    """A manifest as the store returned it, refused (exit 1) unless it is whole, ours, of this version, and its
    content still hashes to the digest it was published with."""
    key = manifest_key(name, version)
    try:
        manifest = parse_record(data, PurePosixPath(key), ReleaseManifest, "publish it again")  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise _damaged(store, key, str(exc).removeprefix(f"{key}: ")) from None
    if (manifest.content.name, manifest.content.version) != (name, version):
        raise _damaged(store, key, f"it describes {manifest.content.name}@{manifest.content.version}")
    if hash_json(manifest.content.model_dump(mode="json")) != manifest.content_sha256:
        raise _damaged(store, key, "its content does not hash to its content_sha256: edited after publishing")
    return manifest


class Resolved(BaseModel):
    ref: str
    version: str
    channel: str | None
    manifest: ReleaseManifest


def resolve(store: str | Store, ref: str | Ref) -> Resolved:
    """``NAME@VERSION`` or ``NAME@CHANNEL`` to its manifest (a tag is tried as a version, then as a channel)."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    store = open_store(store)
    data = store.read_manifest(ref.name, ref.tag)
    channel = None
    if data is None and ref.may_be_channel:
        record = _read_channel(store, ref.name, ref.tag)
        if record is not None:
            channel = ref.tag
            data = store.read_manifest(ref.name, record[0].version)
            if data is None:
                raise _damaged(store, f"channels/{ref.name}/{channel}",
                               f"it points at {record[0].version}, which has no manifest")
    if data is None:
        raise InvalidInput(f"{ref}: no such version or channel in {store.uri}; {_what_there_is(store, ref.name)}")
    version = record[0].version if channel else ref.tag
    return Resolved(ref=str(ref), version=version, channel=channel,
                    manifest=parse_manifest(data, store, ref.name, version))


def _what_there_is(store: Store, name: str) -> str:
    versions, channels = store.versions(name), store.channels(name)
    if not versions:
        names = store.names()
        return f"releases there: {', '.join(names[:20]) or 'none'}"
    return (f"versions: {', '.join(versions[-20:])}" + (f"; channels: {', '.join(channels)}" if channels else ""))


def select_engine(manifest: ReleaseManifest, *, sku: str | None = None, compute_capability: str | None = None,
                  precision: str | None = None, tensorrt_version: str | None = None) -> ReleaseEngine:
    """The one engine for a GPU: its compute capability exactly (as Triton's ``cc_model_filenames``), then the
    precision and runtime version when given; among engines of one compute capability, the named SKU's own."""
    release = f"{manifest.content.name}@{manifest.content.version}"
    engines = [e for e in manifest.content.engines
               if (compute_capability is None or compute_capability in e.compute_capabilities)
               and (precision is None or e.precision == precision)
               and (tensorrt_version is None or _same_version(e.backend.get("version", ""), tensorrt_version))]
    if sku is not None and len(engines) > 1 and any(e.sku == sku for e in engines):
        engines = [e for e in engines if e.sku == sku]
    wanted = ", ".join(part for part in (
        f"compute capability {compute_capability}" if compute_capability else "",
        f"precision {precision}" if precision else "",
        f"TensorRT {tensorrt_version}" if tensorrt_version else "") if part) or "any engine"
    if len(engines) == 1:
        return engines[0]
    have = "; ".join(f"{e.sku} ({', '.join(e.compute_capabilities)}) {e.precision} "
                     f"{e.backend.get('name', '?')} {e.backend.get('version', '?')}"
                     for e in manifest.content.engines)
    if not engines:
        raise InvalidInput(f"{release} has no engine for {wanted}; it has: {have}")
    choices = sorted({e.precision for e in engines})
    hint = "add --precision " + " or ".join(choices) if len(choices) > 1 else "add --tensorrt-version or --sku"
    raise InvalidInput(f"{release} has {len(engines)} engines for {wanted}: "
                       f"{', '.join(f'{e.sku}/{e.precision}' for e in engines)}; {hint}")


def _same_version(have: str, want: str) -> bool:
    """``10.8`` matches a runtime ``10.8.0.43``: the parts given must agree."""
    return have.split(".")[:len(want.split("."))] == want.split(".")


def local_compute_capability() -> str:
    """This machine's GPU's compute capability, through NVML; exit 3 when there is none or they differ."""
    from compiler.gpu import list_gpus

    gpus, why = list_gpus()
    capabilities = sorted({gpu.compute_capability for gpu in gpus})
    if not capabilities:
        raise EnvironmentProblem(f"--sku auto: no GPU found ({why}); name the target with --sku SKU")
    if len(capabilities) > 1:
        raise EnvironmentProblem(f"--sku auto: this machine's GPUs differ ({', '.join(capabilities)}); name one "
                                 "with --sku SKU")
    return capabilities[0]


class PulledEngine(ReleaseEngine):
    """engine.json beside a pulled plan: the manifest's entry for it, and the release it came from."""

    format_version: int = RELEASE_FORMAT
    release: str
    version: str
    store: str


class PullResult(BaseModel):
    release: str
    version: str
    channel: str | None
    sku: str
    precision: str
    compute_capabilities: list[str]
    sha256: str
    size_bytes: int
    out: str
    engine_json: str
    from_cache: bool
    seconds: float


def pull(store: str | Store, ref: str | Ref, *, out: Path, sku: str | None = None, precision: str | None = None,
         tensorrt_version: str | None = None, cache_dir: Path | None = None, use_cache: bool = True) -> PullResult:
    """The one verified plan of ``ref`` for ``sku`` (a catalog name or ``auto``), written to ``out`` with
    engine.json beside it. Nothing is written to ``out`` unless the bytes hash to the manifest's digest."""
    started = time.monotonic()
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)  # names first: nothing is asked of a store for a bad one
    out = Path(out)
    _check_out(out)
    compute_capability = None
    if sku == "auto":
        compute_capability = local_compute_capability()
    elif sku is not None:
        from compiler.profiles import load_sku_catalog

        compute_capability = load_sku_catalog().get(sku).compute_capability
    store = open_store(store)
    resolved = resolve(store, ref)
    engine = select_engine(resolved.manifest, sku=None if sku == "auto" else sku,
                           compute_capability=compute_capability, precision=precision,
                           tensorrt_version=tensorrt_version)
    name = resolved.manifest.content.name
    from_cache = fetch_verified(store, name, engine.plan.sha256, engine.plan.size_bytes, out,
                        (cache_dir or default_cache_dir()) / "pulls" if use_cache else None)
    record = PulledEngine(**engine.model_dump(), release=f"{name}@{resolved.version}", version=resolved.version,
                          store=store.uri)
    engine_json = out.with_name("engine.json")
    write_atomic(engine_json, record.model_dump_json(indent=2).encode())
    return PullResult(release=str(resolved.ref), version=resolved.version, channel=resolved.channel, sku=engine.sku,
                      precision=engine.precision, compute_capabilities=engine.compute_capabilities,
                      sha256=engine.plan.sha256, size_bytes=engine.plan.size_bytes, out=str(out),
                      engine_json=str(engine_json), from_cache=from_cache,
                      seconds=round(time.monotonic() - started, 3))


def _check_out(out: Path) -> None:
    if len(os.fsencode(out.name)) > NAME_MAX:
        raise InvalidInput(f"--out {out}: the file name is longer than the {NAME_MAX} bytes a file name may have; "
                           "choose a shorter one")
    if out.name in ("", ".", "..") or out.is_dir():
        raise InvalidInput(f"--out {out}: give a file path for the plan (e.g. model.plan), not a folder")
    if out.name == "engine.json":
        raise InvalidInput(f"--out {out}: engine.json is written beside the plan; name the plan otherwise")
    if not out.parent.is_dir():
        raise InvalidInput(f"--out {out}: the folder {out.parent} does not exist; create it first")


def fetch_verified(store: Store, name: str, sha256: str, size: int, out: Path, cache: Path | None) -> bool:
    """Write the blob to ``out`` through a temporary sibling, verified; from the pull cache when it holds a good
    copy. True when the store was not asked for the bytes."""
    check_sha256(sha256)
    cached = cache / "sha256" / sha256 if cache else None
    temporary = out.with_name(f".{out.name[:200]}.{os.urandom(4).hex()}.partial")  # fits wherever out.name does
    try:
        if cached is not None and cached.is_file() and _verify_file(cached, sha256, size):
            link_or_copy(cached, temporary)
            os.replace(temporary, out)
            return True
        with open(temporary, "xb") as handle:
            sink = HashingSink(handle)
            if not store.get_blob(name, sha256, sink):
                raise _damaged(store, f"blobs/sha256/{sha256}", "the manifest names it but the store lacks it")
            handle.flush()
            os.fsync(handle.fileno())
        if sink.size != size or sink.hexdigest() != sha256:
            raise CheckFailed(f"store {store.uri}: blob sha256:{sha256} is corrupt: its {sink.size} bytes hash to "
                              f"sha256:{sink.hexdigest()}; nothing was written to {out}; republish the release or "
                              "repair the store")
        if cached is not None:
            _keep(temporary, cached)
        os.replace(temporary, out)
        return False
    finally:
        temporary.unlink(missing_ok=True)


def _verify_file(path: Path, sha256: str, size: int) -> bool:
    """A cached blob is used only if it still is what its name says (someone may have edited a pulled plan, which
    shares the cache's file)."""
    good = path.stat().st_size == size and file_sha256(path) == sha256
    if not good:
        path.unlink(missing_ok=True)
    return good


def _keep(verified: Path, cached: Path) -> None:
    """Add a verified download to the pull cache (best effort: a full or read-only cache costs only the reuse)."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        staged = cached.with_name(f".{cached.name}.{os.urandom(4).hex()}")
        link_or_copy(verified, staged)
        os.replace(staged, cached)
    except OSError:
        pass


# --- channels -----------------------------------------------------------------------------------------------


def _read_channel(store: Store, name: str, channel: str) -> tuple[ChannelRecord, str] | None:
    found = store.read_channel(name, channel)
    if found is None:
        return None
    key = f"channels/{name}/{channel}"
    try:
        record = parse_record(found[0], PurePosixPath(key), ChannelRecord, "promote it again")  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise _damaged(store, key, str(exc).removeprefix(f"{key}: ")) from None
    if (record.name, record.channel) != (name, channel):
        raise _damaged(store, key, f"it describes {record.name}@{record.channel}")
    if not VERSION.fullmatch(record.version) or ".." in record.version:
        raise _damaged(store, key, f"it points at {record.version!r}, which is no version")
    return record, found[1]


class PromoteResult(BaseModel):
    store: str
    name: str
    channel: str
    version: str
    previous: str | None
    status: str
    """``moved``, or ``unchanged`` when the channel already pointed there."""
    attempts: int


def promote(store: str | Store, ref: str | Ref, channel: str) -> PromoteResult:
    """Point ``channel`` at ``ref``'s version (which must be published), as a compare-and-swap retried against
    concurrent promotions, so none is lost and every move stays in the channel's history."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    check_channel(channel)
    store = open_store(store)
    version = resolve(store, Ref(ref.name, ref.tag)).version
    deadline = time.monotonic() + PROMOTE_SECONDS
    attempts = 0
    while True:
        attempts += 1
        current = _read_channel(store, ref.name, channel)
        previous = current[0].version if current else None
        if previous == version:
            return PromoteResult(store=store.uri, name=ref.name, channel=channel, version=version, previous=previous,
                                 status="unchanged", attempts=attempts)
        who = provenance()
        history = (current[0].history if current else []) + [ChannelMove(version=version, by=who.by, at=who.at)]
        record = ChannelRecord(name=ref.name, channel=channel, version=version, history=history)
        if store.write_channel(ref.name, channel, record.model_dump_json(indent=2).encode(),
                               current[1] if current else None):
            return PromoteResult(store=store.uri, name=ref.name, channel=channel, version=version, previous=previous,
                                 status="moved", attempts=attempts)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"{ref.name}@{channel}: still moving under other promotions after "
                                     f"{attempts} attempts; try again")
        time.sleep(random.uniform(0.01, 0.05 * min(attempts, 10)))


# --- browsing -----------------------------------------------------------------------------------------------


class ReleaseSummary(BaseModel):
    name: str
    versions: list[str]
    channels: dict[str, str]


class VersionSummary(BaseModel):
    version: str
    engines: int
    size_bytes: int
    published_at: str
    check: str
    """passed, failed or not run."""


class Listing(BaseModel):
    store: str
    releases: list[ReleaseSummary] = []
    name: str | None = None
    versions: list[VersionSummary] = []
    channels: dict[str, str] = {}
    manifest: ReleaseManifest | None = None


def list_store(store: str | Store, ref: str | Ref | None = None) -> Listing:
    """Everything (names, versions, channels), one release's versions, or one version's manifest."""
    if ref is not None and not isinstance(ref, Ref):
        ref = Ref.parse(ref, tag_required=False)
    store = open_store(store)
    if ref is None:
        return Listing(store=store.uri, releases=[
            ReleaseSummary(name=name, versions=store.versions(name), channels=_channels(store, name))
            for name in store.names()])
    if ref.tag is not None:
        resolved = resolve(store, ref)
        return Listing(store=store.uri, name=ref.name, manifest=resolved.manifest)
    versions = []
    for version in store.versions(ref.name):
        data = store.read_manifest(ref.name, version)
        if data is None:  # a folder a killed publisher left without its manifest
            continue
        manifest = parse_manifest(data, store, ref.name, version)
        check = manifest.content.check
        versions.append(VersionSummary(
            version=version, engines=len(manifest.content.engines),
            size_bytes=sum(e.plan.size_bytes for e in manifest.content.engines), published_at=manifest.published.at,
            check="not run" if check is None else "passed" if check.passed else "failed"))
    if not versions:
        raise InvalidInput(f"{ref.name}: no such release in {store.uri}; {_what_there_is(store, ref.name)}")
    return Listing(store=store.uri, name=ref.name, versions=versions, channels=_channels(store, ref.name))


def _channels(store: Store, name: str) -> dict[str, str]:
    channels = {}
    for channel in store.channels(name):
        record = _read_channel(store, name, channel)
        if record is not None:
            channels[channel] = record[0].version
    return channels
