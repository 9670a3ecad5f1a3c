"""What only the OCI store has: its layout in the registry, the tag races the protocol cannot exclude, HTTPS by
default, credentials from the Docker config. The shared cases (publish, pull, races, SIGKILL, tampering) run against
a real registry in tests/stores/test_store.py."""

from __future__ import annotations

import base64
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from compiler.core.errors import Conflict, EnvironmentProblem, InvalidInput
from compiler.core.records import EngineRecord
from compiler.releases.publish import publish
from compiler.stores import open_store
from compiler.stores.oci import (
    CHANNEL_ARTIFACT,
    MANIFEST,
    PLAN,
    RELEASE_ARTIFACT,
    RELEASE_CONFIG,
    OciStore,
)
from compiler.stores.oci_auth import find_credentials
from tests.support.cli import assert_clean_error, run_cli
from tests.support.registry import environment_without_credentials


@pytest.fixture(scope="module")
def build(built_digits) -> Path:
    return built_digits(("rtx-3090", "rtx-4090"), ("fp16",))


@pytest.fixture(scope="module")
def other_build(built_digits) -> Path:
    return built_digits(("rtx-3090",), ("fp32",))


EMPTY_SHA256 = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
"""The image-spec's empty descriptor's digest: sha256 of ``{}``."""


def _get(registry, path: str, accept: str = MANIFEST) -> requests.Response:
    response = requests.get(f"http://{registry.host}/v2/{path}", headers={"Accept": accept}, timeout=10)
    response.raise_for_status()
    return response


def test_a_release_is_an_oci_artifact_with_its_manifest_as_config_and_one_layer_per_plan(registry, build):
    uri = registry.uri()
    publish(build, uri, "digits", "1.0.0")
    repository = uri.split("/", 3)[3] + "/digits"
    manifest = _get(registry, f"{repository}/manifests/1.0.0").json()
    assert (manifest["mediaType"], manifest["artifactType"]) == (MANIFEST, RELEASE_ARTIFACT)
    assert manifest["config"]["mediaType"] == RELEASE_CONFIG
    config = _get(registry, f"{repository}/blobs/{manifest['config']['digest']}", "*/*").content
    assert config == open_store(uri).read_manifest("digits", "1.0.0")
    plans = {
        layer["annotations"]["io.github.trt-compile.sku"]: layer
        for layer in manifest["layers"]
        if layer["mediaType"] == PLAN
    }
    for sku, capability in (("rtx-3090", "8.6"), ("rtx-4090", "8.9")):
        engine = EngineRecord.model_validate_json((build / sku / "fp16" / "engine.json").read_bytes())
        layer = plans[sku]
        assert (layer["digest"], layer["size"]) == (f"sha256:{engine.sha256}", engine.size_bytes)
        assert layer["annotations"]["io.github.trt-compile.compute-capabilities"] == capability
        assert layer["annotations"]["io.github.trt-compile.precision"] == "fp16"
        assert layer["annotations"]["org.cncf.model.filepath"] == f"{sku}/fp16/engine.plan"
    assert manifest["annotations"]["org.opencontainers.image.version"] == "1.0.0"


def test_channels_are_tags_no_version_can_be(registry, build):
    uri = registry.uri()
    publish(build, uri, "digits", "1.0.0")
    run = run_cli("promote", "digits@1.0.0", "--channel", "stable", "--store", uri)
    assert run.exit_code == 0, run.stderr
    repository = uri.split("/", 3)[3] + "/digits"
    image = open_store(uri).artifact("digits", "1.0.0")[1]  # its provenance and referrers index are tags too
    assert sorted(_get(registry, f"{repository}/tags/list", "*/*").json()["tags"]) == [
        "1.0.0",
        f"_attached.{image}.provenance",
        "_channel.stable",
        f"sha256-{image}",
    ]
    channel = _get(registry, f"{repository}/manifests/_channel.stable").json()
    assert channel["artifactType"] == CHANNEL_ARTIFACT
    # image-spec: an artifact with no content has one layer, the empty descriptor, and the registry holds it
    empty = {"mediaType": "application/vnd.oci.empty.v1+json", "digest": f"sha256:{EMPTY_SHA256}", "size": 2}
    assert channel["layers"] == [empty]
    assert _get(registry, f"{repository}/blobs/{empty['digest']}", "*/*").content == b"{}"
    store = open_store(uri)
    assert (store.versions("digits"), store.channels("digits")) == (["1.0.0"], ["stable"])
    with pytest.raises(InvalidInput):
        publish(build, uri, "digits", "_channel.stable")  # the channel's tag is no version


