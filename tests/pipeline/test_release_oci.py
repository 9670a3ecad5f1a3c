"""A sharded release on an OCI registry: --only-sku jobs stage concurrently, --finalize publishes one release, and
compile ls --store oci://HOST/PREFIX lists it through the registry's catalog."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

from compiler.stores import open_store
from tests.pipeline.test_release import _pipeline, _release
from tests.support.cli import assert_clean_error, run_cli
from tests.support.registry import environment_without_credentials


def test_sharded_staging_and_finalize_on_the_registry(registry, tmp_path):
    uri = registry.uri()
    env = environment_without_credentials(tmp_path)
    pipeline = _pipeline(tmp_path, store=uri)
    skus = ["rtx-4090", "rtx-3090", "rtx-5090"]
    early = run_cli("release", pipeline, "--work", tmp_path / "work", "--finalize", env=env)
    assert_clean_error(early, 1, "missing: rtx-3090, rtx-4090, rtx-5090")
    with ThreadPoolExecutor(3) as pool:
        jobs = list(pool.map(lambda sku: _release(pipeline, tmp_path / "work", "--only-sku", sku, env=env), skus))
    assert all(j.exit_code == 0 for j in jobs), [j.stderr for j in jobs]
    assert {json.loads(j.stdout)["published"]["status"] for j in jobs} == {"staged"}
    store = open_store(uri)
    assert store.read_manifest("digits", "1.0.0") is None and sorted(store.staged("digits", "1.0.0")) == sorted(skus)
    retried = json.loads(_release(pipeline, tmp_path / "work", "--only-sku", "rtx-3090", env=env).stdout)
    assert "already staged" in retried["stages"][0]["detail"]
    final = _release(pipeline, tmp_path / "work", "--finalize", env=env)
    assert final.exit_code == 0, final.stderr
    manifest = json.loads(store.read_manifest("digits", "1.0.0"))
    assert len(manifest["content"]["engines"]) == 6
    assert store.versions("digits") == ["1.0.0"]  # staged parts are no versions
    for engine in manifest["content"]["engines"]:
        out = tmp_path / f"{engine['sku']}-{engine['precision']}.plan"
        pulled = run_cli(
            "pull",
            "digits@1.0.0",
            "--sku",
            engine["sku"],
            "--precision",
            engine["precision"],
            "--store",
            uri,
            "--out",
            out,
            env=env,
        )
        assert pulled.exit_code == 0, pulled.stderr
        assert hashlib.sha256(out.read_bytes()).hexdigest() == engine["plan"]["sha256"]
    listing = json.loads(run_cli("ls", "--store", uri, "--json", env=env).stdout)
    assert [(r["name"], r["versions"]) for r in listing["releases"]] == [("digits", ["1.0.0"])]


def test_a_registry_that_refuses_its_catalog_is_said_plainly(tmp_path):
    """A registry answering 403 to /v2/_catalog (as GHCR does for others' repositories): one line, exit 3."""
    from tests.support.json_server import json_server

    denied = {"errors": [{"code": "DENIED", "message": "catalog listing is not allowed"}]}
    with json_server(lambda path: (403, denied)) as url:
        store = url.replace("http://", "oci+http://") + "/team"
        result = run_cli("ls", "--store", store, env=environment_without_credentials(tmp_path))
    assert_clean_error(result, 3, "the registry refuses to list its catalog (403 DENIED)", "compile ls NAME")
