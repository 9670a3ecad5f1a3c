"""compile gc removes a version whole: its signature, provenance and yank mark go with its manifest, on the folder
store, SeaweedFS and the registry (where they are referrer artifacts and the fallback tag's index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.stores import open_store
from compiler.stores.base import ATTACHMENTS
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _leftovers(store, version: str) -> list[str]:
    """What of ``version`` beside its manifest is still in the store: on a registry its yank tag, the fallback
    tag of its image manifest and the artifacts that tag's index listed (found before gc), read behind gc."""
    opened = open_store(store.uri)
    if store.kind != "oci":
        found = [kind for kind in ATTACHMENTS if opened.attachment("digits", version, kind) is not None]
        return found + (["yank"] if opened.read_yank("digits", version) is not None else [])
    repo = opened._repo("digits")
    subject, referrers = REFERRERS[store.uri, version]
    tags = opened._paged(f"/v2/{repo}/tags/list?n=1000", "tags", "tags", opened._scope(repo))
    return [t for t in tags if t in (f"_yanked.{version}", subject.replace(":", "-"))] + [
        d for d in referrers if opened._manifest(repo, d) is not None
    ]


REFERRERS: dict[tuple[str, str], tuple[str, list[str]]] = {}


def _remember_referrers(store, version: str) -> None:
    if store.kind == "oci":
        opened = open_store(store.uri)
        repo = opened._repo("digits")
        subject = opened._subject(repo, version)
        REFERRERS[store.uri, version] = subject, [e["digest"] for e in opened._index(repo, subject)]


def test_gc_removes_the_signature_provenance_and_yank_mark_of_what_it_removes(store, builds, keys):
    for version in ("1.0.0", "1.0.1", "1.0.2"):
        published = store.cli(
            "publish", builds["a"], "--name", "digits", "--version", version, "--sign-key", keys["p256"], "--json"
        )
        assert published.exit_code == 0, published.stderr
    assert store.cli("yank", "digits@1.0.0", "--reason", "wrong data").exit_code == 0
    for version in ("1.0.0", "1.0.1"):
        _remember_referrers(store, version)
    there = sorted(_leftovers(store, "1.0.0"))
    # the yank tag, the fallback tag, four artifacts (the fp16 export rtx folder's model signature among them)
    assert len(there) == (6 if store.kind == "oci" else 5)
    expected = ["model-signature", "model-signature-rtx-fp16", "provenance", "signature", "yank"]
    assert "_yanked.1.0.0" in there if store.kind == "oci" else there == expected

    done = store.cli("gc", "--keep", "1", "--grace-minutes", "0", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["removed_versions"] == 2
    for version in ("1.0.0", "1.0.1"):
        assert store.manifest("digits", version) is None
        assert _leftovers(store, version) == []
    kept = store.cli("verify", "digits@1.0.2", "--key", keys["p256.pub"], "--json")  # what stays is whole
    assert kept.exit_code == 0, kept.stderr
