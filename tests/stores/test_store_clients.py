"""Releases in a registry as clients nobody here wrote consume them (issue 42): Debian's ``skopeo`` mirrors one
registry-to-registry, the registry's own ``docker-registry garbage-collect`` sweeps it, and the ``oras`` Python SDK
pulls it; afterwards every byte the release names, golden inputs included, is there and verifies."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from compiler.stores.oci import GOLDEN, MANIFEST, TITLE
from compiler.stores.referrers import BUNDLE_CONTENT, BUNDLE_PREDICATE, CREATED, IMAGE_INDEX
from tests.support.cli import run_cli
from tests.support.digits import TINY_DATA, TINY_MODEL, TINY_PROFILES
from tests.support.keys import write_keys
from tests.support.registry import Registry, registry_server, start_registry

"""The tiny model of the old-release fixture (~10 KB plans): its model, data and profiles."""


@pytest.fixture(scope="module")
def checked_build(built_digits) -> Path:
    """rtx-3090 and rtx-4090 fp32 engines of a tiny model, checked with --data (golden.npz)."""
    return built_digits(("rtx-3090", "rtx-4090"), ("fp32",), data=TINY_DATA, model=TINY_MODEL, profiles=TINY_PROFILES)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _publish(store: str, build: Path, version: str, key: Path) -> None:
    result = run_cli("publish", build, "--store", store, "--name", "digits", "--version", version, "--sign-key", key)
    assert result.exit_code == 0, result.stderr


def _pulls_verified(store: str, version: str, build: Path, public: Path, out: Path) -> None:
    """``compile verify`` (every blob, golden.npz included) and ``pull --golden --verify-key`` succeed, and the
    golden inputs pulled are the build's bytes."""
    verified = run_cli("verify", f"digits@{version}", "--store", store, "--key", public, "--json")
    assert verified.exit_code == 0, verified.stderr
    assert json.loads(verified.stdout)["blobs"] == 6  # 2 plans, 2 layers.json, check.json, golden.npz
    out.mkdir(parents=True)
    pulled = run_cli("pull", f"digits@{version}", "--store", store, "--sku", "rtx-4090", "--out", out / "e.plan",
                     "--golden", "--verify-key", public, "--allow-yanked")  # fmt: skip
    assert pulled.exit_code == 0, pulled.stderr
    assert (out / "golden.npz").read_bytes() == (build / "golden.npz").read_bytes()


def _skopeo(*args: str, preserve_digests: bool = True) -> None:
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is not installed (apt-get install skopeo; .ci/run installs it)")
    copied = subprocess.run(
        ["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false", *args]
        + (["--preserve-digests"] if preserve_digests else []),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert copied.returncode == 0, copied.stderr


def _image(registry: Registry, repository: str, reference: str) -> tuple[dict, str]:
    response = requests.get(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}", headers={"Accept": MANIFEST}, timeout=10
    )
    response.raise_for_status()
    return response.json(), response.headers["Docker-Content-Digest"]


def test_a_skopeo_mirror_carries_the_golden_inputs_and_pulls_verified(registry, checked_build, keys, tmp_path):
    """A tag copy is the image manifest and its layers; with the attachments' fallback index copied too, the
    mirror verifies with the publisher's key. Before issue 42 the golden blob was no layer: the mirror lacked it."""
    source = registry.uri()
    _publish(source, checked_build, "1.0.0", keys["ed25519"])
    repository = source.split("/", 3)[3] + "/digits"
    _, digest = _image(registry, repository, "1.0.0")
    with registry_server() as mirror:
        target = f"{mirror.host}/mirror/digits"
        _skopeo(f"docker://{registry.host}/{repository}:1.0.0", f"docker://{target}:1.0.0")
        fallback = digest.replace(":", "-")
        _skopeo(  # skopeo 1.9 rewrites an index (it cannot keep its digest) and drops what it does not know
            "--all",
            f"docker://{registry.host}/{repository}:{fallback}",
            f"docker://{target}:{fallback}",
            preserve_digests=False,
        )
        manifest, _ = _image(mirror, "mirror/digits", "1.0.0")
        assert [layer["annotations"][TITLE] for layer in manifest["layers"] if layer["mediaType"] == GOLDEN] == [
            "golden.npz"
        ]
        _pulls_verified(
            f"oci+http://{mirror.host}/mirror", "1.0.0", checked_build, keys["ed25519.pub"], tmp_path / "pulled"
        )
        listed = run_cli("ls", "--verify", "--store", f"oci+http://{mirror.host}/mirror")
        assert listed.exit_code == 0 and "nothing damaged, dangling" in listed.stdout, listed.stdout + listed.stderr


