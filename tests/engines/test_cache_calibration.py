"""compile build keyed by its calibration folder: what keys the cache; a damaged or misplaced folder refused first."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import pytest

from tests.support.cli import CliResult, assert_clean_error
from tests.support.digits import run_build


def _calibration_copy(source: Path, target: Path, external: bool = False, **record_changes) -> Path:
    """A copy of a calibration folder; ``external`` re-saves its Q/DQ model with the weights beside it in
    model.onnx.data and records both files, as compile calibrate does for a model beyond protobuf's limit."""

    shutil.copytree(source, target)
    record = json.loads((target / "calibration.json").read_text())
    if external:
        onnx.save_model(
            onnx.load(target / "model.onnx"),
            target / "model.onnx",
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="model.onnx.data",
            size_threshold=0,
        )
        record["files"].update(
            {
                name: hashlib.sha256((target / name).read_bytes()).hexdigest()
                for name in ("model.onnx", "model.onnx.data")
            }
        )
    (target / "calibration.json").write_text(json.dumps({**record, **record_changes}))
    return target


def _build_int8(model, profiles, calibration, out, cache) -> CliResult:
    return run_build(
        out,
        ("rtx-4090",),
        ("int8",),
        "--calibration",
        calibration,
        "--cache-dir",
        cache,
        "--json",
        model=model,
        profiles=profiles,
    )


