"""Issue 31: releases a consumer can trust without trusting the store, on a local folder, S3 (SeaweedFS) and an
OCI registry (CNCF Distribution, which has no referrers API: the sha256-<digest> tag fallback is used).

Signed publish; verify with the right key (0), another key (1), an unsigned release (1); a pull or export with
--verify-key refuses an unsigned release and writes nothing; a manifest edited in the store fails verification;
provenance subjects equal the pulled plans' sha256 and name the source model; two pulls into one folder keep two
records; one release from two build folders.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from compiler.core.files import hash_json
from compiler.stores import open_store
from tests.stores.test_store import StoreUnderTest
from tests.support.cli import assert_clean_error, run_cli
from tests.support.keys import write_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    return write_keys(tmp_path_factory.mktemp("keys"))


def _publish(store: StoreUnderTest, folders: list[Path], version: str, *extra: str | Path) -> dict:
    result = store.cli("publish", *folders, "--name", "digits", "--version", version, "--json", *extra)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _edit_manifest(store: StoreUnderTest, version: str, data: bytes) -> None:
    """Rewrite a version's manifest behind the store's back, as whoever can write to the bucket or registry can."""
    if store.kind == "local":
        path = Path(store.uri) / "releases" / "digits" / version / "manifest.json"
        path.chmod(0o644)
        path.write_bytes(data)
    elif store.kind == "s3":
        bucket, prefix = store.uri.removeprefix("s3://").split("/", 1)
        import boto3

        env = store.env
        boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        ).put_object(Bucket=bucket, Key=f"{prefix}/releases/digits/{version}/manifest.json", Body=data)
    else:  # a push of another manifest to the version's tag, as `oras push` would
        from compiler.stores.oci import RELEASE_ARTIFACT, RELEASE_CONFIG, _release_layers

        oci = open_store(store.uri)
        oci._push(oci._repo("digits"), version, data, RELEASE_CONFIG, RELEASE_ARTIFACT, *_release_layers(data))


def test_signed_release_of_two_build_folders_verifies_with_its_key_only(store, builds, keys, tmp_path):
    published = _publish(store, [builds["a"], builds["b"]], "1.0.0", "--sign-key", keys["ed25519"])
    assert (published["engines"], published["signature"], published["provenance"]) == (3, "written", "written")

    verified = store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"], "--json")
    assert verified.exit_code == 0, verified.stderr
    result = json.loads(verified.stdout)
    assert (result["verified"], result["subjects"], result["provenance_signed"]) == (True, 3, True)
    assert result["blobs"] >= 3

    assert_clean_error(store.cli("verify", "digits@1.0.0", "--key", keys["p256.pub"]), 1, "bad signature")

    _publish(store, [builds["a"]], "2.0.0")
    assert_clean_error(store.cli("verify", "digits@2.0.0", "--key", keys["ed25519.pub"]), 1, "unsigned")

    again = _publish(store, [builds["a"], builds["b"]], "1.0.0", "--sign-key", keys["p256"])
    assert (again["status"], again["signature"]) == ("unchanged", "already there")  # the first signature stays
    assert store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"]).exit_code == 0

    repo = tmp_path / "triton"
    repo.mkdir()
    for key, code, fragment in ((keys["p256.pub"], 1, "bad signature"), (keys["ed25519.pub"], 2, "TensorRT-RTX")):
        # the signature is checked first; past it, Triton's own rule refuses TensorRT-RTX plans (docs/triton.md)
        exported = store.cli(
            "export",
            "triton",
            "digits@1.0.0",
            "--repo",
            repo,
            "--precision",
            "fp16",
            "--triton-release",
            "25.01",
            "--verify-key",
            key,
        )
        assert_clean_error(exported, code, fragment)
        assert list(repo.iterdir()) == []

    promoted = store.cli("promote", "digits@1.0.0", "--channel", "stable", "--sign-key", keys["ed25519"])
    assert promoted.exit_code == 0, promoted.stderr
    by_channel = store.cli("verify", "digits@stable", "--key", keys["ed25519.pub"], "--json")
    assert json.loads(by_channel.stdout)["channel"] == "stable", by_channel.stderr


def test_provenance_names_the_pulled_plans_and_the_source_model(store, builds, keys, tmp_path):
    _publish(store, [builds["a"]], "1.0.0", "--sign-key", keys["p256"])
    shown = store.cli("provenance", "digits@1.0.0", "--json")
    assert shown.exit_code == 0, shown.stderr
    statement = json.loads(shown.stdout)
    assert (statement["_type"], statement["predicateType"]) == (
        "https://in-toto.io/Statement/v1",
        "https://slsa.dev/provenance/v1",
    )
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"] if s["name"].endswith("/engine.plan")}
    image = [s["digest"]["sha256"] for s in statement["subject"] if not s["name"].endswith("/engine.plan")]
    # on OCI the image manifest too (what cosign's checks look for); elsewhere the plans alone
    assert image == ([open_store(store.uri).artifact("digits", "1.0.0")[1]] if store.kind == "oci" else [])

    out = tmp_path / "engines"
    out.mkdir()
    pulled = {}
    for sku in ("rtx-3090", "rtx-4090"):
        result = store.cli(
            "pull",
            "digits@1.0.0",
            "--sku",
            sku,
            "--out",
            out / f"{sku}.plan",
            "--verify-key",
            keys["p256.pub"],
            "--json",
        )
        assert result.exit_code == 0, result.stderr
        pulled[f"{sku}/fp16/engine.plan"] = hashlib.sha256((out / f"{sku}.plan").read_bytes()).hexdigest()
    assert subjects == pulled

    build = json.loads((builds["a"] / "build.json").read_text())
    dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    source = [d for d in dependencies if d.get("annotations", {}).get("role") == "source model"]
    assert [d["digest"]["sha256"] for d in source] == [build["model_sha256"]]
    assert any(d.get("uri", "").startswith("pkg:pypi/tensorrt-rtx@") for d in dependencies)
    assert statement["predicate"]["runDetails"]["builder"]["id"]

    records = sorted(p.name for p in out.glob("*.json"))  # two pulls into one folder keep two records
    assert records == ["rtx-3090.plan.json", "rtx-4090.plan.json"]
    assert [json.loads((out / r).read_text())["sku"] for r in records] == ["rtx-3090", "rtx-4090"]


def test_verified_pull_and_export_refuse_an_unsigned_release_and_write_nothing(store, builds, keys, tmp_path):
    _publish(store, [builds["a"]], "1.0.0")
    out = tmp_path / "out"
    out.mkdir()
    refused = store.cli(
        "pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out / "digits.plan", "--verify-key", keys["ed25519.pub"]
    )
    assert_clean_error(refused, 1, "unsigned")
    env = {**store.env, "COMPILE_VERIFY_KEY": str(keys["ed25519.pub"])}  # the variable asks for it too
    by_env = run_cli(
        "pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out / "digits.plan", "--store", store.uri, env=env
    )
    assert_clean_error(by_env, 1, "unsigned")
    exported = store.cli(
        "export",
        "triton",
        "digits@1.0.0",
        "--repo",
        out,
        "--triton-release",
        "25.01",
        "--verify-key",
        keys["ed25519.pub"],
    )
    assert_clean_error(exported, 1, "unsigned")
    empty = run_cli(
        "pull",
        "digits@1.0.0",
        "--sku",
        "rtx-3090",
        "--out",
        out / "digits.plan",
        "--store",
        store.uri,
        env={**store.env, "COMPILE_VERIFY_KEY": ""},
    )  # a secret that did not arrive: fail closed
    assert_clean_error(empty, 2, "$COMPILE_VERIFY_KEY is set but empty")
    assert list(out.iterdir()) == []


def test_a_manifest_edited_in_the_store_fails_verification(store, builds, keys, tmp_path):
    _publish(store, [builds["a"]], "1.0.0", "--sign-key", keys["ed25519"])
    manifest = json.loads(store.manifest("digits", "1.0.0"))
    engines = manifest["content"]["engines"]
    engines[0]["plan"], engines[1]["plan"] = engines[1]["plan"], engines[0]["plan"]  # plans swapped between GPUs
    manifest["content_sha256"] = hash_json(manifest["content"])  # and the manifest made consistent again
    _edit_manifest(store, "1.0.0", json.dumps(manifest, indent=2).encode())

    verdict = store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"])
    # folder and S3: the signature names other bytes; OCI: the tag now names a manifest nobody signed
    assert_clean_error(verdict, 1, "manifest mismatch" if store.kind != "oci" else "unsigned")
    out = tmp_path / "digits.plan"
    pulled = store.cli("pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out, "--verify-key", keys["ed25519.pub"])
    assert pulled.exit_code == 1, pulled.stderr
    assert not out.exists() and not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize("ref", ["digits", "digits@9.9.9", "../x@1", "digits@../1"])
def test_verify_and_provenance_of_a_release_that_is_not_there_are_bad_input(ref, keys, tmp_path):
    (tmp_path / "store").mkdir()
    for args in (("verify", ref, "--key", keys["ed25519.pub"]), ("provenance", ref)):
        assert_clean_error(run_cli(*args, "--store", tmp_path / "store"), 2)


def test_signature_and_signed_provenance_are_sigstore_bundles(builds, keys, tmp_path):
    """Both parse as Sigstore bundle v0.3 with sigstore-python's own models (sigstore-models), a DSSE envelope of
    an in-toto statement and a public-key hint: the form cosign reads."""
    from sigstore_models.bundle.v1 import Bundle

    store = str(tmp_path / "store")
    assert (
        run_cli(
            "publish",
            builds["a"],
            "--name",
            "digits",
            "--version",
            "1.0.0",
            "--store",
            store,
            "--sign-key",
            keys["p256"],
        ).exit_code
        == 0
    )
    for kind in ("signature", "provenance"):
        bundle = Bundle.model_validate_json(open_store(store).attachment("digits", "1.0.0", kind))
        assert bundle.media_type == "application/vnd.dev.sigstore.bundle.v0.3+json"
        assert bundle.dsse_envelope.payload_type == "application/vnd.in-toto+json"
        assert len(bundle.dsse_envelope.signatures) == 1 and bundle.verification_material.public_key.hint


@pytest.mark.parametrize("how", ["same-size", "longer"])
def test_a_plan_changed_in_the_store_fails_verification_naming_it(store, builds, keys, how):
    _publish(store, [builds["a"]], "1.0.0", "--sign-key", keys["ed25519"])
    engine = json.loads((builds["a"] / "rtx-4090" / "fp16" / "engine.json").read_text())
    original = (builds["a"] / "rtx-4090" / "fp16" / "engine.plan").read_bytes()
    store.tamper(engine["sha256"], bytes(len(original)) if how == "same-size" else original + b"\0")
    verdict = store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"])
    assert_clean_error(verdict, 1, engine["sha256"])
    assert "blob mismatch" in verdict.stderr


@pytest.mark.parametrize("planted", [b"\x00\xff{not json", b"{" * (5 << 20)])
def test_a_signature_planted_in_a_registry_is_refused(registry, builds, keys, tmp_path, planted):
    """Whoever can push to the registry can attach an artifact of their own to a release: garbage, or one past
    the size any bundle has, fails verification (exit 1) and a verified pull writes nothing."""
    from tests.support.registry import environment_without_credentials

    store = StoreUnderTest("oci", registry.uri(), environment_without_credentials(tmp_path), lambda *_: None)
    _publish(store, [builds["a"]], "1.0.0")
    assert open_store(store.uri).attach("digits", "1.0.0", "signature", planted) is None
    assert_clean_error(store.cli("verify", "digits@1.0.0", "--key", keys["ed25519.pub"]), 1, "signature")
    out = tmp_path / "out"
    out.mkdir()
    pulled = store.cli(
        "pull", "digits@1.0.0", "--sku", "rtx-4090", "--out", out / "x.plan", "--verify-key", keys["ed25519.pub"]
    )
    assert_clean_error(pulled, 1, "signature")
    assert list(out.iterdir()) == []
