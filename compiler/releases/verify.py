"""``compile verify``: a release checked against a public key, trusting nothing the store says.

Three links, each failing with exit 1 naming which: the signature verifies with the key and names the manifest's
bytes (sha256); the provenance is the one the signature names and its subjects are exactly the manifest's plans;
every blob the manifest names (plans, layers.json, check.json, golden.npz) hashes to its digest. A pull or export
given a key checks the first link before it writes anything, and the plans against the manifest as it fetches them.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from compiler.core.errors import CheckFailed, InvalidInput
from compiler.core.jsonio import parse_json
from compiler.core.records import Progress
from compiler.core.release_files import release_blobs
from compiler.releases.manifest import Resolved, resolve
from compiler.releases.provenance import PLAN_FILE, SLSA_PROVENANCE, plan_name
from compiler.releases.signing import BUNDLE, READABLE_SIGNATURES, STATEMENT_TYPE, load_public_key, open_bundle, verify
from compiler.stores import Store, open_store
from compiler.stores.base import MAX_ATTACHMENT_BYTES, HashingSink, Ref

VERIFY_KEY_ENV = "COMPILE_VERIFY_KEY"


class VerifyResult(BaseModel):
    release: str
    version: str
    channel: str | None
    store: str
    key: str
    manifest_sha256: str
    provenance_signed: bool
    subjects: int
    blobs: int
    bytes: int
    verified: bool
    seconds: float


def trusted_key(key: Path | str | None):
    """The public key of ``--verify-key`` (else ``$COMPILE_VERIFY_KEY``), loaded before any request; None: no
    verification asked."""
    if not key and os.environ.get(VERIFY_KEY_ENV) == "":  # fail closed: a secret that did not arrive
        raise InvalidInput(
            f"${VERIFY_KEY_ENV} is set but empty; give the path of the publisher's public key, or "
            "unset it to take releases without verifying their signature"
        )
    key = key or os.environ.get(VERIFY_KEY_ENV) or None
    return load_public_key(key, "--verify-key") if key else None


def require_signature(store: Store, resolved: Resolved, key) -> dict[str, Any]:
    """The signed statement over ``resolved``'s manifest, or CheckFailed: unsigned, signed by another key, or
    naming other manifest bytes (the manifest was edited in the store)."""
    name, version = resolved.manifest.content.name, resolved.version
    what = f"{name}@{version} in {store.uri}"
    bundle = attachment_within_limit(store, name, version, "signature", what)
    if bundle is None:
        raise CheckFailed(
            f"{what} is unsigned: it has no signature; its publisher signs it by publishing it again with --sign-key"
        )
    signed = verify(bundle, key, f"the signature of {what}")
    subjects = signed.get("subject") if isinstance(signed.get("subject"), list) else []
    named = next((s for s in subjects if isinstance(s, dict) and s.get("name") == f"{name}@{version}"), None)
    if signed.get("predicateType") not in READABLE_SIGNATURES or named is None:
        names = ", ".join(str(s.get("name"))[:80] for s in subjects[:3] if isinstance(s, dict))
        raise CheckFailed(
            f"the signature of {what} is a signature of something else ({names or 'no subject'}; "
            f"{str(signed.get('predicateType'))[:80]}), not of this release"
        )
    if (named.get("digest") or {}).get("sha256") != resolved.manifest_sha256:
        raise CheckFailed(
            f"{what}: manifest mismatch: its manifest hashes to sha256:{resolved.manifest_sha256}, not "
            "to the digest the signature names: it was changed after signing"
        )
    if resolved.channel is not None:
        from compiler.releases.channel_signing import require_signed_channel

        require_signed_channel(store, resolved, key)
    return signed


def verify_release(
    store: str | Store,
    ref: str | Ref,
    key_path: Path | str | None = None,
    *,
    identity: str | None = None,
    issuer: str | None = None,
    source_repository: str | None = None,
    source_ref: str | None = None,
    progress: Progress | None = None,
) -> VerifyResult:
    """Verify ``ref`` (NAME@VERSION or NAME@CHANNEL) with the public key at ``key_path``, or, for a keyless
    release, against the signer's ``identity`` and OIDC ``issuer`` (compiler.releases.keyless)."""
    started = time.monotonic()
    key = trust_of(key_path, identity, issuer, source_repository, source_ref)
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    store = open_store(store)
    resolved = resolve(store, ref)
    signed = require_signature(store, resolved, key)
    content = resolved.manifest.content
    what = f"{content.name}@{resolved.version} in {store.uri}"
    provenance = attachment_within_limit(store, content.name, resolved.version, "provenance", what)
    if provenance is None:
        raise CheckFailed(f"{what}: no provenance beside the manifest; publish it again to add it")
    if hashlib.sha256(provenance).hexdigest() != (signed.get("predicate") or {}).get("provenanceSha256"):
        raise CheckFailed(
            f"{what}: provenance mismatch: the provenance in the store is not the one the signature "
            "names: it was changed after signing"
        )
    statement, provenance_signed = _provenance(provenance, key, what)
    wanted = sorted((plan_name(e), e.plan.sha256) for e in content.engines)
    subjects = statement.get("subject") if isinstance(statement.get("subject"), list) else []
    have = sorted(
        (str(s.get("name")), str((s.get("digest") or {}).get("sha256")))
        for s in subjects
        if isinstance(s, dict) and str(s.get("name")).endswith("/" + PLAN_FILE)
    )
    if have != wanted:
        raise CheckFailed(
            f"{what}: provenance mismatch: its subjects ({len(have)}) are not the manifest's plans "
            f"({len(wanted)}) by sha256"
        )
    blobs = [(blob.title, blob.ref) for blob in release_blobs(resolved.manifest)]  # golden.npz too: damaged, it fails
    total = 0
    for done, (label, blob) in enumerate(blobs):
        if progress:
            progress("verify", done, len(blobs))
        _check_blob(store, content.name, label, blob.sha256, blob.size_bytes, what)
        total += blob.size_bytes
    if progress:
        progress("verify", len(blobs), len(blobs))
    return VerifyResult(
        release=str(resolved.ref),
        version=resolved.version,
        channel=resolved.channel,
        store=store.uri,
        key=str(key_path or key),
        manifest_sha256=resolved.manifest_sha256,
        provenance_signed=provenance_signed,
        subjects=len(have),
        blobs=len(blobs),
        bytes=total,
        verified=True,
        seconds=round(time.monotonic() - started, 3),
    )