def _garbage_collect(registry: Registry, *options: str) -> str:
    """The registry's own mark-and-sweep, run while it is stopped (Distribution requires that, or read-only mode)."""
    registry.stop()
    swept = subprocess.run(
        ["docker-registry", "garbage-collect", *options, str(registry.root / "config.yml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stderr
    return swept.stdout


@pytest.mark.parametrize("options", [(), ("--delete-untagged",)], ids=["default", "delete-untagged"])
def test_the_registrys_garbage_collection_keeps_every_byte_of_every_release(checked_build, keys, tmp_path, options):
    """Two signed releases, a channel, a yank, and a blob an interrupted publish left: after garbage-collect the
    leftover is gone (it ran) and every release pulls verified, golden inputs, signature and provenance included
    (``--delete-untagged`` removes every manifest no tag names: each attachment has a tag of its own)."""
    with registry_server() as registry:
        store = registry.uri("ml")
        for version in ("1.0.0", "1.0.1"):
            _publish(store, checked_build, version, keys["ed25519"])
        assert run_cli("promote", "digits@1.0.1", "--channel", "stable", "--store", store).exit_code == 0
        assert run_cli("yank", "digits@1.0.0", "--reason", "superseded", "--store", store).exit_code == 0
        leftover = b"an interrupted publish's blob"
        sha = hashlib.sha256(leftover).hexdigest()
        started = requests.post(f"http://{registry.host}/v2/ml/digits/blobs/uploads/", timeout=10)
        location = started.headers["Location"]
        requests.put(f"{location}&digest=sha256:{sha}", data=leftover, timeout=10).raise_for_status()
        assert registry.blob_file(sha).exists()
        port = int(registry.host.rsplit(":", 1)[1])
        swept = _garbage_collect(registry, *options)
        assert not registry.blob_file(sha).exists(), swept
        registry.process = start_registry(registry.root, port).process
        for version in ("1.0.0", "1.0.1"):
            _pulls_verified(store, version, checked_build, keys["ed25519.pub"], tmp_path / version)
        listed = run_cli("ls", "--verify", "--store", store)
        assert listed.exit_code == 0 and "nothing damaged, dangling" in listed.stdout, listed.stdout + listed.stderr


def test_oras_pulls_every_file_of_a_release_by_its_title(registry, checked_build, keys, tmp_path):
    """The oras SDK writes each layer to the file its title names: every file of the release, none as a
    ``sha256:`` name, identical layers.json files under their engines' names; one SKU's plan is one blob fetch."""
    import oras.client

    store = registry.uri()
    _publish(store, checked_build, "1.0.0", keys["ed25519"])
    target = f"{registry.host}/{store.split('/', 3)[3]}/digits:1.0.0"
    client = oras.client.OrasClient(hostname=registry.host, insecure=True)
    files = sorted(Path(f).name for f in client.pull(target=target, outdir=str(tmp_path / "all")))
    assert files == [
        "check.json",
        "golden.npz",
        "rtx-3090-fp32.layers.json",
        "rtx-3090-fp32.plan",
        "rtx-4090-fp32.layers.json",
        "rtx-4090-fp32.plan",
    ]
    for sku in ("rtx-3090", "rtx-4090"):
        folder = checked_build / sku / "fp32"
        assert (tmp_path / "all" / f"{sku}-fp32.plan").read_bytes() == (folder / "engine.plan").read_bytes()
        assert (tmp_path / "all" / f"{sku}-fp32.layers.json").read_bytes() == (folder / "layers.json").read_bytes()
    assert (tmp_path / "all" / "golden.npz").read_bytes() == (checked_build / "golden.npz").read_bytes()
    manifest = client.get_manifest(target)
    plan = next(layer for layer in manifest["layers"] if layer["annotations"][TITLE] == "rtx-4090-fp32.plan")
    client.download_blob(client.get_container(target), plan["digest"], str(tmp_path / "rtx-4090-fp32.plan"))
    engine = checked_build / "rtx-4090" / "fp32" / "engine.plan"
    assert (tmp_path / "rtx-4090-fp32.plan").read_bytes() == engine.read_bytes()


def test_attachments_carry_cosigns_bundle_annotations_in_their_manifest_and_the_fallback_index(
    registry, checked_build, keys
):
    from compiler.releases.attest import RELEASE_SIGNATURE
    from compiler.releases.provenance import SLSA_PROVENANCE

    store = registry.uri()
    _publish(store, checked_build, "1.0.0", keys["ed25519"])
    repository = store.split("/", 3)[3] + "/digits"
    _, digest = _image(registry, repository, "1.0.0")
    index = requests.get(
        f"http://{registry.host}/v2/{repository}/manifests/{digest.replace(':', '-')}",
        headers={"Accept": IMAGE_INDEX},
        timeout=10,
    ).json()
    listed = {entry["annotations"][BUNDLE_PREDICATE]: entry for entry in index["manifests"]}
    assert sorted(listed) == sorted([RELEASE_SIGNATURE, SLSA_PROVENANCE])
    for predicate, entry in listed.items():
        manifest, _ = _image(registry, repository, entry["digest"])
        annotations = manifest["annotations"]
        assert annotations[BUNDLE_CONTENT] == "dsse-envelope" and annotations[BUNDLE_PREDICATE] == predicate
        assert annotations[CREATED].endswith("Z") and entry["annotations"] == annotations


def test_readers_open_the_attachment_manifests_not_the_listing(registry, checked_build, keys, tmp_path):
    """Another tool rewrote the fallback index without annotations or artifact types, and listed first an entry
    annotated as a signature that refers to something else: verify still finds the real signature and
    provenance by opening each manifest (kind and subject are read there)."""
    store = registry.uri()
    _publish(store, checked_build, "1.0.0", keys["ed25519"])
    repository = store.split("/", 3)[3] + "/digits"
    _, digest = _image(registry, repository, "1.0.0")
    url = f"http://{registry.host}/v2/{repository}/manifests/{digest.replace(':', '-')}"
    index = requests.get(url, headers={"Accept": IMAGE_INDEX}, timeout=10).json()
    stripped = [{k: v for k, v in e.items() if k in ("mediaType", "digest", "size")} for e in index["manifests"]]
    _, other = _image(registry, repository, "1.0.0")  # a manifest that refers to no subject
    planted = {
        "mediaType": MANIFEST,
        "digest": other,
        "size": 1,
        "annotations": {"io.github.trt-compile.attachment": "signature", "vnd.trt-compile.attachment": "signature"},
    }
    index["manifests"] = [planted, *stripped]
    requests.put(url, data=json.dumps(index), headers={"Content-Type": IMAGE_INDEX}, timeout=10).raise_for_status()
    verified = run_cli("verify", "digits@1.0.0", "--store", store, "--key", keys["ed25519.pub"])
    assert verified.exit_code == 0, verified.stderr