class _RacedStore(OciStore):
    """A store whose push is overwritten, by another publisher's real push, between its write and its re-read."""

    racer: bytes = b""

    def _settle(self) -> None:
        other = OciStore(self.uri)
        version = json.loads(self.racer)["content"]["version"]
        other._push(other._repo("digits"), version, self.racer, RELEASE_CONFIG, RELEASE_ARTIFACT, [], {})


def test_a_publisher_that_sees_the_tag_taken_after_its_write_exits_4(registry, build, other_build):
    uri = registry.uri()
    publish(other_build, uri, "digits", "9.0.0")
    theirs = json.loads(open_store(uri).read_manifest("digits", "9.0.0"))
    theirs["content"]["version"] = "2.0.0"  # the other content as if published to 2.0.0
    from compiler.core.files import hash_json

    theirs["content_sha256"] = hash_json(theirs["content"])
    raced = _RacedStore(uri)
    raced.racer = json.dumps(theirs).encode()
    with pytest.raises(Conflict, match=r"digits@2\.0\.0 is already published"):
        publish(build, raced, "digits", "2.0.0")
    assert json.loads(open_store(uri).read_manifest("digits", "2.0.0"))["content_sha256"] == theirs["content_sha256"]


def test_a_racer_of_the_same_content_makes_the_publish_unchanged(registry, build):
    elsewhere = registry.uri()
    publish(build, elsewhere, "digits", "2.0.2")
    raced = _RacedStore(registry.uri())
    raced.racer = open_store(elsewhere).read_manifest("digits", "2.0.2")  # same content, another publisher
    assert publish(build, raced, "digits", "2.0.2").status == "unchanged"
    assert open_store(raced.uri).read_manifest("digits", "2.0.2") == raced.racer


def test_https_is_the_default_and_never_falls_back_to_plain_http(registry, tmp_path):
    result = run_cli("ls", "--store", f"oci://{registry.host}/models", env=environment_without_credentials(tmp_path))
    assert_clean_error(result, 3, "TLS", f"oci+http://{registry.host}/models")


def test_an_unreachable_registry_is_exit_3(tmp_path, build):
    env = environment_without_credentials(tmp_path)
    for args in (
        ("ls",),
        ("publish", build, "--name", "digits", "--version", "1"),
        ("pull", "digits@1", "--sku", "rtx-3090", "--out", tmp_path / "x.plan"),
    ):
        result = run_cli(*args, "--store", "oci+http://127.0.0.1:9/models", env=env, timeout=60)
        assert_clean_error(result, 3, "cannot reach the registry 127.0.0.1:9")
    assert not (tmp_path / "x.plan").exists()


@pytest.mark.parametrize(
    "uri, fragment",
    [
        ("oci://user:hunter2@registry.example/models", "credentials do not go in the URI"),
        ("oci://registry.example", "repository part ''"),
        ("oci://registry.example/Models", "repository part 'Models'"),
        ("oci://registry.example/a/../b", "repository part '..'"),
        ("oci://registry.example/models?x=1", "repository part"),
        ("oci://registry.example:99999/models", "not a registry host"),
        ("oci://-bad-/models", "not a registry host"),
    ],
)
def test_store_uris_are_checked_before_any_request(uri, fragment, tmp_path):
    result = run_cli("ls", "--store", uri, env=environment_without_credentials(tmp_path), timeout=60)
    assert "hunter2" not in assert_clean_error(result, 2, fragment)


def test_a_tag_that_is_not_a_release_is_refused_naming_it(registry, build, tmp_path):
    uri = registry.uri()
    publish(build, uri, "digits", "1.0.0")
    store = OciStore(uri)
    store._push(
        store._repo("digits"),
        "4.0.0",
        b"{}",
        "application/vnd.oci.image.config.v1+json",
        "application/vnd.example.other",
        [],
        {},
    )
    result = run_cli(
        "pull",
        "digits@4.0.0",
        "--sku",
        "rtx-3090",
        "--out",
        tmp_path / "x.plan",
        "--store",
        uri,
        env=environment_without_credentials(tmp_path),
    )
    assert_clean_error(result, 1, "digits:4.0.0", "not ours", "artifactType")


