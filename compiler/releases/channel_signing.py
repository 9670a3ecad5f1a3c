"""Signed channel moves: a channel promoted with a key carries a signed statement of the move (which manifest, which
version, its sequence number), so a verifying consumer detects a channel the store's writer pointed elsewhere
(forged) or put back to an earlier signed state (rolled back, against what this host saw before).

A verifying consumer (``--verify-key``, ``compile verify``) that resolves ``NAME@CHANNEL`` requires the signature:
an unsigned channel is refused (pin the version instead), unless ``$COMPILE_ALLOW_UNSIGNED_CHANNELS=1`` while
publishers start signing, and never once this host saw the channel signed. Rollback is judged against the highest
sequence this host has seen, kept in the cache folder (``channels/``): a fresh host trusts the first signed state it
sees, which is as much as a signature without an expiry can promise (docs/provenance.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from compiler.core.errors import CheckFailed
from compiler.core.files import default_cache_dir, write_atomic
from compiler.core.jsonio import parse_json
from compiler.core.records import ChannelRecord
from compiler.releases.manifest import Resolved, read_channel
from compiler.releases.signing import sign, statement, verify
from compiler.stores import Store

CHANNEL_MOVE = "https://trt-compile.github.io/channel-move/v1"
ALLOW_UNSIGNED_ENV = "COMPILE_ALLOW_UNSIGNED_CHANNELS"
SEEN_LIMIT = 64 << 10


def signed_record(record: ChannelRecord, manifest_sha256: str, signer: Any) -> ChannelRecord:
    """``record`` with the signature of its move."""
    subject = [{"name": f"{record.name}@{record.channel}", "digest": {"sha256": manifest_sha256}}]
    predicate = {
        "name": record.name,
        "channel": record.channel,
        "version": record.version,
        "sequence": record.sequence,
        "at": record.history[-1].at if record.history else "",
    }
    return record.model_copy(update={"signature": sign(statement(subject, CHANNEL_MOVE, predicate), signer).decode()})


def require_signed_channel(store: Store, resolved: Resolved, key: Any) -> None:
    """CheckFailed unless ``resolved``'s channel points at its version by a move signed with ``key``, no older than
    the newest move this host has seen of it."""
    name, channel, version = resolved.manifest.content.name, resolved.channel, resolved.version
    what = f"{name}@{channel} in {store.uri}"
    found = read_channel(store, name, channel)
    if found is None or found[0].version != version:
        raise CheckFailed(f"{what}: the channel moved while it was read; try again")
    record = found[0]
    if not record.signature:
        _unsigned(store, what, record)
        return
    signed = verify(record.signature.encode(), key, f"the channel {what}")
    predicate = signed.get("predicate") if isinstance(signed.get("predicate"), dict) else {}
    subjects = signed.get("subject") if isinstance(signed.get("subject"), list) else []
    digests = [(s.get("name"), (s.get("digest") or {}).get("sha256")) for s in subjects if isinstance(s, dict)]
    if (
        signed.get("predicateType") != CHANNEL_MOVE
        or digests != [(f"{name}@{channel}", resolved.manifest_sha256)]
        or predicate.get("version") != version
        or predicate.get("sequence") != record.sequence
    ):
        raise CheckFailed(
            f"{what}: forged channel: its signature is of another move than the one the store shows "
            f"({str(predicate.get('version'))[:40]}, move {str(predicate.get('sequence'))[:12]}), not of "
            f"{version} (move {record.sequence})"
        )
    _not_rolled_back(store, name, channel, record)


def _unsigned(store: Store, what: str, record: ChannelRecord) -> None:
    """An unsigned channel: refused, unless ``$COMPILE_ALLOW_UNSIGNED_CHANNELS=1`` (a transition while publishers
    start signing) and this host never saw a signed move of it (then the signature was stripped)."""
    seen = _seen(_seen_path(store, record.name, record.channel))
    fix = f"pin the version ({record.name}@{record.version}), or have the publisher promote it with --sign-key"
    if seen is not None:
        raise CheckFailed(
            f"{what}: its signature was removed: this host saw it signed at move {seen[0]} ({seen[1]}) and now "
            f"unsigned at {record.version}; {fix}"
        )
    if os.environ.get(ALLOW_UNSIGNED_ENV) != "1":
        raise CheckFailed(
            f"{what}: the channel's move to {record.version} is not signed, so anyone who can write to the store "
            f"may have pointed it there; {fix} (${ALLOW_UNSIGNED_ENV}=1 takes unsigned channels meanwhile)"
        )


def _seen_path(store: Store, name: str, channel: str) -> Path:
    return default_cache_dir() / "channels" / hashlib.sha256(store.uri.encode()).hexdigest()[:32] / name / channel


def _not_rolled_back(store: Store, name: str, channel: str, record: ChannelRecord) -> None:
    path = _seen_path(store, name, channel)
    seen = _seen(path)
    if seen is not None and seen[0] > record.sequence:
        raise CheckFailed(
            f"{name}@{channel} in {store.uri}: rolled back: this host saw it at move {seen[0]} ({seen[1]}), the store "
            f"now shows the older move {record.sequence} ({record.version}); ask who owns the store"
        )
    if seen is None or seen[0] < record.sequence:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"sequence": record.sequence, "version": record.version}).encode())


def _seen(path: Path) -> tuple[int, str] | None:
    """The newest move this host saw (None when none, or when the note is unreadable: it is only ever raised)."""
    try:
        note = parse_json(path.read_bytes()[:SEEN_LIMIT], SEEN_LIMIT)
        return int(note["sequence"]), str(note["version"])[:64]
    except (OSError, ValueError, KeyError, TypeError):
        return None