def trust_of(
    key_path: Path | str | None,
    identity: str | None,
    issuer: str | None,
    source_repository: str | None = None,
    source_ref: str | None = None,
):
    """What a release must be signed by: a public key, or a keyless identity and its issuer, bound to a source
    repository and ref where given (exit 2 for any other combination, before any request)."""
    if (source_repository or source_ref) and identity is None:
        raise InvalidInput("--source-repository and --source-ref bind a keyless --identity; give it with --issuer")
    if key_path is not None and (identity is not None or issuer is not None):
        raise InvalidInput(
            "--key and --identity/--issuer: give one way to trust the signer, a public key or a keyless identity"
        )
    if key_path is not None:
        return load_public_key(key_path)
    if identity is None or issuer is None:
        raise InvalidInput(
            "give --key PUB.pem, or --identity and --issuer together for a keyless release"
            if identity is None and issuer is None
            else f"--{'issuer' if identity is not None else 'identity'} is missing: a keyless signature "
            "is trusted for an identity from one OIDC issuer, both given"
        )
    from compiler.releases.keyless import KeylessIdentity

    return KeylessIdentity(identity, issuer, source_repository, source_ref)


def read_provenance(store: str | Store, ref: str | Ref) -> dict[str, Any]:
    """The provenance statement of ``ref`` as the store holds it (unverified: `compile verify` checks it)."""
    ref = ref if isinstance(ref, Ref) else Ref.parse(ref)
    store = open_store(store)
    resolved = resolve(store, ref)
    what = f"{ref.name}@{resolved.version} in {store.uri}"
    data = attachment_within_limit(store, ref.name, resolved.version, "provenance", what)
    if data is None:
        raise CheckFailed(
            f"{what} has no provenance (published before provenance was recorded); publish a new version to get one"
        )
    return _provenance(data, None, what)[0]


def _provenance(data: bytes, key, what: str) -> tuple[dict[str, Any], bool]:
    """The statement of a stored provenance (a signed bundle, checked with ``key`` when given, or a plain
    statement) and whether it was signed."""
    try:
        parsed = parse_json(data, MAX_ATTACHMENT_BYTES)
    except ValueError as exc:
        raise CheckFailed(f"the provenance of {what} is not JSON we read ({exc})") from None
    if isinstance(parsed, dict) and parsed.get("mediaType") == BUNDLE:
        statement = (
            verify(data, key, f"the provenance of {what}")
            if key is not None
            else open_bundle(data, f"the provenance of {what}")[1]
        )
        signed = True
    else:
        statement, signed = parsed, False
    if (
        not isinstance(statement, dict)
        or statement.get("_type") != STATEMENT_TYPE
        or statement.get("predicateType") != SLSA_PROVENANCE
    ):
        raise CheckFailed(f"the provenance of {what} is not an in-toto statement of SLSA provenance v1")
    return statement, signed


def attachment_within_limit(store: Store, name: str, version: str, kind: str, what: str) -> bytes | None:
    """The ``kind`` attachment of a version, refused (CheckFailed) when larger than any of ours."""
    data = store.attachment(name, version, kind)
    if data is not None and len(data) > MAX_ATTACHMENT_BYTES:
        raise CheckFailed(
            f"the {kind} of {what} is over {MAX_ATTACHMENT_BYTES >> 20} MiB: not one of ours (damaged or planted)"
        )
    return data


def _check_blob(store: Store, name: str, label: str, sha256: str, size: int, what: str) -> None:
    with open(os.devnull, "wb") as nowhere:
        sink = HashingSink(nowhere, size, sha256, f"{what}: blob mismatch: sha256:{sha256} ({label})")
        if not store.get_blob(name, sha256, sink, size):
            raise CheckFailed(f"{what}: blob mismatch: {label} (sha256:{sha256}) is missing from the store")
    if not sink.matches():
        raise CheckFailed(
            f"{what}: blob mismatch: {label} hashes to sha256:{sink.hexdigest()} ({sink.size} bytes), "
            f"not to the sha256:{sha256} the manifest names"
        )