def test_credentials_come_from_the_docker_config_and_its_helpers(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPILE_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert find_credentials("registry.example") is None
    auth = base64.b64encode(b"ci:s3cret").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"https://registry.example": {"auth": auth}}}))
    assert find_credentials("registry.example") == ("ci", "s3cret")
    assert find_credentials("other.example") is None
    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text(
        '#!/bin/sh\nread host\n[ "$host" = helped.example ] || exit 1\n'
        'echo \'{"Username": "bot", "Secret": "t0ken"}\'\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {"helped.example": "fake"}}))
    assert find_credentials("helped.example") == ("bot", "t0ken")
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "missing-helper"}))
    with pytest.raises(EnvironmentProblem, match="docker-credential-missing-helper"):
        find_credentials("registry.example")
    for malformed in (
        {"auths": ["x"]},
        {"credHelpers": ["fake"]},
        {"auths": {"[": {"auth": 1}}},
        {"auths": {"registry.example": {"auth": 12}}},
        {"credsStore": 3},
    ):
        (tmp_path / "config.json").write_text(json.dumps(malformed))  # a config of someone else's tool: no crash
        try:
            assert find_credentials("registry.example") is None
        except EnvironmentProblem as exc:  # a malformed entry for this very registry is said plainly
            assert "registry.example" in str(exc)


def test_a_blob_is_verified_by_the_registry_too(registry):
    """The registry refuses an upload whose bytes do not hash to the digest it is named by (a second check
    behind the VerifyingReader's)."""
    from compiler.core.errors import CheckFailed

    store = OciStore(registry.uri())
    with pytest.raises(CheckFailed, match="does not hash to its digest"):
        store._upload(store._repo("digits"), hashlib.sha256(b"other").hexdigest(), b"bytes", 5)
    assert store.blob_size("digits", hashlib.sha256(b"other").hexdigest()) is None


def test_a_transient_refusal_of_a_manifest_is_sent_again(registry, build, monkeypatch):
    """Distribution's filesystem driver answers 400 DIGEST_INVALID (or 500) to a fine manifest whose blob link a
    concurrent push is rewriting; the publish sends it again (fault injection: the first answers are replaced)."""
    store = OciStore(registry.uri())
    real_request, refusals, refuse_first = store.session.request, [], [2]

    def flaky(method, url, **kwargs):
        if method == "PUT" and "/manifests/" in url and len(refusals) < refuse_first[0]:
            refusals.append(url)
            response = requests.Response()
            response.status_code, response.url = (400, 500)[len(refusals) % 2], url
            response._content = b'{"errors": [{"code": "DIGEST_INVALID", "message": "provided digest did not match"}]}'
            return response
        return real_request(method, url, **kwargs)

    monkeypatch.setattr(store.session, "request", flaky)
    monkeypatch.setattr(store, "settle_seconds", 0)
    assert publish(build, store, name="digits", version="9.0.1").status == "published"
    assert len(refusals) == 2
    assert json.loads(store.read_manifest("digits", "9.0.1"))["content"]["version"] == "9.0.1"
    refusals.clear()
    signature = b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'
    assert store.attach("digits", "9.0.1", "signature", signature) is None  # its artifact and fallback index
    assert len(refusals) == 2 and store.attachment("digits", "9.0.1", "signature") == signature
    refusals.clear()
    refuse_first[0] = 100
    with pytest.raises(EnvironmentProblem, match=r"refused tag .*DIGEST_INVALID"):  # a lasting refusal is said
        publish(build, store, name="digits", version="9.0.2")
    assert len(refusals) == 4
    assert store.read_manifest("digits", "9.0.2") is None


def test_racing_attachers_of_one_signature_all_succeed(registry, build):
    """Eight publishers attaching the same signature at once re-upload its blobs while the others PUT the
    artifact manifest naming them: Distribution then answers DIGEST_INVALID now and then (about 1 PUT in 20
    here), which is sent again. Every attacher ends with the one signature attached."""
    uri = registry.uri()
    signature = b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'
    for round_ in range(10):
        version = f"4.0.{round_}"
        publish(build, uri, "digits", version)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda v: OciStore(uri).attach("digits", v, "signature", signature), [version] * 8))
        assert set(answers) <= {None, signature}, answers
        assert OciStore(uri).attachment("digits", version, "signature") == signature
