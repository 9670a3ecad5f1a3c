"""`compile yank`: withdraw a published version without touching it. The manifest stays as published (immutable,
still verifiable); the mark is a record of its own beside it, and pull, export and promote refuse a marked version
unless told ``--allow-yanked``."""

from __future__ import annotations

from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.records import YankRecord
from compiler.core.text import printable
from compiler.releases.manifest import parse_yank, provenance, resolve
from compiler.stores import Store, open_store
from compiler.stores.base import Ref

MAX_REASON = 500


class YankResult(BaseModel):
    store: str
    name: str
    version: str
    reason: str
    status: str
    """``yanked``, or ``already`` when the version was yanked before (its first reason stays)."""
    by: str
    at: str


def check_reason(reason: str) -> str:
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput("--reason: say why the version is withdrawn (e.g. --reason 'wrong calibration data')")
    if len(reason) > MAX_REASON or printable(reason) != reason:
        raise InvalidInput(f"--reason: one line of at most {MAX_REASON} printable characters")
    return reason


def yank(store: str | Store, ref: str | Ref, reason: str) -> YankResult:
    """Mark ``NAME@VERSION`` withdrawn (create-only: a second yank keeps the first record and says so)."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    reason = check_reason(reason)
    store = open_store(store)
    if store.read_manifest(ref.name, ref.tag) is None:
        resolved = resolve(store, ref)  # the precise error, or a channel: yank the version, not the channel
        raise InvalidInput(
            f"{ref}: is the channel {resolved.channel}; yank the version it points at ({ref.name}@{resolved.version})"
        )
    who = provenance()
    record = YankRecord(name=ref.name, version=ref.tag, reason=reason, by=who.by, at=who.at)
    there = store.mark_yanked(ref.name, ref.tag, record.model_dump_json(indent=2).encode())
    status = "yanked"
    if there is not None:
        record, status = parse_yank(store, there, ref.name, ref.tag), "already"
    return YankResult(store=store.uri, status=status, **record.model_dump(exclude={"format_version"}))
