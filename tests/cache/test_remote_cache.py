"""The remote cache end to end: two runners with empty local caches share calibrations, engines and checks through
SeaweedFS (S3) and the registry (OCI); a tampered entry is refused, rebuilt and replaced; --explain names the input
that changed."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import yaml

from tests.pipeline.test_release import _pipeline
from tests.support.cli import REPO, run_cli
from tests.support.digits import run_build, run_calibrate


def _runner(tmp_path: Path, name: str, env: dict[str, str]) -> dict[str, str]:
    """A fresh runner: an empty local cache of its own, set through the environment."""
    return {**env, "COMPILE_CACHE_DIR": str(tmp_path / f"cache-{name}")}


def _release(pipeline: Path, work: Path, env: dict[str, str], *extra: str) -> dict:
    result = run_cli("release", pipeline, "--work", work, "--json", *extra, env=env)
    assert result.exit_code == 0, result.stderr
    return {**json.loads(result.stdout), "_stderr": result.stderr}


def _stage(report: dict, name: str) -> dict:
    return next(s for s in report["stages"] if s["stage"] == name)


def _s3_remote(s3) -> str:
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=bucket)
    return f"s3://{bucket}/cache"


def test_runner_b_releases_from_runner_a_s3_cache_without_calibrating_or_building(s3, tmp_path):
    remote = _s3_remote(s3)
    pipeline = _pipeline(tmp_path)
    a = _release(
        pipeline,
        tmp_path / "a",
        _runner(tmp_path, "a", s3.env()),
        "--remote-cache",
        remote,
        "--store",
        str(tmp_path / "store-a"),
    )
    assert {_stage(a, s)["cache"]["source"] for s in ("inspect", "calibrate", "build", "check")} == {"miss"}
    assert "parsed by TensorRT" in _stage(a, "inspect")["detail"]
    assert all(e["cache"]["source"] == "miss" for e in a["engines"])
    # runner B: the remote from the environment, another empty local cache, another store
    b = _release(
        pipeline,
        tmp_path / "b",
        _runner(tmp_path, "b", s3.env(COMPILE_REMOTE_CACHE=remote)),
        "--store",
        str(tmp_path / "store-b"),
    )
    assert _stage(b, "inspect")["cache"] == {"source": "remote", "reason": None}
    assert _stage(b, "inspect")["detail"].endswith("from the remote cache")  # no TensorRT parse on runner B
    assert _stage(b, "calibrate")["cache"] == {"source": "remote", "reason": None}
    assert "from the remote cache" in _stage(b, "calibrate")["detail"]
    assert _stage(b, "build")["cache"]["source"] == "remote"
    assert [e["cache"]["source"] for e in b["engines"]] == ["remote"] * 6
    assert _stage(b, "check")["cache"]["source"] == "remote"
    assert b["published"]["status"] == "published" and not b["warnings"]
    # the same engines: the published plans are byte for byte runner A's
    plans = {}
    for store in ("store-a", "store-b"):
        listing = json.loads(run_cli("ls", "digits@1.0.0", "--store", tmp_path / store, "--json").stdout)
        plans[store] = sorted(e["plan"]["sha256"] for e in listing["manifest"]["content"]["engines"])
    assert plans["store-a"] == plans["store-b"]


def _tampered(s3, tmp_path: Path, kind: str, name: str, tamper) -> tuple[str, Path, dict[str, str]]:
    """Runner A releases an fp16 engine into a fresh S3 remote cache, then the one ``kind`` entry's file ``name``
    is rewritten in the bucket by ``tamper`` (bytes -> bytes): the remote, the pipeline and runner B's env."""
    remote = _s3_remote(s3)
    pipeline = _pipeline(tmp_path, targets={"rtx-5090": ["fp16"]}, calibration=None)
    env = s3.env(COMPILE_REMOTE_CACHE=remote)
    _release(pipeline, tmp_path / "a", _runner(tmp_path, "a", env), "--store", str(tmp_path / "store-a"))
    bucket, prefix = remote[5:].split("/", 1)
    client = s3.client()
    (key,) = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/cache/{kind}/")["Contents"]]
    index = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob_key = f"{prefix}/blobs/sha256/{index['files'][name]['sha256']}"
    blob = client.get_object(Bucket=bucket, Key=blob_key)["Body"].read()
    client.put_object(Bucket=bucket, Key=blob_key, Body=tamper(blob))
    return remote, pipeline, env


