"""The artifact store, one suite for every backend: a local folder, S3 (a real SeaweedFS server) and an OCI
registry (a real CNCF Distribution).

publish, ls, pull by version and by channel, promote; idempotent and conflicting republishes; racing publishers
and promoters; a publisher killed mid-upload; a tampered blob; names refused before any request; an unreachable,
misconfigured or denied store.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compiler.stores import open_store
from tests.stores.conftest import SKUS, StoreUnderTest, _engine
from tests.support.cli import CliResult, assert_clean_error, run_cli


def _publish(store: StoreUnderTest, build: Path, version: str, *extra: str) -> CliResult:
    return store.cli("publish", build, "--name", "digits", "--version", version, "--json", *extra)


def test_publish_ls_pull_by_version_and_channel(store, builds, tmp_path):
    result = _publish(store, builds["a"], "1.0.0")
    assert result.exit_code == 0, result.stderr
    published = json.loads(result.stdout)
    assert (published["status"], published["engines"]) == ("published", 2)
    plans = {sku: _engine(builds["a"], sku) for sku in SKUS}
    assert published["uploaded_bytes"] >= sum(p.size_bytes for p in plans.values())

    listing = json.loads(store.cli("ls", "--json").stdout)
    assert [(r["name"], r["versions"]) for r in listing["releases"]] == [("digits", ["1.0.0"])]
    version = json.loads(store.cli("ls", "digits@1.0.0", "--json").stdout)["manifest"]["content"]
    assert {(e["sku"], e["plan"]["sha256"]) for e in version["engines"]} == {(s, p.sha256) for s, p in plans.items()}

    out = tmp_path / "pulled" / "digits.plan"
    out.parent.mkdir()
    pulled = store.cli("pull", "digits@1.0.0", "--sku", "rtx-3090", "--out", out, "--json")
    assert pulled.exit_code == 0, pulled.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == plans["rtx-3090"].sha256
    beside = json.loads((out.parent / "digits.plan.json").read_text())
    assert (beside["sku"], beside["release"], beside["compute_capabilities"]) == ("rtx-3090", "digits@1.0.0", ["8.6"])

    promoted = store.cli("promote", "digits@1.0.0", "--channel", "stable", "--json")
    assert json.loads(promoted.stdout)["status"] == "moved", promoted.stderr
    by_channel = store.cli("pull", "digits@stable", "--sku", "rtx-4090", "--out", out, "--no-cache", "--json")
    assert json.loads(by_channel.stdout)["channel"] == "stable", by_channel.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == plans["rtx-4090"].sha256
    assert json.loads(store.cli("ls", "digits", "--json").stdout)["channels"] == {"stable": "1.0.0"}


def test_a_sku_of_the_same_compute_capability_gets_that_plan_and_others_are_listed(store, builds, tmp_path):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    out = tmp_path / "a6000.plan"
    pulled = store.cli("pull", "digits@1.0.0", "--sku", "rtx-a6000", "--out", out, "--json")  # 8.6, like the 3090
    assert json.loads(pulled.stdout)["sku"] == "rtx-3090", pulled.stderr
    missing = store.cli("pull", "digits@1.0.0", "--sku", "rtx-5090", "--out", tmp_path / "none.plan")
    assert_clean_error(missing, 2, "no engine for compute capability 12.0", "rtx-3090 (8.6)", "rtx-4090 (8.9)")
    assert not (tmp_path / "none.plan").exists()
    unknown = store.cli("pull", "digits@9.9", "--sku", "rtx-3090", "--out", out)
    assert_clean_error(unknown, 2, "digits@9.9", "versions: 1.0.0")


def test_republishing_the_same_build_sends_nothing(store, builds):
    first = json.loads(_publish(store, builds["a"], "1.0.0").stdout)
    before = store.manifest("digits", "1.0.0")
    again = _publish(store, builds["a"], "1.0.0")
    assert again.exit_code == 0, again.stderr
    result = json.loads(again.stdout)
    assert (result["status"], result["uploaded_bytes"], result["uploaded_blobs"]) == ("unchanged", 0, 0)
    assert result["present_blobs"] == first["uploaded_blobs"] + first["present_blobs"] > 0  # issue 43: said 0
    assert store.manifest("digits", "1.0.0") == before
    other_version = json.loads(_publish(store, builds["a"], "1.0.1").stdout)
    assert (other_version["status"], other_version["uploaded_bytes"]) == ("published", 0)  # blobs deduplicated


def test_republishing_other_content_is_a_conflict_and_changes_nothing(store, builds):
    assert _publish(store, builds["a"], "1.0.0").exit_code == 0
    before = store.manifest("digits", "1.0.0")
    conflict = _publish(store, builds["b"], "1.0.0")
    assert_clean_error(conflict, 4, "digits@1.0.0 is already published", "other content")
    assert store.manifest("digits", "1.0.0") == before


def test_racing_publishers_of_one_version_leave_one_content(store, builds):
    racers = [builds["a"] if i % 2 else builds["b"] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda build: _publish(store, build, "2.0.0"), racers))
    content = json.loads(store.manifest("digits", "2.0.0"))["content"]
    winner = builds["a"] if len(content["engines"]) == 2 else builds["b"]
    if store.kind == "oci":  # no create-only tag write: see test_store_oci.py for what a registry guarantees
        for result in results:
            assert result.exit_code == 0 or "already published" in assert_clean_error(result, 4), result.stderr
        assert any(
            json.loads(r.stdout)["status"] == "published"
            for b, r in zip(racers, results, strict=True)
            if b == winner and r.exit_code == 0
        )
        _pull_all_verified(store, "digits@2.0.0", winner)
        return
    for build, result in zip(racers, results, strict=True):
        if build == winner:
            assert result.exit_code == 0, result.stderr
        else:
            assert_clean_error(result, 4, "already published")
    assert sum(json.loads(r.stdout)["status"] == "published" for r in results if r.exit_code == 0) == 1
    _pull_all_verified(store, "digits@2.0.0", winner)


def _pull_all_verified(store: StoreUnderTest, ref: str, build: Path) -> None:
    for sku in (p.name for p in build.iterdir() if p.is_dir()):
        for precision in (p.name for p in (build / sku).iterdir()):
            out = build.parent / f"check-{uuid.uuid4().hex}.plan"
            result = store.cli("pull", ref, "--sku", sku, "--precision", precision, "--out", out, "--no-cache")
            assert result.exit_code == 0, result.stderr
            assert hashlib.sha256(out.read_bytes()).hexdigest() == _engine(build, sku, precision).sha256
            out.unlink()


def test_racing_promotions_end_on_one_and_keep_every_move(store, builds):
    versions = [f"3.0.{i}" for i in range(8)]
    for version in versions:
        assert _publish(store, builds["a"], version).exit_code == 0
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda v: store.cli("promote", f"digits@{v}", "--channel", "stable", "--json"), versions)
        )
    assert all(r.exit_code == 0 for r in results), [r.stderr for r in results]
    channel = json.loads(open_store(store.uri).read_channel("digits", "stable")[0])
    assert sorted(move["version"] for move in channel["history"]) == versions
    assert channel["version"] == channel["history"][-1]["version"]
    previous = [json.loads(r.stdout)["previous"] for r in results]
    assert sorted(p for p in previous if p) == sorted(m["version"] for m in channel["history"][:-1])


def _big_build(builds: Path, root: Path, megabytes: int) -> Path:
    """A copy of build "a" whose rtx-3090 plan is its header then ``megabytes`` of random bytes, its engine.json
    saying so: a plan large enough to kill its publisher mid-upload (publish reads the header)."""
    big = root / "big"
    shutil.copytree(builds, big)
    plan = big / "rtx-3090" / "fp16" / "engine.plan"
    header = plan.read_bytes()[:64]
    plan.unlink()
    digest = hashlib.sha256()
    with open(plan, "wb") as handle:
        for index in range(megabytes):
            chunk = header + os.urandom((1 << 20) - 64) if index == 0 else os.urandom(1 << 20)
            digest.update(chunk)
            handle.write(chunk)
    record = _engine(big, "rtx-3090").model_copy(update={"sha256": digest.hexdigest(), "size_bytes": megabytes << 20})
    (big / "rtx-3090" / "fp16" / "engine.json").write_text(record.model_dump_json())
    return big


def test_a_publisher_killed_mid_upload_leaves_no_release_and_a_rerun_completes(store, builds, tmp_path):
    big = _big_build(builds["a"], tmp_path, 192)
    digest = _engine(big, "rtx-3090").sha256
    publisher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "compiler",
            "publish",
            str(big),
            "--name",
            "digits",
            "--version",
            "4.0.0",
            "--store",
            store.uri,
        ],
        env=store.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert _wait_for_upload_to_start(store, digest, publisher), "the upload never started"
    publisher.send_signal(signal.SIGKILL)
    publisher.wait(30)
    assert store.manifest("digits", "4.0.0") is None
    assert "4.0.0" not in open_store(store.uri).versions("digits")
    assert open_store(store.uri).blob_size("digits", digest) is None  # no half blob under the digest
    rerun = _publish(store, big, "4.0.0")
    assert rerun.exit_code == 0, rerun.stderr
    _pull_all_verified(store, "digits@4.0.0", big)


def _wait_for_upload_to_start(store: StoreUnderTest, digest: str, publisher: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and publisher.poll() is None:
        if store.kind == "local":
            if any((Path(store.uri) / "blobs" / "sha256").glob(f".{digest}.*.partial")):
                return True
        elif store.kind == "oci":
            if any(upload.stat().st_size > 0 for upload in store.registry.uploads(store.uri, "digits")):
                return True
        else:
            bucket = store.uri.removeprefix("s3://").split("/")[0]
            client = open_store(store.uri).client
            if client.list_multipart_uploads(Bucket=bucket).get("Uploads"):
                return True
        time.sleep(0.005)
    return False


def test_a_tampered_blob_is_refused_and_nothing_is_written(store, builds, tmp_path):
    assert _publish(store, builds["a"], "5.0.0").exit_code == 0
    digest = _engine(builds["a"], "rtx-4090").sha256
    store.tamper(digest, b"not a plan")
    out = tmp_path / "out" / "digits.plan"
    out.parent.mkdir()
    result = store.cli("pull", "digits@5.0.0", "--sku", "rtx-4090", "--out", out, "--no-cache")
    assert_clean_error(result, 1, f"sha256:{digest}", "corrupt", "nothing was written")
    assert list(out.parent.iterdir()) == []


def test_names_are_refused_before_any_request(builds, tmp_path):
    dead = {
        **os.environ,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_DEFAULT_REGION": "us-east-1",
    }  # any request would be exit 3
    cases = [
        ("publish", builds["a"], "--name", "../etc", "--version", "1"),
        ("publish", builds["a"], "--name", "digits", "--version", "1/../../x"),
        ("publish", builds["a"], "--name", "/abs", "--version", "1"),
        ("publish", builds["a"], "--name", "x" * 65, "--version", "1"),
        ("pull", "digits@..", "--sku", "rtx-3090", "--out", tmp_path / "p.plan"),
        ("pull", "Digits@1", "--sku", "rtx-3090", "--out", tmp_path / "p.plan"),
        ("promote", "digits@1", "--channel", "../stable"),
        ("ls", "digits@a/b"),
    ]
    for case in cases:
        for uri in ("s3://bucket/prefix", str(tmp_path / "local"), "oci://127.0.0.1:9/models"):
            result = run_cli(*case, "--store", uri, env=dead, timeout=60)
            assert_clean_error(result, 2)
    assert not (tmp_path / "local").exists()


def test_s3_unreachable_denied_or_missing_bucket_is_exit_3(s3, builds, tmp_path):
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    s3.client().create_bucket(Bucket=bucket)
    started = time.monotonic()
    stopped = run_cli("ls", "--store", f"s3://{bucket}", env=s3.env(AWS_ENDPOINT_URL="http://127.0.0.1:9"))
    assert_clean_error(stopped, 3, "cannot reach")
    assert time.monotonic() - started < 60
    denied = run_cli(
        "publish",
        builds["a"],
        "--name",
        "digits",
        "--version",
        "1",
        "--store",
        f"s3://{bucket}",
        env=s3.env(AWS_SECRET_ACCESS_KEY="wrong"),
    )
    assert_clean_error(denied, 3, "access denied")
    assert "wrong" not in denied.stderr
    missing = run_cli(
        "publish", builds["a"], "--name", "digits", "--version", "1", "--store", "s3://no-such-bucket", env=s3.env()
    )
    assert_clean_error(missing, 3, "bucket no-such-bucket does not exist")
    anonymous = {k: v for k, v in s3.env().items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    no_credentials = run_cli(
        "ls",
        "--store",
        f"s3://{bucket}",
        env={**anonymous, "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"},
    )
    assert_clean_error(no_credentials, 3, "no AWS credentials")


def test_a_local_store_that_does_not_exist_is_exit_3(tmp_path):
    assert_clean_error(run_cli("ls", "--store", tmp_path / "nowhere"), 3, "does not exist")


def test_a_misspelt_scheme_is_refused_not_taken_for_a_folder(builds, tmp_path):
    """Issue 43, footgun 1: ``s3:/models/team`` published, exit 0, into a folder ``./s3:/models/team``."""
    cases = {
        "s3:/models/team": "did you mean s3://models/team?",
        "s3:models/team": "did you mean s3://models/team?",
        "oci:/host/models": "did you mean oci://host/models?",
        "S3://models/team": "did you mean s3://models/team?",
        "file:/srv/models": "did you mean file:///srv/models?",
        "gs:/models/team": "unknown scheme",
    }
    for uri, fragment in cases.items():
        published = run_cli("publish", builds["a"], "--name", "digits", "--version", "1", "--store", uri, cwd=tmp_path)
        assert_clean_error(published, 2, fragment, f"./{uri}")
        assert_clean_error(run_cli("ls", "--store", uri, cwd=tmp_path), 2, fragment)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "release: {name: digits, version: 1.0.0}\nmodel: m.onnx\nprofiles: p.yaml\n"
        "targets: {rtx-4090: [fp16]}\nstore: s3:/models/team\n"
    )
    line = assert_clean_error(run_cli("release", pipeline, "--dry-run"), 2, "line 5", "did you mean s3://models/team")
    assert "store" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.yaml"]
    relative = run_cli("publish", builds["a"], "--name", "digits", "--version", "1", "--store", "st", cwd=tmp_path)
    assert relative.exit_code == 0, relative.stderr
    uri = (tmp_path / "st").as_uri()
    assert run_cli("ls", "digits", "--store", uri).exit_code == 0
    assert run_cli("ls", "digits", "--store", f"file://{tmp_path / 'st'}").exit_code == 0


def test_a_failed_build_is_refused_unless_allowed(store, builds, tmp_path):
    failed = tmp_path / "failed"
    shutil.copytree(builds["a"], failed)
    report = json.loads((failed / "build.json").read_text())
    report["targets"][0].update(status="failed", errors=["the builder gave up"])
    (failed / "build.json").write_text(json.dumps(report))
    refused = _publish(store, failed, "6.0.0")
    assert_clean_error(refused, 1, "not publishable", "the builder gave up", "--allow-failed")
    assert store.manifest("digits", "6.0.0") is None if store.kind != "local" or Path(store.uri).exists() else True
    allowed = _publish(store, failed, "6.0.0", "--allow-failed")
    assert allowed.exit_code == 0, allowed.stderr
    assert json.loads(allowed.stdout)["engines"] == 1


def test_a_plan_changed_after_its_build_is_refused(store, builds, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(builds["a"], edited)
    plan = edited / "rtx-3090" / "fp16" / "engine.plan"
    data = bytearray(plan.read_bytes())
    data[-1] ^= 0xFF
    plan.unlink()
    plan.write_bytes(bytes(data))
    result = _publish(store, edited, "7.0.0")
    assert_clean_error(result, 1, "engine.plan", "changed after the build")
    assert store.manifest("digits", "7.0.0") is None
    digest = _engine(edited, "rtx-3090").sha256
    assert open_store(store.uri).blob_size("digits", digest) is None


def test_a_damaged_manifest_is_exit_1_naming_it(store, builds, tmp_path):
    assert _publish(store, builds["a"], "8.0.0").exit_code == 0
    key = "releases/digits/8.0.0/manifest.json"
    manifest = json.loads(store.manifest("digits", "8.0.0"))
    manifest["content"]["engines"][0]["plan"]["sha256"] = "0" * 64
    if store.kind == "local":
        path = Path(store.uri) / key
        path.chmod(0o644)
        path.write_text(json.dumps(manifest))
    elif store.kind == "oci":  # a manifest pushed onto the version's tag behind the publisher's back
        from compiler.stores.oci import RELEASE_ARTIFACT, RELEASE_CONFIG

        oci = open_store(store.uri)
        oci._push(oci._repo("digits"), "8.0.0", json.dumps(manifest).encode(), RELEASE_CONFIG, RELEASE_ARTIFACT, [], {})
    else:
        server_bucket, prefix = store.uri.removeprefix("s3://").split("/", 1)
        open_store(store.uri).client.put_object(
            Bucket=server_bucket, Key=f"{prefix}/{key}", Body=json.dumps(manifest).encode()
        )
    result = store.cli("pull", "digits@8.0.0", "--sku", "rtx-3090", "--out", tmp_path / "x.plan")
    assert_clean_error(result, 1, key, "edited after publishing")


def test_pulling_costs_the_same_requests_however_many_releases_the_store_holds(s3, builds, tmp_path, monkeypatch):
    for key, value in s3.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    from compiler.releases import pull
    from compiler.releases.publish import publish

    counts = {}
    for releases in (1, 12):
        bucket = f"t-{uuid.uuid4().hex[:16]}"
        s3.client().create_bucket(Bucket=bucket)
        for i in range(releases):
            publish(builds["a"], f"s3://{bucket}", f"model-{i}", "1.0.0")
        store = open_store(f"s3://{bucket}")
        requests: list[str] = []
        store.client.meta.events.register("before-send.s3", lambda request, seen=requests, **_: seen.append(request))
        pull(store, "model-0@1.0.0", sku="rtx-3090", out=tmp_path / f"{releases}.plan", use_cache=False)
        counts[releases] = len(requests)
    # the manifest, the version's yank mark, the blob: a handful, the same whatever the store holds
    assert counts[1] == counts[12] <= 4, (counts, [f"{r.method} {r.url}" for r in requests])


def test_a_check_json_of_other_engines_is_refused(builds, tmp_path, digits_data):
    folder = tmp_path / "checked"
    shutil.copytree(builds["a"], folder)
    assert run_cli("check", folder, "--data", digits_data).exit_code == 0
    report = json.loads((folder / "check.json").read_text())
    report["engines"][0]["engine_sha256"] = "0" * 64  # as if judged before the folder was built again
    (folder / "check.json").write_text(json.dumps(report))
    result = run_cli("publish", folder, "--name", "digits", "--version", "1", "--store", tmp_path / "store")
    assert_clean_error(result, 1, "check.json", "judged other engines", "run compile check")
    assert not (tmp_path / "store" / "releases").exists()
