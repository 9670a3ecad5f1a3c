"""Fetching what a release names, verified: its manifest (refused unless signed by the key given, before its
consumer writes anything) and its blobs (written only once they hash to the manifest's digest). Pull, the golden
inputs and the exports share it."""

from __future__ import annotations

import os
from pathlib import Path

from compiler.core.errors import CheckFailed
from compiler.core.files import copy_file, file_sha256, sweep_partials
from compiler.releases.manifest import Resolved, damaged, resolve
from compiler.releases.verify import require_signature, trusted_key
from compiler.stores import Store
from compiler.stores.base import HashingSink, Ref, check_sha256

REPAIR_HINT = "publish the build folder again with --repair (or ask who owns the store)"


def resolve_trusted(store: Store, ref: str | Ref, verify_key: Path | None, allow_yanked: bool = True) -> Resolved:
    """``ref``'s manifest; with ``verify_key`` (else ``$COMPILE_VERIFY_KEY``) refused (exit 1) unless the release
    is signed by it, before its consumer writes anything. A bad key file is refused before any request."""
    key = trusted_key(verify_key)
    resolved = resolve(store, ref, allow_yanked=allow_yanked)
    if key is not None:
        require_signature(store, resolved, key)
    return resolved


def partial_prefix(name: str) -> str:
    """How the temporary file of a fetch to ``name`` begins (``.NAME.<random>.partial`` beside it)."""
    return f".{name[:200]}."


def fetch_verified(store: Store, name: str, sha256: str, size: int, out: Path, cache: Path | None) -> bool:
    """Write the blob to ``out`` through a temporary sibling, verified; from the pull cache when it holds a good
    copy. True when the store was not asked for the bytes."""
    check_sha256(sha256)
    cached = cache / "sha256" / sha256 if cache else None
    sweep_partials(out.parent, partial_prefix(out.name))  # what an earlier pull to out, killed, left
    temporary = out.with_name(f"{partial_prefix(out.name)}{os.urandom(4).hex()}.partial")  # fits where out.name does
    try:
        if cached is not None and cached.is_file() and _verify_file(cached, sha256, size):
            copy_file(cached, temporary)  # a copy: editing the pulled plan must not change the cache
            os.replace(temporary, out)
            return True
        with open(temporary, "xb") as handle:
            sink = HashingSink(handle, size, sha256, f"store {store.uri}: blob sha256:{sha256}")
            try:
                found = store.get_blob(name, sha256, sink, size)
            except CheckFailed as exc:
                raise CheckFailed(f"{exc}; nothing was written to {out}; {REPAIR_HINT}") from None
            if not found:
                raise damaged(store, f"blobs/sha256/{sha256}", "the manifest names it but the store lacks it")
            handle.flush()
            os.fsync(handle.fileno())
        if not sink.matches():
            raise CheckFailed(
                f"store {store.uri}: blob sha256:{sha256} is corrupt: its {sink.size} bytes hash to "
                f"sha256:{sink.hexdigest()}; nothing was written to {out}; {REPAIR_HINT}"
            )
        if cached is not None:
            _keep(temporary, cached)
        os.replace(temporary, out)
        return False
    finally:
        temporary.unlink(missing_ok=True)


def _verify_file(path: Path, sha256: str, size: int) -> bool:
    """A cached blob is used only if it still is what its name says (a pulled plan is a copy, never a link to the
    cache, but the cache itself may have been edited)."""
    good = path.stat().st_size == size and file_sha256(path) == sha256
    if not good:
        path.unlink(missing_ok=True)
    return good


def _keep(verified: Path, cached: Path) -> None:
    """Add a verified download to the pull cache (best effort: a full or read-only cache costs only the reuse)."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        staged = cached.with_name(f".{cached.name}.{os.urandom(4).hex()}")
        copy_file(verified, staged)
        os.replace(staged, cached)
    except OSError:
        pass
