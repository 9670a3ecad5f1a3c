"""A store in an OCI registry (``oci://host[:port]/repository``, HTTPS; ``oci+http://`` for plain HTTP), through the
distribution HTTP API with ``requests``.

Layout (docs/store-oci.md): release ``NAME`` is the repository ``<repository>/NAME``; version ``V`` is the tag ``V``,
an OCI image manifest of ``artifactType`` :data:`RELEASE_ARTIFACT` whose config blob is the release manifest JSON and
whose layers are every blob the release names, each titled with its file name (each engine's plan, with SKU,
compute capability and precision annotations, and layers.json; check.json; the golden inputs). Names are
:mod:`compiler.stores.oci_names`'s. Channel ``C`` is the tag ``_channel.C`` (no version starts with ``_``), a
manifest of ``artifactType`` :data:`CHANNEL_ARTIFACT` whose config blob is the channel record. A version's signature and
provenance refer to its manifest as cosign's bundles do (:mod:`compiler.stores.referrers`).

Why ``requests`` and not the ``oras`` client: the store streams a :class:`VerifyingReader` as the upload body (oras
opens files by path), needs the registry's digests and status codes to create, compare and confirm tags (oras
hides them behind push/pull), and writes manifests of its own shape; that is a dozen calls of the HTTP API.

The protocol has no create-only or compare-and-swap tag write. A version is created by: tag absent -> push ->
wait :attr:`OciStore.settle_seconds` -> re-read; a publisher that finds the tag taken before or after its write
gets the winner's bytes (exit 4 if they differ). A channel moves only if its tag still has the digest its mover
read, checked right before the push and confirmed after the settle. Two writers whose pushes land more than the
settle apart after both saw the old state can still overwrite one another; only a registry that enforces
immutable tags excludes that for versions (docs/store-oci.md names which).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

from compiler.core.errors import CheckFailed, EnvironmentProblem, InvalidInput
from compiler.core.record_files import MAX_RECORD_BYTES
from compiler.core.records import ReleaseManifest
from compiler.core.release_files import ReleaseBlob, release_blobs
from compiler.stores.base import (
    CHANNEL,
    NAME,
    SHA256,
    VERSION,
    HashingSink,
    Sink,
    Store,
    Token,
    VerifyingReader,
    check_channel,
    check_kind,
    check_name,
    check_sha256,
    check_version,
)
from compiler.stores.deadline import Deadlined
from compiler.stores.oci_auth import CHUNK, Authorizer, answer_json, read_bounded, timeouts
from compiler.stores.oci_names import annotation, annotation_of, media_type, readable
from compiler.stores.oci_records import OciRecords
from compiler.stores.referrers import EMPTY, EMPTY_BYTES, Referrers

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
RELEASE_ARTIFACT = media_type("release.v1+json")
RELEASE_CONFIG = media_type("release.manifest.v1+json")
CHANNEL_ARTIFACT = media_type("channel.v1+json")
CHANNEL_CONFIG = media_type("channel.record.v1+json")
PLAN = media_type("plan.v1")
LAYERS = media_type("layers.v1+json")
CHECK = media_type("check.v1+json")
GOLDEN = media_type("golden.v1+npz")
"""The golden inputs (golden.npz, numpy's zip of .npy arrays): a layer like the others, so every client that copies
or collects the release by its manifest keeps them."""
LAYER_TYPES = {"plan": PLAN, "layers": LAYERS, "check": CHECK, "golden": GOLDEN}
"""A release blob's media type by its role (:class:`compiler.core.release_files.ReleaseBlob`)."""
FILEPATH = "org.cncf.model.filepath"
"""ModelPack's annotation for where a layer's file goes in a model's folder (``rtx-4090/fp16/engine.plan``)."""
TITLE = "org.opencontainers.image.title"
"""The file name a client (``oras pull``) writes a layer to: unique within a release."""
PREVIOUS = annotation("previous")
"""On a channel's manifest: the digest of the state it replaced, so a mover can tell whether a later state was
built on its own."""
CHANNEL_TAG = "_channel."
"""Channel tags start with ``_``, which no version may: the two can never collide."""
MAX_PAGES = 10_000
"""Pages of a tag list or catalog (1000 entries each): ten million tags is no registry's."""
SETTLE_SECONDS = 0.2

HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
"""A repository path component as the distribution spec allows it."""
URI_HINT = "use oci://HOST[:PORT]/REPOSITORY (HTTPS) or oci+http://HOST:PORT/REPOSITORY (plain HTTP)"


def parse_oci_uri(uri: str) -> tuple[str, str, str]:
    """``oci[+http]://host[:port]/repository`` -> (URL scheme, host[:port], repository), refusing anything else
    (credentials in the URI, a query, ``..``) before any request."""
    scheme, rest = (
        ("http", uri[len("oci+http://") :]) if uri.startswith("oci+http://") else ("https", uri[len("oci://") :])
    )
    shown = uri.split("://", 1)[0] + "://"
    host, _, repository = rest.partition("/")
    if "@" in host:
        raise InvalidInput(
            f"store {shown}...: credentials do not go in the URI (they would show in logs); log in "
            "with `docker login HOST` or set DOCKER_CONFIG"
        )
    match = HOST.fullmatch(host)
    if not match or not 0 < int(match["port"] or 443) < 65536:
        raise InvalidInput(f"store {uri}: {host!r} is not a registry host[:port]; {URI_HINT}")
    parts = repository.strip("/").split("/")
    for part in parts:
        if not COMPONENT.fullmatch(part):
            raise InvalidInput(
                f"store {uri}: repository part {part!r}: use lower-case a-z 0-9 separated by . _ - "
                f"between slashes; {URI_HINT}"
            )
    repository = "/".join(parts)
    if len(repository) + 66 > 255:
        raise InvalidInput(f"store {uri}: repository too long (a registry allows 255 characters with the release name)")
    return scheme, host, repository


class OciStore(Deadlined, OciRecords, Referrers, Store):
    settle_seconds = SETTLE_SECONDS
    """How long a tag push waits before it re-reads the tag to see whether a racing push overwrote it."""

    def __init__(self, uri: str) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        self.uri = uri
        scheme, self.host, self.repository = parse_oci_uri(uri)
        self.base = f"{scheme}://{self.host}"
        self.session = requests.Session()
        # reads only (a streamed upload cannot be sent twice); 500 too: Distribution's filesystem driver answers
        # it to a read of a tag whose link file a concurrent push is rewriting ("invalid checksum digest format")
        retry = Retry(
            total=5,
            connect=3,
            read=2,
            status=4,
            backoff_factor=0.1,
            allowed_methods={"GET", "HEAD"},
            status_forcelist=(429, 500, 502, 503, 504),
            raise_on_status=False,
        )
        self.session.mount(self.base, HTTPAdapter(max_retries=retry, pool_maxsize=8))
        self._auth = Authorizer(self.uri, self.host, self.session)

    # --- requests ----------------------------------------------------------------------------------------

    def _repo(self, name: str) -> str:
        """A release's repository; ``cache/KIND`` is the remote cache's repository of that kind (two path parts,
        so no release name can be it)."""
        if name.startswith("cache/"):
            return f"{self.repository}/cache/{check_kind(name[len('cache/') :])}"
        return f"{self.repository}/{check_name(name)}"

    def _request(self, method: str, url: str, what: str, *, scope: str, ok: tuple[int, ...] = (200,), **kwargs: Any):
        """One request, authorized for ``scope``; None on 404, the response when its status is in ``ok``; any
        other answer is an error in the store's terms (unreachable, denied -> exit 3)."""
        import requests

        url = urljoin(self.base + "/", url)
        same_host = urlsplit(url).netloc == self.host  # credentials go to the registry only, never to a Location
        given = kwargs.pop("headers", {})
        streamed = kwargs.pop("stream", False)
        resendable = not isinstance(kwargs.get("data"), _Body)  # a streamed file is read once
        for attempt in range(2):
            headers = dict(given)
            if same_host and (authorization := self._auth.header(scope)):
                headers["Authorization"] = authorization
            try:
                response = self.session.request(
                    method, url, headers=headers, timeout=timeouts(), **{**kwargs, "stream": True}
                )
                if not streamed:
                    read_bounded(response, f"store {self.uri}: the registry's answer to {what}")
            except requests.exceptions.SSLError:
                raise EnvironmentProblem(
                    f"store {self.uri}: TLS to {self.host} failed; if the registry speaks plain "
                    f"HTTP (a local one), spell the store oci+http://{self.host}/"
                    f"{self.repository}"
                ) from None
            except requests.exceptions.RequestException as exc:
                raise EnvironmentProblem(
                    f"store {self.uri}: cannot reach the registry {self.host} "
                    f"({type(exc).__name__}); is it up, and is the address right?"
                ) from None
            if response.status_code == 401 and attempt == 0 and same_host and resendable:
                response.close()
                self._auth.challenge(response, scope)
                continue
            break
        if response.status_code in ok:
            return response
        if response.status_code == 404:
            response.close()
            return None
        if streamed:
            read_bounded(response, f"store {self.uri}: the registry's answer to {what}")
        code, message = _error_of(response)
        refused = _Refused(
            response.status_code,
            code,
            message,
            f"store {self.uri}: the registry refused {what} ({response.status_code} {code}: {message[:200]})",
        )
        if response.status_code in (401, 403) and not refused.taken:
            raise EnvironmentProblem(
                f"store {self.uri}: access denied to {what} ({response.status_code} {code}); "
                f"log in with `docker login {self.host}` (or set DOCKER_CONFIG) with an "
                "account that may read and push there"
            )
        raise refused

    def _scope(self, repo: str) -> str:
        return f"repository:{repo}:pull,push"

    # --- blobs -------------------------------------------------------------------------------------------

    def blob_size(self, name: str, sha256: str) -> int | None:
        repo = self._repo(name)
        response = self._request(
            "HEAD", f"/v2/{repo}/blobs/sha256:{check_sha256(sha256)}", f"blob {sha256[:12]}", scope=self._scope(repo)
        )
        if response is None:
            return None
        length = response.headers.get("Content-Length", "")
        if not length.isascii() or not length.isdigit() or len(length) > 19:
            raise self._damaged(f"blob {sha256[:12]}", f"the registry gave its size as {length[:40]!r}")
        return int(length)

    def put_blob(self, name: str, sha256: str, source: VerifyingReader) -> bool:
        """The registry stores a blob only under the digest its bytes hash to (it verifies the PUT), so writing a
        digest that is there never replaces it with other bytes. A blob of one chunk or less is read and verified
        whole before it is sent (an empty body would not be read at all)."""
        body = source.read_all() if source.size <= CHUNK else _Body(source, source.size)
        self._upload(self._repo(name), check_sha256(sha256), body, source.size)
        source.require_verified()
        return True

    def _upload(self, repo: str, sha256: str, body: Any, size: int) -> None:
        """A monolithic upload (POST, then one PUT naming the digest), which the registry refuses unless the bytes
        hash to it; an upload cut short (a refused read, a killed process) never becomes a blob."""
        what = f"blob sha256:{sha256[:12]} of {repo}"
        started = self._request("POST", f"/v2/{repo}/blobs/uploads/", what, scope=self._scope(repo), ok=(202,))
        if started is None or "Location" not in started.headers:
            raise EnvironmentProblem(f"store {self.uri}: the registry gave no upload location for {what}")
        location = urljoin(self.base + "/", started.headers["Location"])
        try:
            self._request(
                "PUT",
                location + ("&" if "?" in location else "?") + f"digest=sha256:{sha256}",
                what,
                scope=self._scope(repo),
                ok=(201,),
                data=body,
                headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            )
        except _Refused as exc:
            self._cancel(location, repo)
            if exc.code == "DIGEST_INVALID":
                raise CheckFailed(
                    f"store {self.uri}: the registry found that {what} does not hash to its digest; nothing was stored"
                ) from None
            raise
        except BaseException:
            self._cancel(location, repo)
            raise

    def _cancel(self, location: str, repo: str) -> None:
        """Drop an unfinished upload (best effort: the registry also purges stale ones)."""
        with contextlib.suppress(Exception):  # the error that got us here is the one to report
            self._request("DELETE", location, "an unfinished upload", scope=self._scope(repo), ok=(204, 200))

    def get_blob(self, name: str, sha256: str, sink: Sink, size: int | None = None) -> bool:
        return self._get_blob(self._repo(name), check_sha256(sha256), sink, size)

    def _get_blob(self, repo: str, sha256: str, sink: Sink, size: int | None = None) -> bool:
        """Told the expected ``size``, asks for one byte more than that (``Range``), so even a registry that
        would send a longer blob sends no more than it takes to tell; the sink refuses the byte past it."""
        import requests

        ranged = {"Range": f"bytes=0-{size}"} if size else {}
        response = self._request(
            "GET",
            f"/v2/{repo}/blobs/sha256:{sha256}",
            f"blob {sha256[:12]}",
            scope=self._scope(repo),
            stream=True,
            ok=(200, 206),
            headers=ranged,
        )
        if response is None:
            return False
        with response:
            try:
                for data in response.iter_content(CHUNK):
                    sink.write(data)
            except requests.exceptions.RequestException as exc:
                raise EnvironmentProblem(
                    f"store {self.uri}: the download of blob {sha256[:12]} broke off ({type(exc).__name__}); try again"
                ) from None
        return True

    def _read_small_blob(self, repo: str, descriptor: dict[str, Any], what: str) -> bytes:
        """A record blob (a config), refused unless it hashes to the descriptor's digest."""
        import io

        digest, size = str(descriptor.get("digest", "")), descriptor.get("size")
        if not digest.startswith("sha256:") or not isinstance(size, int) or not 0 <= size <= MAX_RECORD_BYTES:
            raise self._damaged(what, "its config descriptor is not a sha256 blob of a record's size")
        buffer = io.BytesIO()
        sink = HashingSink(buffer, size, digest[7:], f"store {self.uri}: {what}'s config blob")
        if not SHA256.fullmatch(digest[7:]) or not self._get_blob(repo, digest[7:], sink, size):
            raise self._damaged(what, f"its config blob {digest[:19]} is missing")
        if sink.size != size or sink.hexdigest() != digest[7:]:
            raise self._damaged(what, f"its config blob does not hash to {digest[:19]}")
        return buffer.getvalue()

    def _damaged(self, what: str, why: str) -> CheckFailed:
        return CheckFailed(
            f"store {self.uri}: {what} is damaged or not ours ({why}); publish it again or ask who owns the registry"
        )

    # --- tags --------------------------------------------------------------------------------------------

    def _manifest(self, repo: str, tag: str) -> tuple[dict[str, Any], str] | None:
        """The manifest a tag points at and its digest, or None when the tag is absent."""
        response = self._request(
            "GET", f"/v2/{repo}/manifests/{tag}", f"{repo}:{tag}", scope=self._scope(repo), headers={"Accept": MANIFEST}
        )
        if response is None:
            return None
        body = response.content
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        manifest = answer_json(body)
        if not isinstance(manifest, dict):
            raise self._damaged(f"{repo}:{tag}", "its manifest is not OCI JSON")
        return manifest, digest

    def _record(self, repo: str, tag: str, artifact_type: str) -> tuple[bytes, Token] | None:
        """The record a tag carries as its config blob, and the manifest digest (the tag's state)."""
        found = self._manifest(repo, tag)
        if found is None:
            return None
        manifest, digest = found
        if manifest.get("artifactType") not in readable(artifact_type):
            raise self._damaged(f"{repo}:{tag}", f"artifactType {manifest.get('artifactType')!r}, not {artifact_type}")
        config = manifest.get("config")
        return self._read_small_blob(repo, config if isinstance(config, dict) else {}, f"{repo}:{tag}"), digest

    def _tag_digest(self, repo: str, tag: str) -> str | None:
        response = self._request(
            "HEAD",
            f"/v2/{repo}/manifests/{tag}",
            f"{repo}:{tag}",
            scope=self._scope(repo),
            headers={"Accept": MANIFEST},
        )
        if response is None:
            return None
        digest = response.headers.get("Docker-Content-Digest")
        return digest if digest else self._manifest(repo, tag)[1]  # type: ignore[index]

    def _push(
        self,
        repo: str,
        tag: str,
        record: bytes,
        config_type: str,
        artifact_type: str,
        layers: list[dict[str, Any]],
        annotations: dict[str, str],
    ) -> str:
        """Upload ``record`` as the config blob, then point ``tag`` at a manifest of it: its digest. Raises
        :class:`_Refused` with ``taken`` set when the registry keeps the tag immutable."""
        sha256 = self._ensure_blob(repo, record)
        if not layers:  # image-spec: an artifact with no content has one layer, the empty descriptor
            layers = [{"mediaType": EMPTY, "digest": f"sha256:{self._ensure_blob(repo, EMPTY_BYTES)}", "size": 2}]
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": config_type, "digest": f"sha256:{sha256}", "size": len(record)},
            "layers": layers,
            "annotations": annotations,
        }
        body = json.dumps(manifest, indent=None, separators=(",", ":")).encode()
        self._put_manifest(repo, tag, body)
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def _ensure_blob(self, repo: str, data: bytes) -> str:
        """A small blob in ``repo`` (sent unless the registry has it): its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        if self._request("HEAD", f"/v2/{repo}/blobs/sha256:{sha256}", "a record blob", scope=self._scope(repo)) is None:
            self._upload(repo, sha256, data, len(data))
        return sha256

    def _put_manifest(
        self, repo: str, reference: str, body: bytes, media_type: str = MANIFEST, *, what: str | None = None
    ) -> Any:
        """PUT a manifest at a tag or digest, again after a transient refusal: Distribution's filesystem driver,
        reading a blob link or manifest that a concurrent push of the same bytes is rewriting, answers 500 or 400
        DIGEST_INVALID for a manifest that is fine. Sending it again is safe: same bytes. The registry's answer."""
        attempt = 0
        while True:
            try:
                return self._request(
                    "PUT",
                    f"/v2/{repo}/manifests/{reference}",
                    what or f"tag {repo}:{reference}",
                    scope=self._scope(repo),
                    ok=(201, 200),
                    data=body,
                    headers={"Content-Type": media_type},
                )
            except _Refused as exc:
                if attempt == 3 or not (exc.status >= 500 or exc.code == "DIGEST_INVALID"):
                    raise
            time.sleep(0.1 * 2**attempt)
            attempt += 1

    def _settle(self) -> None:
        """Give a racing push that started before ours time to land, so the re-read after it sees the winner."""
        time.sleep(self.settle_seconds)

    # --- releases ----------------------------------------------------------------------------------------

    def create_manifest(self, name: str, version: str, data: bytes) -> bytes | None:
        repo, tag = self._repo(name), check_version(version)
        layers, annotations = _release_layers(data)
        for _ in range(3):  # again only if the tag vanished (removed by hand) or an immutable one was taken
            found = self._record(repo, tag, RELEASE_ARTIFACT)
            if found is not None:
                return found[0]
            try:
                ours = self._push(repo, tag, data, RELEASE_CONFIG, RELEASE_ARTIFACT, layers, annotations)
            except _Refused as exc:
                if exc.taken:  # a registry with immutable tags: someone else pushed it meanwhile
                    continue
                raise
            self._settle()
            found = self._record(repo, tag, RELEASE_ARTIFACT)
            if found is not None:
                return None if found[1] == ours else found[0]
        raise EnvironmentProblem(f"store {self.uri}: {repo}:{tag} keeps changing under this publish; try again")

    def read_manifest(self, name: str, version: str) -> bytes | None:
        found = self._record(self._repo(name), check_version(version), RELEASE_ARTIFACT)
        return None if found is None else found[0]

    def names(self) -> list[str]:
        prefix = self.repository + "/"
        try:
            repositories = self._paged(
                "/v2/_catalog?n=1000",
                "repositories",
                "the registry's catalog",
                "registry:catalog:*",
                missing_is_empty=False,
            )
        except EnvironmentProblem as exc:  # denied (401/403) or refused: said plainly, with what to do instead
            if "the registry's catalog" not in str(exc):
                raise
            raise EnvironmentProblem(
                f"store {self.uri}: the registry refuses to list its catalog ("
                f"{str(exc).partition('(')[2].partition(')')[0]}); name the release (compile ls "
                "NAME --store ...)"
            ) from None
        return sorted(
            r[len(prefix) :]
            for r in repositories
            if r.startswith(prefix) and NAME.fullmatch(r[len(prefix) :]) and ".." not in r
        )

    def _tags(self, name: str) -> list[str]:
        repo = self._repo(name)
        return self._paged(f"/v2/{repo}/tags/list?n=1000", "tags", f"the tags of {repo}", self._scope(repo))

    def _paged(self, url: str, field: str, what: str, scope: str, *, missing_is_empty: bool = True) -> list[str]:
        """A listing the registry pages with ``Link: <next>; rel="next"`` headers."""
        items: list[str] = []
        seen: set[str] = set()
        while url:
            if url in seen or len(seen) >= MAX_PAGES:
                raise self._damaged(what, f"its pages lead back to one already read, or past {MAX_PAGES} pages")
            seen.add(url)
            response = self._request("GET", url, what, scope=scope)
            if response is None:
                if missing_is_empty:
                    return items
                raise EnvironmentProblem(
                    f"store {self.uri}: the registry does not list its repositories (no "
                    "catalog API); name the release (compile ls NAME --store ...)"
                )
            answer = answer_json(response.content)
            page = answer.get(field) if isinstance(answer, dict) else False
            if not isinstance(page, list | None):
                raise EnvironmentProblem(f"store {self.uri}: {what}: the registry's answer is not a JSON listing")
            items += [item for item in page or [] if isinstance(item, str)]
            url = response.links.get("next", {}).get("url", "")
            if url and urlsplit(urljoin(self.base + "/", url)).netloc != self.host:
                raise self._damaged(what, "its next page is on another host")
        return items

    def versions(self, name: str) -> list[str]:
        return sorted(t for t in self._tags(name) if VERSION.fullmatch(t) and ".." not in t)

    def channels(self, name: str) -> list[str]:
        return sorted(
            t[len(CHANNEL_TAG) :]
            for t in self._tags(name)
            if t.startswith(CHANNEL_TAG) and CHANNEL.fullmatch(t[len(CHANNEL_TAG) :])
        )

    # --- channels ----------------------------------------------------------------------------------------

    def read_channel(self, name: str, channel: str) -> tuple[bytes, Token] | None:
        return self._record(self._repo(name), CHANNEL_TAG + check_channel(channel), CHANNEL_ARTIFACT)

    def write_channel(self, name: str, channel: str, data: bytes, expected: Token | None) -> bool:
        repo, tag = self._repo(name), CHANNEL_TAG + check_channel(channel)
        if self._tag_digest(repo, tag) != expected:
            return False
        try:
            ours = self._push(repo, tag, data, CHANNEL_CONFIG, CHANNEL_ARTIFACT, [], {PREVIOUS: expected or ""})
        except _Refused as exc:
            if exc.taken:
                raise EnvironmentProblem(
                    f"{exc}; a channel is a tag that moves: exempt _channel.* tags from the registry's tag immutability"
                ) from None
            raise
        self._settle()
        return self._descends(repo, self._tag_digest(repo, tag), ours, expected)

    def _descends(self, repo: str, digest: str | None, ours: str, expected: Token | None) -> bool:
        """Whether the channel's state ``digest`` is our write or was built on it (a racer that read our state
        and moved on from it): follow each state's ``previous`` back until ours, or the state we built on."""
        for _ in range(1000):
            if digest == ours:
                return True
            if digest is None or digest == expected:
                return False  # overwritten by a mover that never read our state: read again and retry
            found = self._manifest(repo, digest)
            digest = (annotation_of(found[0].get("annotations"), "previous") or None) if found else None
        return False


