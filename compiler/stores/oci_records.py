"""The OCI store's records beyond releases and channels, each a tag of its own (docs/store-oci.md): a version's yank
(``_yanked.VERSION``), a sharded release's staged parts (``_staged.<version digest>.JOB``), the remote cache's entries
(tag KEY in ``<repository>/cache/KIND``), and removal. A mixin of :class:`compiler.stores.oci.OciStore`, whose
request helpers it uses."""

from __future__ import annotations

import hashlib
from typing import Any

from compiler.core.jsonio import parse_json
from compiler.core.record_files import MAX_RECORD_BYTES
from compiler.stores.base import NAME as NAME_PATTERN
from compiler.stores.base import SHA256, check_name, check_sha256, check_version
from compiler.stores.oci_names import media_type

CACHE_ARTIFACT = media_type("cache-entry.v1+json")
CACHE_CONFIG = media_type("cache-entry.index.v1+json")
YANK_ARTIFACT = media_type("yank.v1+json")
YANK_CONFIG = media_type("yank.record.v1+json")
YANK_TAG = "_yanked."
"""A version's yank record is the tag ``_yanked.VERSION`` (no version starts with ``_``)."""
STAGED_ARTIFACT = media_type("staged-part.v1+json")
STAGED_CONFIG = media_type("staged-part.record.v1+json")
STAGED_TAG = "_staged."
BLOB = "application/octet-stream"


class OciRecords:
    def mark_yanked(self, name: str, version: str, data: bytes) -> bytes | None:
        return self._create_tag(
            self._repo(name), YANK_TAG + check_version(version), data, YANK_CONFIG, YANK_ARTIFACT, []
        )

    def _create_tag(
        self, repo: str, tag: str, data: bytes, config_type: str, artifact_type: str, layers: list[dict[str, Any]]
    ) -> bytes | None:
        """A record tag written once, as a version is (tag absent -> push -> settle -> re-read): None when this
        call wrote it, else the record there."""
        found = self._record(repo, tag, artifact_type)
        if found is not None:
            return found[0]
        ours = self._push(repo, tag, data, config_type, artifact_type, layers, {})
        self._settle()
        found = self._record(repo, tag, artifact_type)
        return None if found is None or found[1] == ours else found[0]

    def read_yank(self, name: str, version: str) -> bytes | None:
        found = self._record(self._repo(name), YANK_TAG + check_version(version), YANK_ARTIFACT)
        return None if found is None else found[0]

    # --- cache entries and removal ------------------------------------------------------------------------

    def create_entry(self, kind: str, key: str, data: bytes, blobs: list[tuple[str, int]]) -> bytes | None:
        """An entry is the tag KEY in ``cache/KIND``: its config blob is the index, its layers the blobs (so the
        registry checks they are there, and its garbage collection keeps them)."""
        layers = [{"mediaType": BLOB, "digest": f"sha256:{check_sha256(sha)}", "size": size} for sha, size in blobs]
        return self._create_tag(
            self._repo(f"cache/{kind}"), check_sha256(key), data, CACHE_CONFIG, CACHE_ARTIFACT, layers
        )

    def read_entry(self, kind: str, key: str) -> bytes | None:
        found = self._record(self._repo(f"cache/{kind}"), check_sha256(key), CACHE_ARTIFACT)
        return None if found is None else found[0]

    def entry_keys(self, kind: str) -> list[str]:
        repo = self._repo(f"cache/{kind}")
        return sorted(
            t
            for t in self._paged(f"/v2/{repo}/tags/list?n=1000", "tags", f"the tags of {repo}", self._scope(repo))
            if SHA256.fullmatch(t)
        )

    def _delete_tag(self, repo: str, tag: str) -> None:
        """Distribution deletes a manifest by digest (and with it every tag on it); the registry must allow
        deletes (``storage.delete.enabled``). Its blobs go in the registry's own garbage collection."""
        digest = self._tag_digest(repo, tag)
        if digest is not None:
            self._delete_digest(repo, digest, f"{repo}:{tag}")

    def _delete_digest(self, repo: str, digest: str, what: str) -> None:
        self._request(
            "DELETE",
            f"/v2/{repo}/manifests/{digest}",
            f"removing {what}",
            scope=f"repository:{repo}:pull,push,delete",
            ok=(202, 200),
        )

    def delete_entry(self, kind: str, key: str) -> None:
        self._delete_tag(self._repo(f"cache/{kind}"), check_sha256(key))

    def delete_manifest(self, name: str, version: str) -> None:
        self._delete_attachments(name, version)  # found through the version's manifest: before it goes
        self._delete_tag(self._repo(name), check_version(version))
        self._delete_tag(self._repo(name), YANK_TAG + check_version(version))

    def delete_blob(self, name: str, sha256: str) -> None:
        repo = self._repo(name)
        self._request(
            "DELETE",
            f"/v2/{repo}/blobs/sha256:{check_sha256(sha256)}",
            f"removing blob {sha256[:12]}",
            scope=f"repository:{repo}:pull,push,delete",
            ok=(202, 200),
        )

    # --- sharded releases ---------------------------------------------------------------------------------

    def _staged_prefix(self, version: str) -> str:
        """Tags hold 128 characters: a version (64) and a job (64) fit only as the version's digest."""
        return f"{STAGED_TAG}{hashlib.sha256(check_version(version).encode()).hexdigest()[:24]}."

    def stage(self, name: str, version: str, job: str, data: bytes) -> bytes | None:
        """A job's part as a tag whose layers are the blobs it sent (so the registry keeps them until finalize)."""
        layers = [{"mediaType": BLOB, "digest": f"sha256:{sha}", "size": size} for sha, size in _blobs_of(data)]
        return self._create_tag(
            self._repo(name),
            self._staged_prefix(version) + check_name(job),
            data,
            STAGED_CONFIG,
            STAGED_ARTIFACT,
            layers,
        )

    def staged(self, name: str, version: str) -> dict[str, bytes]:
        repo, prefix = self._repo(name), self._staged_prefix(version)
        parts = {}
        for tag in self._tags(name):
            job = tag[len(prefix) :]
            if tag.startswith(prefix) and NAME_PATTERN.fullmatch(job) and ".." not in job:
                found = self._record(repo, tag, STAGED_ARTIFACT)
                if found is not None:
                    parts[job] = found[0]
        return parts


def _blobs_of(data: bytes) -> list[tuple[str, int]]:
    """(sha256, size) of every blob a staged part names (``{"sha256", "size_bytes"}`` anywhere in it)."""
    found: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            sha, size = node.get("sha256"), node.get("size_bytes")
            if isinstance(sha, str) and SHA256.fullmatch(sha) and isinstance(size, int) and size >= 0:
                found[sha] = size
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(parse_json(data, MAX_RECORD_BYTES))  # a part this run wrote, or one the registry returned as it was staged
    return sorted(found.items())
