"""Hostile OCI layouts (issue 42), through the real CLI against a real registry, held to the contract of
tests/hostile (harness.py) plus the family's own clauses:

- ``registry-layouts``: what anyone who can push to the repository may leave there: the version's tag re-pointed at
  an image manifest of another, legacy or missing ``artifactType``, without its golden layer, or whose config is
  another record; the fallback index (``sha256-<digest>``) replaced by nested JSON, entries that are not
  descriptors, entries annotated as a signature that refer to something else (the image manifest itself, a
  channel, a missing digest), hundreds of entries, the index itself, or a stripped copy of the real one;
  an attachment's layer swapped for the golden blob. ``verify --key``, ``pull --verify-key --golden`` and
  ``ls --verify`` answer 0 (the layout is still the release: legacy names, stripped listings) or 1 (damage,
  unsigned), or 3, bounded; nothing is written to --out unless the pull succeeds, and then the plan and golden
  inputs are the build's bytes. The registry is put back as it was after every case.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from hypothesis import strategies as st

from tests.hostile.harness import Case, Expect, Sandbox, run_cases
from tests.hostile.store_support import NAME, SKU, VERSION, verified_pull
from tests.support.cli import CliResult, run_cli
from tests.support.digits import TINY_DATA, TINY_MODEL, TINY_PROFILES
from tests.support.keys import write_keys
from tests.support.registry import environment_without_credentials

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class LayoutCase:
    target: str
    harm: str
    command: str


IMAGE_HARMS = ("legacy-type", "foreign-type", "no-type", "no-golden-layer", "no-layers", "config-is-channel")
INDEX_HARMS = (
    "nested",
    "not-descriptors",
    "points-at-image",
    "points-at-channel",
    "points-nowhere",
    "hundreds",
    "points-at-itself",
    "stripped",
    "foreign-types",
)
COMMANDS = ("verify", "pull", "ls-verify")


@dataclass
class Release:
    registry: object
    repository: str
    uri: str
    build: Path
    public: Path
    saved: dict[str, tuple[bytes, str]]
    """Tag -> (manifest bytes, media type) as published: what every case is put back to."""

    def url(self, reference: str) -> str:
        return f"http://{self.registry.host}/v2/{self.repository}/manifests/{reference}"

    def put(self, reference: str, body: bytes, media: str = MANIFEST) -> bool:
        """Push a manifest; False when Distribution refuses it as invalid (the case then runs on what is there:
        tests/support/hostile_registry.py serves what a registry would not store)."""
        response = requests.put(self.url(reference), data=body, headers={"Content-Type": media}, timeout=10)
        if response.status_code == 400:
            return False
        response.raise_for_status()
        return True

    def restore(self) -> None:
        for tag, (body, media) in self.saved.items():
            assert self.put(tag, body, media)


@pytest.fixture(scope="module")
def oci_release(registry, tmp_path_factory, built_digits) -> Release:
    """digits@1.0.0 of the tiny fixture model, checked with --data, signed, promoted, in a repository of its own."""
    root = tmp_path_factory.mktemp("hostile-oci-layout")
    build = built_digits((SKU,), ("fp32",), data=TINY_DATA, model=TINY_MODEL, profiles=TINY_PROFILES)
    keys = write_keys(root)
    uri = registry.uri()
    env = environment_without_credentials(root)
    published = run_cli("publish", build, "--name", NAME, "--version", VERSION, "--store", uri, "--sign-key",
                        keys["ed25519"], env=env)  # fmt: skip
    assert published.exit_code == 0, published.stderr
    assert run_cli("promote", f"{NAME}@{VERSION}", "--channel", "stable", "--store", uri, env=env).exit_code == 0
    repository = uri.split("/", 3)[3] + "/" + NAME
    release = Release(registry, repository, uri, build, keys["ed25519.pub"], {})
    image = requests.get(release.url(VERSION), headers={"Accept": MANIFEST}, timeout=10)
    fallback = image.headers["Docker-Content-Digest"].replace(":", "-")
    index = requests.get(release.url(fallback), headers={"Accept": INDEX}, timeout=10)
    release.saved = {VERSION: (image.content, MANIFEST), fallback: (index.content, INDEX)}
    return release


def _image_harm(release: Release, harm: str) -> None:
    manifest = json.loads(release.saved[VERSION][0])
    if harm == "legacy-type":
        manifest["artifactType"] = manifest["artifactType"].replace("vnd.io.github.trt-compile.", "vnd.trt-compile.")
    elif harm == "foreign-type":
        manifest["artifactType"] = "application/vnd.cncf.helm.config.v1+json"
    elif harm == "no-type":
        del manifest["artifactType"]
    elif harm == "no-golden-layer":
        manifest["layers"] = [layer for layer in manifest["layers"] if "golden" not in layer["mediaType"]]
    elif harm == "no-layers":
        manifest["layers"] = []
    elif harm == "config-is-channel":
        channel = requests.get(release.url("_channel.stable"), headers={"Accept": MANIFEST}, timeout=10).json()
        manifest["config"] = channel["config"]
    release.put(VERSION, json.dumps(manifest).encode())


def _index_harm(release: Release, harm: str) -> None:
    fallback = next(tag for tag in release.saved if tag.startswith("sha256-"))
    index = json.loads(release.saved[fallback][0])
    real = index["manifests"]
    image = "sha256:" + hashlib.sha256(release.saved[VERSION][0]).hexdigest()
    channel = requests.head(release.url("_channel.stable"), headers={"Accept": MANIFEST}, timeout=10)

    def planted(digest: str) -> dict:
        kinds = ("io.github.trt-compile.attachment", "vnd.trt-compile.attachment")
        return {"mediaType": MANIFEST, "digest": digest, "size": 1, "annotations": dict.fromkeys(kinds, "signature")}

    if harm == "nested":
        body = b'{"manifests": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        release.put(fallback, body, INDEX)
        return
    entries = {
        "not-descriptors": [1, "x", None, [], {"digest": 7}, {"digest": "sha256:" + "z" * 64}, *real],
        "points-at-image": [planted(image), *real],
        "points-at-channel": [planted(channel.headers["Docker-Content-Digest"]), *real],
        "points-nowhere": [planted("sha256:" + "0" * 64), *real],
        "hundreds": [planted("sha256:" + f"{i:064x}") for i in range(300)] + real,
        "stripped": [{"mediaType": MANIFEST, "digest": e["digest"], "size": e["size"]} for e in real],
        "foreign-types": [{**e, "artifactType": "application/spdx+json"} for e in real],
    }.get(harm)
    if harm == "points-at-itself":
        entries = [planted("sha256:" + hashlib.sha256(release.saved[fallback][0]).hexdigest()), *real]
    release.put(fallback, json.dumps({**index, "manifests": entries}).encode(), INDEX)


def test_registry_layouts(request, hostile_base, oci_release):
    release = oci_release
    plan = (release.build / SKU / "fp32" / "engine.plan").read_bytes()
    golden = (release.build / "golden.npz").read_bytes()

    def setup(recipe: LayoutCase, box: Sandbox) -> Case:
        release.restore()
        (_image_harm if recipe.target == "image" else _index_harm)(release, recipe.harm)
        box.out.mkdir(exist_ok=True)
        out = box.out / "digits.plan"
        args = {
            "verify": ["verify", f"{NAME}@{VERSION}", "--key", release.public],
            "pull": verified_pull(out, release.public, "--golden", "--no-cache"),
            "ls-verify": ["ls", NAME, "--verify"],
        }[recipe.command]

        def after(result: CliResult) -> list[str]:
            written = sorted(p.name for p in box.out.iterdir())
            if result.exit_code != 0 or recipe.command != "pull":
                return [f"files written to --out: {written}"] if written else []
            if out.read_bytes() != plan or (box.out / "golden.npz").read_bytes() != golden:
                return ["exit 0 but the plan or golden inputs pulled are not the build's"]
            return []

        return Case(
            [*args, "--store", release.uri],
            Expect(frozenset({0, 1, 3}), f"{recipe.target} {recipe.harm}, {recipe.command}"),
            False,
            reports_failures=recipe.command == "ls-verify",
            env={"DOCKER_CONFIG": str(box.home)},
            after=after,
        )

    must = [
        LayoutCase(target, harm, command)
        for target, harms in (("image", IMAGE_HARMS), ("index", INDEX_HARMS))
        for harm in harms
        for command in COMMANDS
    ]
    strategy = st.one_of(
        st.builds(LayoutCase, st.just("image"), st.sampled_from(IMAGE_HARMS), st.sampled_from(COMMANDS)),
        st.builds(LayoutCase, st.just("index"), st.sampled_from(INDEX_HARMS), st.sampled_from(COMMANDS)),
    )
    try:
        run_cases(request.node.name, "registry-layouts", strategy, setup, hostile_base, must)
    finally:
        release.restore()


def test_legacy_names_and_stripped_listings_are_still_the_release(oci_release, tmp_path):
    """The cases a hostile run must answer 0 for: what older publishers and other tools legitimately leave."""
    release = oci_release
    harms = [("image", "legacy-type")] + [("index", h) for h in ("stripped", "foreign-types", "points-at-image")]
    for target, harm in harms:
        release.restore()
        (_image_harm if target == "image" else _index_harm)(release, harm)
        if target == "image":  # a re-pointed tag is another subject: its attachments refer to the old one
            assert run_cli("pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", tmp_path / f"{harm}.plan",
                           "--store", release.uri).exit_code == 0  # fmt: skip
            continue
        verified = run_cli("verify", f"{NAME}@{VERSION}", "--key", release.public, "--store", release.uri)
        assert verified.exit_code == 0, (harm, verified.stderr)
    release.restore()