class _Refused(EnvironmentProblem):
    """The registry answered with an error status (``code`` from its error body). ``taken``: it refused to move
    an immutable tag (ECR answers 400 TAG_INVALID, Harbor 412, both saying "immutable")."""

    def __init__(self, status: int, code: str, message: str, line: str) -> None:
        super().__init__(line)
        self.status, self.code = status, code
        self.taken = status in (400, 403, 409, 412) and (code == "TAG_INVALID" or "immutable" in message.lower())


class _Body:
    """A VerifyingReader as a request body of known length, read in 1 MiB chunks (urllib3 would read 16 KiB)."""

    def __init__(self, source: VerifyingReader, size: int) -> None:
        self.source, self.size = source, size

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        while data := self.source.read(CHUNK):
            yield data


def _error_of(response) -> tuple[str, str]:
    """The first error code and message of a distribution error body (``{"errors": [{"code", "message"}]}``)."""
    try:
        error = (answer_json(response.content).get("errors") or [{}])[0]
        return str(error.get("code", ""))[:80], str(error.get("message", ""))[:200]
    except (ValueError, AttributeError, IndexError, TypeError, KeyError):
        return "", str(response.reason or "")[:80]


def _release_layers(data: bytes) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The layers and annotations of a release's image manifest: every blob its manifest names (release_blobs), so
    the registry checks they are all there before it accepts the tag, its garbage collection keeps them and a copy
    of the tag carries them; each titled with its file name, unique in the release, so ``oras pull`` writes every
    one under its own name."""
    manifest = ReleaseManifest.model_validate_json(data)
    content = manifest.content
    layers = [
        {
            "mediaType": LAYER_TYPES[blob.role],
            "digest": f"sha256:{blob.ref.sha256}",
            "size": blob.ref.size_bytes,
            "annotations": {TITLE: blob.title, **_layer_annotations(blob)},
        }
        for blob in release_blobs(manifest)
    ]
    annotations = {
        TITLE: content.name,
        "org.opencontainers.image.version": content.version,
        "org.opencontainers.image.created": manifest.published.at,
        annotation("content-sha256"): manifest.content_sha256,
    }
    return layers, annotations


def _layer_annotations(blob: ReleaseBlob) -> dict[str, str]:
    """Where the file goes in a model's folder (ModelPack's file path) and, for a plan, where it runs."""
    engine = blob.engine
    if engine is None:
        return {FILEPATH: blob.title}
    folder = f"{engine.sku}/{engine.precision.value}"
    if blob.role == "layers":
        return {FILEPATH: f"{folder}/layers.json"}
    return {
        FILEPATH: f"{folder}/engine.plan",
        annotation("sku"): engine.sku,
        annotation("compute-capabilities"): ",".join(engine.compute_capabilities),
        annotation("precision"): engine.precision.value,
        annotation("backend"): " ".join(filter(None, (engine.backend.get("name"), engine.backend.get("version")))),
    }