def _flipped(data: bytes) -> bytes:
    """Same size, other bytes."""
    return data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]


def test_a_tampered_remote_engine_is_refused_rebuilt_replaced_and_the_published_plans_verify(s3, tmp_path):
    remote, pipeline, env = _tampered(s3, tmp_path, "engines", "engine.plan", _flipped)
    b = _release(pipeline, tmp_path / "b", _runner(tmp_path, "b", env), "--store", str(tmp_path / "store-b"))
    (engine,) = b["engines"]
    assert engine["cache"] == {"source": "miss", "reason": "the remote entry was damaged"}
    (warning,) = b["warnings"]
    assert warning.startswith(f"remote cache {remote}: engines entry") and "refused" in warning
    assert b["_stderr"].count("warning: remote cache") == 1
    pulled = run_cli(
        "pull", "digits@1.0.0", "--sku", "rtx-5090", "--store", tmp_path / "store-b", "--out", tmp_path / "b.plan"
    )
    assert pulled.exit_code == 0, pulled.stderr
    # replaced: a third runner takes the rebuilt entry, verified
    c = _release(pipeline, tmp_path / "c", _runner(tmp_path, "c", env), "--store", str(tmp_path / "store-c"))
    assert c["engines"][0]["cache"]["source"] == "remote" and not c["warnings"]


def test_a_tampered_remote_inspection_is_refused_with_one_warning_and_made_again(s3, tmp_path):
    remote, pipeline, env = _tampered(
        s3, tmp_path, "inspections", "inspect.json", lambda data: data.replace(b'"supported":true', b'"supported":fals')
    )
    b = _release(pipeline, tmp_path / "b", _runner(tmp_path, "b", env), "--store", str(tmp_path / "store-b"))
    assert _stage(b, "inspect")["cache"] == {"source": "miss", "reason": "the remote entry was damaged"}
    assert _stage(b, "inspect")["detail"].endswith("parsed by TensorRT")
    (warning,) = b["warnings"]
    assert warning.startswith(f"remote cache {remote}: inspections entry") and "refused" in warning
    assert b["_stderr"].count("warning: remote cache") == 1
    # made again and replaced: a third runner takes it, verified
    c = _release(pipeline, tmp_path / "c", _runner(tmp_path, "c", env), "--store", str(tmp_path / "store-c"))
    assert _stage(c, "inspect")["cache"]["source"] == "remote" and not c["warnings"]


def test_runner_b_releases_from_runner_a_registry_cache(registry, tmp_path):
    remote = registry.uri()
    pipeline = _pipeline(tmp_path, targets={"rtx-5090": ["fp16"], "rtx-4090": ["int8"]})
    env = dict(os.environ)
    _release(pipeline, tmp_path / "a", _runner(tmp_path, "a", env), "--remote-cache", remote)
    b = _release(
        pipeline,
        tmp_path / "b",
        _runner(tmp_path, "b", env),
        "--remote-cache",
        remote,
        "--store",
        str(tmp_path / "store-b"),
    )
    assert [_stage(b, s)["cache"]["source"] for s in ("inspect", "calibrate", "build", "check")] == ["remote"] * 4
    assert _stage(b, "inspect")["detail"].endswith("from the remote cache")  # no TensorRT parse on runner B


def test_explain_names_the_changed_profiles(tmp_path):
    profiles = yaml.safe_load((REPO / "profiles" / "digits.yaml").read_text())
    pipeline = _pipeline(tmp_path, targets={"rtx-5090": ["fp16"]}, calibration=None)
    env = _runner(tmp_path, "a", dict(os.environ))
    _release(pipeline, tmp_path / "a", env)
    profiles["profiles"][1]["shapes"]["image"]["max"] = [32, 1, 8, 8]
    changed_profiles = tmp_path / "profiles.yaml"
    changed_profiles.write_text(yaml.safe_dump(profiles))
    changed = _pipeline(
        tmp_path,
        targets={"rtx-5090": ["fp16"]},
        calibration=None,
        profiles=str(changed_profiles),
        release={"name": "digits", "version": "1.0.1"},
    )
    result = run_cli("release", changed, "--work", tmp_path / "b", "--explain", env=env)
    assert result.exit_code == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("miss rtx-5090/fp16")]
    assert "profiles changed against the nearest cached engine" in line
    assert "profile 'batch' image max [64, 1, 8, 8] -> [32, 1, 8, 8]" in line


