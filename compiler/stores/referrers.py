"""A release's signature and provenance in an OCI registry, the way cosign attaches Sigstore bundles
(sigstore/cosign specs/BUNDLE_SPEC.md): each is an artifact manifest whose ``subject`` is the release's image
manifest, found through the registry's referrers API or, on a registry without it (CNCF Distribution 2.x), through
the OCI spec's fallback tag ``sha256-<digest>``: an image index listing the referrers, which the attacher keeps.
Each carries cosign's bundle annotations, and a tag of its own (:data:`ATTACHED_TAG`) so no garbage collection of
untagged manifests removes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from compiler.core.errors import CheckFailed, EnvironmentProblem
from compiler.core.jsonio import parse_json
from compiler.stores.base import ATTACHMENTS, MAX_ATTACHMENT_BYTES, SHA256, check_version
from compiler.stores.oci_names import annotation, annotation_of

IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_BYTES = b"{}"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
STATEMENT = "application/vnd.in-toto+json"
KIND = annotation("attachment")
"""Annotation naming what an attached artifact is (``signature`` or ``provenance``); read under the legacy key too."""
CREATED = "org.opencontainers.image.created"
BUNDLE_CONTENT = "dev.sigstore.bundle.content"
BUNDLE_PREDICATE = "dev.sigstore.bundle.predicateType"
"""cosign's annotations on a bundle's referrer (``WriteAttestationNewBundleFormat``), so a client that picks
attestations by predicate type from a listing tells the signature from the provenance."""
ATTACHED_TAG = "_attached."
"""Each attachment is also the tag ``_attached.<subject's sha256>.<kind>`` (no version starts with ``_``): a
registry's garbage collection that deletes untagged manifests (``docker-registry garbage-collect
--delete-untagged``) keeps it, which the fallback index alone does not make it do."""
MAX_REFERRERS = 256
"""Referrers of one version opened to find ours: a signature, a provenance, and whatever other tools attached."""


class Referrers:
    """Mixed into :class:`compiler.stores.oci.OciStore`: it supplies ``_repo``, ``_request``, ``_scope``,
    ``_tag_digest``, ``_manifest``, ``_upload``, ``_put_manifest``, ``_read_small_blob``, ``_settle``, ``uri``, and
    (from :class:`compiler.stores.oci_records.OciRecords`) ``_delete_digest``."""

    def attach(self, name: str, version: str, kind: str, data: bytes) -> bytes | None:
        repo = self._repo(name)
        subject = self._subject(repo, version)
        for _ in range(3):  # the fallback index is read, extended and written: a racing attacher is retried
            found = self._find(repo, subject, kind)
            if found is not None:
                return self._read_attached(repo, *found, kind)
            digest, descriptor = self._push_referrer(repo, subject, kind, data)
            if descriptor is not None:  # no referrers API: keep the fallback tag's index
                self._add_to_index(repo, subject, descriptor)
                self._settle()
            found = self._find(repo, subject, kind)
            if found is not None:  # ours, or a racing attacher's that was listed first: the first one stays
                return None if found[0] == digest else self._read_attached(repo, *found, kind)
        raise EnvironmentProblem(f"store {self.uri}: the referrers of {repo}:{version} keep changing; try again")

    def attachment(self, name: str, version: str, kind: str) -> bytes | None:
        repo = self._repo(name)
        subject = self._subject(repo, version, missing_ok=True)
        if subject is None:
            return None
        found = self._find(repo, subject, kind)
        return None if found is None else self._read_attached(repo, *found, kind)

    def _delete_attachments(self, name: str, version: str) -> None:
        """Remove the version's signature and provenance artifacts and the fallback tag's index listing them."""
        repo = self._repo(name)
        subject = self._subject(repo, version, missing_ok=True)
        if subject is None:
            return
        for digest, manifest in self._referrers(repo, subject):
            kind = annotation_of(manifest.get("annotations"), "attachment")
            if kind in ATTACHMENTS:
                self._delete_digest(repo, digest, f"the {kind} of {repo}:{version}")
        index = self._fallback(repo, subject)  # an image index: removed by the digest of its bytes
        if index is not None:
            self._delete_digest(
                repo, "sha256:" + hashlib.sha256(index[1]).hexdigest(), f"the referrers of {repo}:{version}"
            )

    def artifact(self, name: str, version: str) -> tuple[str, str] | None:
        """The version's image manifest, as cosign names it: ``host/repository/name`` and its sha256."""
        digest = self._subject(self._repo(name), version)
        return f"{self.host}/{self._repo(name)}", digest.removeprefix("sha256:")

    def _subject(self, repo: str, version: str, *, missing_ok: bool = False) -> str | None:
        digest = self._tag_digest(repo, check_version(version))
        if digest is None and not missing_ok:
            raise EnvironmentProblem(
                f"store {self.uri}: {repo}:{version} vanished before its {version} attachment "
                "was written; publish again"
            )
        return digest

    def _find(self, repo: str, subject: str, kind: str) -> tuple[str, dict[str, Any]] | None:
        """The first artifact of ``kind`` referring to ``subject``: its digest and manifest."""
        return next(
            (
                found
                for found in self._referrers(repo, subject)
                if annotation_of(found[1].get("annotations"), "attachment") == kind
            ),
            None,
        )

    def _referrers(self, repo: str, subject: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each artifact listed as referring to ``subject`` (the first :data:`MAX_REFERRERS`), opened: what it is is
        read from its own manifest (content-addressed, so any copy keeps it), never from a listing's annotations or
        artifact types, which other tools (an attacher, a mirror) may drop or get wrong; one whose manifest names
        another subject is not its referrer."""
        for entry in self._index(repo, subject)[:MAX_REFERRERS]:
            digest = entry.get("digest") if isinstance(entry, dict) else None
            if not isinstance(digest, str) or not digest.startswith("sha256:") or not SHA256.fullmatch(digest[7:]):
                continue
            try:
                found = self._manifest(repo, digest)
            except CheckFailed:  # not a manifest: another tool's, or planted; it cannot hide ours listed after it
                continue
            referred = (found[0].get("subject") or {}) if found else {}
            if isinstance(referred, dict) and referred.get("digest") == subject:
                yield digest, found[0]

    def _index(self, repo: str, subject: str) -> list[Any]:
        """The referrers of ``subject``: the referrers API's answer, else the fallback tag's index."""
        response = self._request(
            "GET",
            f"/v2/{repo}/referrers/{subject}",
            f"the referrers of {repo}@{subject[:19]}",
            scope=self._scope(repo),
            headers={"Accept": IMAGE_INDEX},
        )
        if response is None or not response.headers.get("Content-Type", "").startswith(IMAGE_INDEX):
            found = self._fallback(repo, subject)
            return found[0] if found else []
        return _manifests(response.content)

    def _fallback(self, repo: str, subject: str) -> tuple[list[Any], bytes] | None:
        tag = subject.replace(":", "-")
        response = self._request(
            "GET",
            f"/v2/{repo}/manifests/{tag}",
            f"{repo}:{tag}",
            scope=self._scope(repo),
            headers={"Accept": IMAGE_INDEX},
        )
        return None if response is None else (_manifests(response.content), response.content)

    def _push_referrer(self, repo: str, subject: str, kind: str, data: bytes) -> tuple[str, dict[str, Any] | None]:
        """Push the artifact: its digest, and its descriptor for the fallback index (None when the registry
        indexed it itself: it answers with an ``OCI-Subject`` header)."""
        artifact_type = BUNDLE if _is_bundle(data) else STATEMENT
        sha256, empty = self._send(repo, data), self._send(repo, EMPTY_BYTES)
        annotations = _annotations(kind, data, artifact_type)
        manifest = {
            "schemaVersion": 2,
            "mediaType": IMAGE_MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": EMPTY, "digest": f"sha256:{empty}", "size": len(EMPTY_BYTES)},
            "layers": [
                {
                    "mediaType": artifact_type,
                    "digest": f"sha256:{sha256}",
                    "size": len(data),
                    "annotations": {"org.opencontainers.image.title": f"sha256-{sha256}.sigstore.json"},
                }
            ],
            "subject": {"mediaType": IMAGE_MANIFEST, "digest": subject, "size": self._subject_size(repo, subject)},
            "annotations": annotations,
        }
        body = json.dumps(manifest, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        what = f"the {kind} of {repo}@{subject[:19]}"
        tag = f"{ATTACHED_TAG}{subject.removeprefix('sha256:')}.{kind}"
        try:
            response = self._put_manifest(repo, tag, body, IMAGE_MANIFEST, what=what)
        except EnvironmentProblem as exc:
            if not getattr(exc, "taken", False):
                raise
            response = self._put_manifest(repo, digest, body, IMAGE_MANIFEST, what=what)  # a racer's tag, immutable
        if response is not None and response.headers.get("OCI-Subject"):
            return digest, None
        return digest, {
            "mediaType": IMAGE_MANIFEST,
            "digest": digest,
            "size": len(body),
            "artifactType": artifact_type,
            "annotations": annotations,
        }

    def _send(self, repo: str, data: bytes) -> str:
        """Upload a small blob unless the repository has it; its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        if self._request("HEAD", f"/v2/{repo}/blobs/sha256:{sha256}", "a blob", scope=self._scope(repo)) is None:
            self._upload(repo, sha256, data, len(data))
        return sha256

    def _subject_size(self, repo: str, subject: str) -> int:
        response = self._request(
            "HEAD",
            f"/v2/{repo}/manifests/{subject}",
            f"{repo}@{subject[:19]}",
            scope=self._scope(repo),
            headers={"Accept": IMAGE_MANIFEST},
        )
        return int(response.headers.get("Content-Length", 0)) if response is not None else 0

    def _add_to_index(self, repo: str, subject: str, descriptor: dict[str, Any]) -> None:
        found = self._fallback(repo, subject)
        entries = [e for e in (found[0] if found else []) if isinstance(e, dict)]
        index = {"schemaVersion": 2, "mediaType": IMAGE_INDEX, "manifests": [*entries, descriptor]}
        tag = subject.replace(":", "-")
        self._put_manifest(repo, tag, json.dumps(index, separators=(",", ":")).encode(), IMAGE_INDEX)

    def _read_attached(self, repo: str, digest: str, manifest: dict[str, Any], kind: str) -> bytes:
        layers = manifest.get("layers")
        what = f"the {kind} of {repo} ({digest[:19]})"
        if not isinstance(layers, list) or not layers or not isinstance(layers[0], dict):
            raise self._damaged(what, "its artifact manifest has no layer")
        size = layers[0].get("size")
        if not isinstance(size, int) or size > MAX_ATTACHMENT_BYTES:
            raise self._damaged(what, f"its layer is not a record of at most {MAX_ATTACHMENT_BYTES} bytes")
        return self._read_small_blob(repo, layers[0], what)


def _manifests(body: bytes) -> list[Any]:
    try:
        index = parse_json(body, MAX_ATTACHMENT_BYTES)
    except ValueError:
        index = None
    manifests = index.get("manifests") if isinstance(index, dict) else None
    return manifests if isinstance(manifests, list) else []


def _is_bundle(data: bytes) -> bool:
    try:
        found = parse_json(data, MAX_ATTACHMENT_BYTES)
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("mediaType") == BUNDLE


def _annotations(kind: str, data: bytes, artifact_type: str) -> dict[str, str]:
    """What an attachment's manifest (and its entry in the fallback index) is annotated with: its kind, when it was
    made, and for a Sigstore bundle what cosign writes: a DSSE envelope, and the predicate type of its statement."""
    import time

    annotations = {KIND: kind, CREATED: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if artifact_type == BUNDLE:
        annotations[BUNDLE_CONTENT] = "dsse-envelope"
        predicate = _predicate_type(data)
        if predicate:
            annotations[BUNDLE_PREDICATE] = predicate
    return annotations


def _predicate_type(bundle: bytes) -> str | None:
    """The predicate type of the in-toto statement a bundle's DSSE envelope carries (one this publisher made)."""
    import base64

    try:
        payload = parse_json(bundle, MAX_ATTACHMENT_BYTES)["dsseEnvelope"]["payload"]
        value = parse_json(base64.b64decode(payload, validate=True), MAX_ATTACHMENT_BYTES).get("predicateType")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return value if isinstance(value, str) else None
