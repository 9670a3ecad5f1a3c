"""A release as the store holds it: its manifest and channel records, each refused when damaged, and who
published or moved it. Every other reader of releases (pull, promote, ls, publish, export) reads through here."""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
import time
from pathlib import PurePosixPath

from pydantic import BaseModel

from compiler.core.errors import CheckFailed, Conflict, InvalidInput
from compiler.core.files import hash_json
from compiler.core.jsonio import parse_json
from compiler.core.record_files import MAX_RECORD_BYTES, parse_record
from compiler.core.records import ChannelRecord, Provenance, ReleaseContent, ReleaseManifest, YankRecord
from compiler.core.text import printable
from compiler.stores import Store, open_store
from compiler.stores.base import CHANNEL, VERSION, Ref, manifest_key, yank_key


def provenance() -> Provenance:
    """Who is publishing or promoting, from where, and when (UTC)."""
    from compiler import version

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid {os.getuid()}"
    return Provenance(
        by=user,
        at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=socket.gethostname(),
        tool_version=version(),
    )


def damaged(store: Store, key: str, what: str) -> CheckFailed:
    return CheckFailed(f"store {store.uri}: {key} is damaged ({what}); publish it again or ask who owns the store")


def holds(data: bytes, store: Store, name: str, version: str, content: ReleaseContent) -> str | None:
    """What the stored manifest ``data`` is to ``content``: ``same`` (one of an older format is compared as this
    format reads it), ``same inputs`` (every engine built from the same model, calibration, profiles, options and
    builder, only the plans' bytes differ: a runner with an empty cache rebuilt them, and TensorRT builds are not
    bit-identical) or None (another release). A publisher that could not read the model (a build folder carried to
    another machine: no inputs and outputs) is compared with the stored ones taken in: the model is the same by its
    sha256, and they are read from it."""
    stored = parse_manifest(data, store, name, version).content
    if content.inputs is None and content.outputs is None:
        content = content.model_copy(update={"inputs": stored.inputs, "outputs": stored.outputs})
    ours, theirs = stored.model_dump(mode="json"), content.model_dump(mode="json")
    if hash_json(ours) == hash_json(theirs):
        return "same"
    return "same inputs" if hash_json(_inputs_of(ours)) == hash_json(_inputs_of(theirs)) else None


PRODUCTS = ("plan", "layers", "plan_header")
"""What a build made rather than was given: the fields two builds of the same inputs may differ in."""


def _inputs_of(content: dict) -> dict:
    engines = [{k: v for k, v in engine.items() if k not in PRODUCTS} for engine in content["engines"]]
    return content | {"engines": engines}


def parse_manifest(data: bytes, store: Store, name: str, version: str) -> ReleaseManifest:
    """A manifest as the store returned it, refused (exit 1) unless it is whole, ours, of this version, and its
    content still hashes to the digest it was published with."""
    key = manifest_key(name, version)
    try:
        manifest = parse_record(data, PurePosixPath(key), ReleaseManifest, "publish it again")  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise damaged(store, key, str(exc).removeprefix(f"{key}: ")) from None
    if (manifest.content.name, manifest.content.version) != (name, version):
        raise damaged(store, key, f"it describes {manifest.content.name}@{manifest.content.version}")
    published = parse_json(data, MAX_RECORD_BYTES)["content"]  # as published, in any format
    if hash_json(published) != manifest.content_sha256:
        raise damaged(store, key, "its content does not hash to its content_sha256: edited after publishing")
    return manifest


class Resolved(BaseModel):
    ref: str
    version: str
    channel: str | None
    manifest: ReleaseManifest
    manifest_sha256: str
    """sha256 of the manifest's bytes as the store holds them: what a release's signature names."""