def test_calibrate_explain_names_the_changed_option_and_shares_through_a_folder(digits_model, digits_data, tmp_path):
    out, remote = tmp_path / "calibrated", tmp_path / "remote"
    args = ("calibrate", digits_model, "--data", digits_data, "--out", out, "--remote-cache", remote)
    first = run_cli(*args, "--samples", "32", "--json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["cache"]["source"] == "miss"
    changed = run_cli(*args, "--samples", "48", "--explain")
    assert changed.exit_code == 0, changed.stderr
    line = " ".join(changed.stdout.split())  # as Rich wrapped it
    assert "miss calibration: samples changed (and options) against the nearest cached calibration" in line
    elsewhere = run_calibrate(tmp_path / "other", "--samples", "32", "--remote-cache", remote, "--json")
    assert json.loads(elsewhere.stdout)["cache"] == {"source": "remote", "reason": None}, elsewhere.stderr
    assert (tmp_path / "other" / "model.onnx").read_bytes() == (
        remote / "blobs" / "sha256" / json.loads(elsewhere.stdout)["files"]["model.onnx"]
    ).read_bytes()


def test_explain_on_a_fresh_runner_compares_with_the_remote_entries(digits_model, digits_profiles, tmp_path):
    remote = tmp_path / "remote"
    base = ("build", digits_model, "--sku", "rtx-5090", "--precision", "fp16", "--remote-cache", remote)
    first = run_cli(*base, "--profiles", digits_profiles, "--out", tmp_path / "a", "--cache-dir", tmp_path / "ca")
    assert first.exit_code == 0, first.stderr
    profiles = yaml.safe_load(digits_profiles.read_text())
    profiles["profiles"] = profiles["profiles"][:1]
    (tmp_path / "online.yaml").write_text(yaml.safe_dump(profiles))
    fresh = run_cli(
        *base,
        "--profiles",
        tmp_path / "online.yaml",
        "--out",
        tmp_path / "b",
        "--cache-dir",
        tmp_path / "cb",
        "--explain",
    )
    assert fresh.exit_code == 0, fresh.stderr
    line = " ".join(fresh.stdout.split())
    assert "miss rtx-5090/fp16: profiles changed against the nearest cached engine (remote " in line
    assert "profile 'batch' dropped" in line


def test_a_tampered_entry_in_a_registry_cache_is_refused_rebuilt_and_replaced(registry, tmp_path):
    from compiler.stores import open_store

    remote = registry.uri()
    env = {**os.environ}

    def build(runner: str) -> tuple[dict, str]:
        result = run_build(
            tmp_path / runner,
            ("rtx-5090",),
            ("fp16",),
            "--cache-dir",
            tmp_path / f"cache-{runner}",
            "--remote-cache",
            remote,
            "--json",
            env=env,
        )
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["targets"][0], result.stderr

    build("a")
    store = open_store(remote)
    (key,) = store.entry_keys("engines")
    plan = json.loads(store.read_entry("engines", key))["files"]["engine.plan"]["sha256"]
    blob = registry.blob_file(plan)
    original = blob.read_bytes()
    try:
        blob.write_bytes(original[:100] + bytes([original[100] ^ 0xFF]) + original[101:])
        target, stderr = build("b")
    finally:
        if blob.exists():
            blob.write_bytes(original)
    assert target["cache"] == {"source": "miss", "reason": "the remote entry was damaged"}
    assert stderr.count("refused (engine.plan does not hash to the sha256 its index records)") == 1, stderr
    replaced = stderr
    target, stderr = build("c")
    if "a damaged blob cannot be replaced in this store" in replaced:
        # TensorRT-RTX rebuilt the very same plan bytes (it sometimes does), whose blob the registry already holds,
        # damaged: a client cannot replace a registry's blob, so runner b said so instead of sending its entry, and
        # runner c builds again rather than taking anything damaged
        assert target["cache"] == {"source": "miss", "reason": "in neither the local nor the remote cache"}, target
    else:
        assert target["cache"]["source"] == "remote" and "warning" not in stderr, (target, replaced, stderr)
