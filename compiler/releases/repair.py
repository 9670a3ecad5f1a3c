"""Repairing a store from the publisher's own files: every blob of a release the publisher holds is read back from
the store and checked, and one that is damaged is replaced by the verified bytes (``compile publish --repair``).

Blobs are create-only, so a damaged one is first taken away by the store (:meth:`Store.remove_damaged_blob`,
which never removes a good blob a racing repair put there), then created again from the build folder through the
same verifying reader a publish uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from compiler.core.records import BlobRef
from compiler.releases.manifest import damaged
from compiler.stores import Store
from compiler.stores.base import VerifyingReader, holds


class HeldBlob(Protocol):
    path: Path
    ref: BlobRef


def repair_blobs(store: Store, name: str, blobs: list[HeldBlob]) -> list[HeldBlob]:
    """Re-verify each blob in the store and replace the damaged ones (missing ones are left to the publish that
    sends them): the blobs replaced."""
    repaired = []
    for blob in {blob.ref.sha256: blob for blob in blobs}.values():
        sha256, size = blob.ref.sha256, blob.ref.size_bytes
        state = holds(store, name, sha256, size)
        if state is not False:
            continue  # good, or missing (sent by the publish)
        store.remove_damaged_blob(name, sha256, size)
        if holds(store, name, sha256, size) is True:
            continue  # a racing repair replaced it first
        with VerifyingReader(blob.path, sha256, size) as source:
            store.put_blob(name, sha256, source)
        if holds(store, name, sha256, size) is not True:
            raise damaged(
                store,
                f"blobs/sha256/{sha256}",
                "still damaged after the repair (written again meanwhile?); run publish --repair again",
            )
        repaired.append(blob)
    return repaired