def resolve(store: str | Store, ref: str | Ref, *, allow_yanked: bool = True) -> Resolved:
    """``NAME@VERSION`` or ``NAME@CHANNEL`` to its manifest (a tag is tried as a version, then as a channel);
    a yanked version refused (exit 1, naming the reason) unless ``allow_yanked``."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    store = open_store(store)
    data = store.read_manifest(ref.name, ref.tag)
    channel = None
    if data is None and ref.may_be_channel:
        record = read_channel(store, ref.name, ref.tag)
        if record is not None:
            channel = ref.tag
            data = store.read_manifest(ref.name, record[0].version)
            if data is None:
                raise damaged(
                    store, f"channels/{ref.name}/{channel}", f"it points at {record[0].version}, which has no manifest"
                )
    if data is None:
        raise InvalidInput(f"{ref}: no such version or channel in {store.uri}; {what_there_is(store, ref.name)}")
    version = record[0].version if channel else ref.tag
    refuse_yanked(store, ref.name, version, allow_yanked)
    return Resolved(
        ref=str(ref),
        version=version,
        channel=channel,
        manifest=parse_manifest(data, store, ref.name, version),
        manifest_sha256=hashlib.sha256(data).hexdigest(),
    )


def refuse_shadowing(store: Store, name: str, tag: str, *, new: str) -> None:
    """A tag names a version first, then a channel: a version named like an existing channel would hide the
    channel from every later pull (``--version stable``), and a channel named like a version would never be
    reached. ``new`` is what is being made of ``tag``: ``version`` or ``channel``; Conflict (exit 4) if the other
    exists."""
    if new == "version" and CHANNEL.fullmatch(tag) and store.read_channel(name, tag) is not None:
        raise Conflict(
            f"{name}@{tag}: {name} has a channel {tag}, which a version of that name would hide from "
            "every pull; choose another version"
        )
    if new == "channel" and store.read_manifest(name, tag) is not None:
        raise Conflict(
            f"{name}@{tag}: {name} has a version {tag}, which a channel of that name could never be "
            "reached past; choose another channel name"
        )


def what_there_is(store: Store, name: str) -> str:
    versions, channels = store.versions(name), store.channels(name)
    if not versions:
        names = store.names()
        return f"releases there: {', '.join(names[:20]) or 'none'}"
    return f"versions: {', '.join(versions[-20:])}" + (f"; channels: {', '.join(channels)}" if channels else "")


def read_channel(store: Store, name: str, channel: str) -> tuple[ChannelRecord, str] | None:
    found = store.read_channel(name, channel)
    if found is None:
        return None
    key = f"channels/{name}/{channel}"
    try:
        record = parse_record(
            found[0], PurePosixPath(key), ChannelRecord, "promote it again with --repair (its history is lost)"
        )  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise damaged(store, key, str(exc).removeprefix(f"{key}: ")) from None
    if (record.name, record.channel) != (name, channel):
        raise damaged(store, key, f"it describes {record.name}@{record.channel}")
    if not VERSION.fullmatch(record.version) or ".." in record.version:
        raise damaged(store, key, f"it points at {record.version!r}, which is no version")
    return record, found[1]


def yanked(store: Store, name: str, version: str) -> YankRecord | None:
    """The version's yank record, or None when it was never yanked."""
    data = store.read_yank(name, version)
    return None if data is None else parse_yank(store, data, name, version)


def parse_yank(store: Store, data: bytes, name: str, version: str) -> YankRecord:
    key = yank_key(name, version)
    try:
        record = parse_record(data, PurePosixPath(key), YankRecord, "yank it again")  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise damaged(store, key, str(exc).removeprefix(f"{key}: ")) from None
    if (record.name, record.version) != (name, version):
        raise damaged(store, key, f"it describes {record.name}@{record.version}")
    return record


def refuse_yanked(store: Store, name: str, version: str, allow_yanked: bool) -> None:
    """Exit 1 naming the reason when the version is yanked, unless allowed (then not even looked up)."""
    if allow_yanked:
        return
    record = yanked(store, name, version)
    if record is not None:
        raise CheckFailed(
            f"{name}@{version} is yanked ({printable(record.reason)}; by {printable(record.by)} at "
            f"{record.at}); pass --allow-yanked to use it anyway"
        )