def test_calibration_artifacts_key_the_cache_by_content(int8_calibration, digits_model, digits_profiles, tmp_path):
    """The Q/DQ model (with its external data) keys the engine; the record's run facts (folder, seconds) do not."""
    cache = tmp_path / "cache"
    first = _build_int8(digits_model, digits_profiles, int8_calibration, tmp_path / "a", cache)
    assert first.exit_code == 0, first.stderr
    # The same calibration, recorded by another run in another folder: the same engine, this run's provenance.
    again = _calibration_copy(int8_calibration, tmp_path / "again", out=str(tmp_path / "again"), seconds=99.0)
    second = _build_int8(digits_model, digits_profiles, again, tmp_path / "b", cache)
    assert second.exit_code == 0, second.stderr
    assert [t["cache_hit"] for t in json.loads(second.stdout)["targets"]] == [True]
    record = json.loads((tmp_path / "b/rtx-4090/int8/engine.json").read_text())
    # what it names is the calibration's content, which another folder and other seconds do not change (issue 41)
    first_record = json.loads((tmp_path / "a/rtx-4090/int8/engine.json").read_text())
    assert record["calibration_sha256"] == first_record["calibration_sha256"]
    assert record["calibration_sha256"] != hashlib.sha256((again / "calibration.json").read_bytes()).hexdigest()
    # Weights in external data are part of the key: new weights bytes, a new engine.
    external = _calibration_copy(int8_calibration, tmp_path / "external", external=True)
    third = _build_int8(digits_model, digits_profiles, external, tmp_path / "c", cache)
    assert third.exit_code == 0, third.stderr
    weights = bytearray((external / "model.onnx.data").read_bytes())
    weights[:4] = bytes(4) if weights[:4] != bytes(4) else b"\1\1\1\1"
    (external / "model.onnx.data").write_bytes(weights)
    # ...changed behind compile calibrate's back, it is refused before any build
    assert_clean_error(
        _build_int8(digits_model, digits_profiles, external, tmp_path / "d", cache),
        2,
        "model.onnx.data",
        "changed since compile calibrate wrote it",
        "re-run compile calibrate",
    )
    assert not (tmp_path / "d").exists()
    # ...and recorded (as a new calibration run would), it builds anew
    record = json.loads((external / "calibration.json").read_text())
    record["files"]["model.onnx.data"] = hashlib.sha256(bytes(weights)).hexdigest()
    (external / "calibration.json").write_text(json.dumps(record))
    fourth = _build_int8(digits_model, digits_profiles, external, tmp_path / "e", cache)
    assert fourth.exit_code == 0, fourth.stderr
    assert [t["cache_hit"] for t in json.loads(fourth.stdout)["targets"]] == [False]


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        ("garbage", ["model.onnx", "changed since compile calibrate wrote it"]),
        ("another model", ["model.onnx", "changed since compile calibrate wrote it"]),
        ("record not an object", ["calibration.json", "not a calibration.json this version writes"]),
        ("weights outside", ["model.onnx.data", "points outside the model's folder"]),
        # a folder whose record lost its file list and whose model.onnx is the FP32 model built an "int8" engine
        # with no Int8 kernel (exit 0)
        ("file list lost, fp32 model", ["calibration.json", "records no model.onnx"]),
        ("model a link out", ["model.onnx", "leads out of the calibration folder"]),
        ("weights not recorded", ["model.onnx.data", "not recorded in", "calibration.json"]),
        ("older format", ["calibration.json", "format_version None, this version reads 2"]),
    ],
)
def test_a_damaged_calibration_folder_is_refused_before_any_build(
    damage, fragments, int8_calibration, digits_model, digits_profiles, tmp_path
):
    folder = _calibration_copy(
        int8_calibration, tmp_path / "calibration", external=damage in ("weights outside", "weights not recorded")
    )
    if damage == "garbage":
        (folder / "model.onnx").write_bytes(b"\x08\x07garbage" * 100)
    elif damage == "another model":
        shutil.copy(digits_model, folder / "model.onnx")
    elif damage == "record not an object":
        (folder / "calibration.json").write_text("[]")
    elif damage == "file list lost, fp32 model":
        shutil.copy(digits_model, folder / "model.onnx")
        record = json.loads((folder / "calibration.json").read_text())
        del record["files"]
        (folder / "calibration.json").write_text(json.dumps({**record, "files": {}}))
    elif damage == "model a link out":
        outside = tmp_path / "elsewhere.onnx"
        (folder / "model.onnx").rename(outside)
        (folder / "model.onnx").symlink_to(outside)
    elif damage == "weights not recorded":
        record = json.loads((folder / "calibration.json").read_text())
        del record["files"]["model.onnx.data"]
        (folder / "calibration.json").write_text(json.dumps(record))
    elif damage == "older format":  # as compile calibrate wrote it before format 2: "format", no "format_version"
        record = json.loads((folder / "calibration.json").read_text())
        del record["format_version"]
        (folder / "calibration.json").write_text(json.dumps({**record, "format": 1}))
    else:  # the weights are a symlink to a file elsewhere: TensorRT would read it
        outside = tmp_path / "elsewhere.data"
        (folder / "model.onnx.data").rename(outside)
        (folder / "model.onnx.data").symlink_to(outside)
    result = _build_int8(digits_model, digits_profiles, folder, tmp_path / "out", tmp_path / "cache")
    assert_clean_error(result, 2, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_file_in_the_way_of_an_engine_folder_fails_before_any_calibration(digits_data, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    (out / "rtx-4090").mkdir(parents=True)
    (out / "rtx-4090" / "int8").write_text("not a folder\n")
    result = run_build(out, ("rtx-3090", "rtx-4090"), ("int8",), "--data", digits_data, "--cache-dir", cache)
    assert_clean_error(result, 2, "--out", str(out / "rtx-4090" / "int8"), "a file is in the way")
    assert not (cache / "calibrations").exists() and not (out / "rtx-3090").exists()
    assert (out / "rtx-4090" / "int8").read_text() == "not a folder\n"


def test_the_qdq_model_is_read_once_for_its_checks_and_digest(
    int8_calibration, digits_model, digits_profiles, tmp_path, monkeypatch
):
    """Its sha256 checked against the calibration record is its digest too: a Q/DQ model of GBs is hashed once."""
    import compiler.engines.cache
    import compiler.engines.jobs
    from compiler.engines import BuildOptions, plan_builds

    folder = _calibration_copy(int8_calibration, tmp_path / "calibration")
    hashed: list[str] = []
    for module, name in ((compiler.engines.cache, "file_sha256"), (compiler.engines.jobs, "hash_model_file_mapped")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda path, *rest, real=real: hashed.append(Path(path).name) or real(path, *rest)
        )
    options = BuildOptions(calibration=(folder,), cache_dir=tmp_path / "cache", use_cache=False)
    [job] = plan_builds(digits_model, digits_profiles, ["rtx-4090"], ["int8"], tmp_path / "out", options)
    assert job.prepared_sha256 == hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    assert hashed.count("model.onnx") == 1


def test_a_source_model_protobuf_refuses_fails_an_int8_build_whose_record_vouches_for_it(
    int8_calibration, digits_model, tmp_path
):
    """The int8 build reads the Q/DQ model, not the source, and its skims of the source step over the weights: a
    record forged to match a source protobuf refuses still fails the run, cleanly, by the source's full parse."""
    from tests.hostile.generators.models import DamagedWeightsModel

    damaged = DamagedWeightsModel("classifier.weight", 1).write(type("Box", (), {"inputs": tmp_path})).path
    folder = _calibration_copy(
        int8_calibration, tmp_path / "calibration", model_sha256=hashlib.sha256(damaged.read_bytes()).hexdigest()
    )
    result = run_build(tmp_path / "out", ("rtx-4090",), ("int8",), "--calibration", folder, model=damaged)
    assert_clean_error(result, 2, str(damaged), "not a valid ONNX model")


def test_a_qdq_model_replaced_after_its_verification_is_not_built_under_the_verified_digest(
    int8_calibration, digits_model, digits_profiles, tmp_path, monkeypatch
):
    """The digest the plan gives a Q/DQ model is the sha256 its record vouches for, not a second read of the file: a
    file replaced between the verification and the build fails the target instead of building unvouched bytes."""
    from calibration.folder import Calibration
    from compiler.engines import BuildOptions, execute_builds, plan_builds

    folder = _calibration_copy(int8_calibration, tmp_path / "calibration")
    verify = Calibration.verify

    def verify_then_replace(self, files, *rest):
        files = list(files)
        verified = verify(self, files, *rest)
        if folder / "model.onnx" not in files:  # its external data files, none here
            return verified
        model = onnx.load(folder / "model.onnx")
        model.doc_string = "replaced after its verification"
        onnx.save_model(model, folder / "model.onnx")
        return verified

    monkeypatch.setattr(Calibration, "verify", verify_then_replace)
    options = BuildOptions(calibration=(folder,), cache_dir=tmp_path / "cache", use_cache=False)
    out = tmp_path / "out"
    planned = plan_builds(digits_model, digits_profiles, ["rtx-4090"], ["int8"], out, options)
    [target] = execute_builds(planned, digits_model, out).targets
    assert target.status == "failed" and "model.onnx changed while its engine was built" in target.errors[0]
    # what the cache learnt of the file meanwhile is not the vouched digest filed under the new file's stat
    replaced = folder / "model.onnx"
    [job] = plan_builds(replaced, digits_profiles, ["rtx-4090"], ["fp32"], tmp_path / "fp32", options)
    assert job.model_sha256 == hashlib.sha256(replaced.read_bytes()).hexdigest()


def test_a_calibration_model_that_is_a_link_loop_is_refused(int8_calibration, tmp_path):
    folder = _calibration_copy(int8_calibration, tmp_path / "calibration")
    (folder / "model.onnx").unlink()
    (folder / "model.onnx").symlink_to("loop.onnx")
    (folder / "loop.onnx").symlink_to("model.onnx")
    result = run_build(tmp_path / "out", ("rtx-4090",), ("int8",), "--calibration", folder)
    assert_clean_error(result, 2, "model.onnx", "loop")
