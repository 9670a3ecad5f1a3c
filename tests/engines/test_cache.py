"""compile build's content-addressed cache: damage, keys, races, and what it delivers."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.core.files
import compiler.engines
from compiler.backends import load_backend
from compiler.backends.tensorrt import DatacenterTensorRTBackend
from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.engines import BuildOptions, build_engines, execute_builds, plan_builds
from compiler.engines.cache import ENGINE_FILES, BuildCache
from tests.support.cli import assert_clean_error
from tests.support.digits import run_build
from tests.support.engines import CC_BITS, SKUS, layers_of
from tests.support.onnx_files import save_model


def test_datacenter_tensorrt_refuses_without_a_gpu_of_the_sku():
    """TensorRT itself cannot be installed here; its GPU check runs against this machine's real NVML state."""
    backend = object.__new__(DatacenterTensorRTBackend)  # the check needs no TensorRT module
    with pytest.raises(EnvironmentProblem) as refused:
        backend.check_targets(("9.0",))
    message = str(refused.value)
    assert "builds only for the local GPU" in message
    assert "compute capability 9.0" in message and "this host has none" in message
    assert refused.value.exit_code == 3


def _overwrite(path: Path, data: bytes) -> None:
    path.unlink()  # a new file, not a write through the hard links to it
    path.write_bytes(data)


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: _overwrite(entry / "engine.plan", b"vtrt truncated"),  # someone overwrote the cached plan
        lambda entry: _overwrite(entry / "engine.json", b'{"trunc'),  # a record cut short
        lambda entry: (entry / "layers.json").unlink(),  # a file deleted by hand or by a cleaner
    ],
    ids=["plan", "record", "missing file"],
)
def test_damaged_cache_entry_is_rebuilt_not_served(damage, digits_model, digits_profiles, tmp_path):
    cache = tmp_path / "cache"
    args = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"])
    first = build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    [entry] = [p for p in cache.glob("engines/*/*") if not p.name.startswith(".")]
    damage(entry)
    second = build_engines(*args, tmp_path / "b", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in first.targets + second.targets] == [False, False]
    plan = (tmp_path / "b/rtx-4090/fp32/engine.plan").read_bytes()
    record = json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())
    assert len(plan) == record["size_bytes"] > 1000
    third = build_engines(*args, tmp_path / "c", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in third.targets] == [True]


def test_plan_rewritten_in_place_through_out_is_not_served_from_the_cache(digits_model, digits_profiles, tmp_path):
    """OUT's plan is a copy of the cache entry's: `cp other.plan OUT/.../engine.plan` (same size, other bytes)
    leaves the cached plan as it was, and the next run hands out the plan engine.json names."""
    cache, args = tmp_path / "cache", (digits_model, digits_profiles, ["rtx-4090"], ["fp32"])
    build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    second = build_engines(
        *args, tmp_path / "b", options=BuildOptions(cache_dir=cache)
    )  # a hit: links the plan once more
    assert [t.cache_hit for t in second.targets] == [True]
    delivered = tmp_path / "b/rtx-4090/fp32/engine.plan"
    recorded = json.loads(delivered.with_name("engine.json").read_text())["sha256"]
    with open(delivered, "r+b") as plan:  # in place, as cp onto an existing file does
        plan.seek(4096)
        plan.write(bytes(64))
    third = build_engines(*args, tmp_path / "c", options=BuildOptions(cache_dir=cache))
    assert [t.cache_hit for t in third.targets] == [True]  # the cache was not touched by the edit in b
    plan = (tmp_path / "c/rtx-4090/fp32/engine.plan").read_bytes()
    assert hashlib.sha256(plan).hexdigest() == recorded
    assert hashlib.sha256(delivered.read_bytes()).hexdigest() != recorded  # only b's copy was changed
    assert os.stat(delivered).st_nlink == 1


def test_a_folder_that_cannot_be_put_in_place_leaves_the_previous_one(
    digits_model, digits_profiles, tmp_path, monkeypatch
):
    """The finished folder is renamed into place; when the filesystem refuses that rename, the previous build's
    folder is put back untouched and the target fails with the reason."""
    args = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"], tmp_path / "out")
    build_engines(*args, options=BuildOptions(cache_dir=tmp_path / "cache"))
    target = tmp_path / "out/rtx-4090/fp32"
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    rename = os.rename

    def refusing(source, destination):
        if Path(destination) == target and "-old-" not in str(source):  # the new folder, not the old one back
            raise OSError(errno.EIO, "Input/output error")
        return rename(source, destination)

    monkeypatch.setattr(os, "rename", refusing)
    report = build_engines(*args, options=BuildOptions(cache_dir=tmp_path / "cache"))
    [status] = report.targets
    assert status.status == "failed" and "could not put the engine files in place" in status.errors[0]
    assert "Input/output error" in status.errors[0]
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in target.parent.iterdir()] == ["fp32"]  # no staging or old folder left behind


def _new_file_with_digest_held(model: Path, folder: Path, monkeypatch) -> tuple[Path, threading.Event]:
    """A copy of ``model`` the cache has never seen, whose digest cannot finish until the event is set."""
    folder.mkdir()
    copy = folder / "model.onnx"
    shutil.copy(model, copy)
    release, hash_model_file = threading.Event(), compiler.engines.jobs.hash_model_file_mapped

    def held(path: Path):
        release.wait()
        return hash_model_file(path)

    monkeypatch.setattr(compiler.engines.jobs, "hash_model_file_mapped", held)
    return copy, release


def test_a_new_model_file_builds_while_hashed_and_stops_on_a_cache_hit(
    digits_model, digits_profiles, tmp_path, monkeypatch
):
    """A file with no remembered digest starts building at once; when its digest names an engine the cache
    already has (here: a copy of a cached model), the build is stopped and the cached engine served."""
    cache = tmp_path / "cache"

    def build(model: Path, profiles: Path, out: str, **progress):
        return build_engines(
            model, profiles, ["rtx-4090"], ["fp32"], tmp_path / out, BuildOptions(cache_dir=cache), **progress
        )

    first = build(digits_model, digits_profiles, "a")
    copy, release = _new_file_with_digest_held(digits_model, tmp_path / "copy", monkeypatch)
    phases = []

    def progress(index: int, phase: str, done: int, total: int) -> None:
        phases.append(phase)
        release.set()  # the build is running: now let the digest finish

    second = build(copy, digits_profiles, "b", progress=progress)
    assert "Building engine" in phases and phases[-1] == "ok (cache hit)"
    assert [t.cache_hit for t in first.targets + second.targets] == [False, True]
    a = json.loads((tmp_path / "a/rtx-4090/fp32/engine.json").read_text())
    b = json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())
    assert b["sha256"] == a["sha256"] and b["model_sha256"] == a["model_sha256"] == second.model_sha256
    assert sorted(p.name for p in (tmp_path / "b/rtx-4090").iterdir()) == ["fp32"]
    # A model the cache does not have builds to the end while it is hashed, and is then cached.
    other, release = _new_file_with_digest_held(digits_model, tmp_path / "other", monkeypatch)
    profiles = tmp_path / "p.yaml"  # new profiles: an engine the cache has never seen
    profiles.write_text(digits_profiles.read_text().replace("max: [64, 1, 8, 8]", "max: [48, 1, 8, 8]"))
    third = build(other, profiles, "c", progress=progress)
    assert [(t.status, t.cache_hit) for t in third.targets] == [("ok", False)]
    fourth = build(other, profiles, "d")
    assert [t.cache_hit for t in fourth.targets] == [True]


def test_parallel_builds_run_while_the_model_is_hashed(digits_model, digits_profiles, tmp_path, monkeypatch):
    """With --jobs the builds start before the new file's digest is known; when it is, a cache hit still stops
    them, and a digest that fails fails each target with the reason."""
    cache = tmp_path / "cache"
    build_engines(
        digits_model, digits_profiles, list(SKUS), ["fp32"], tmp_path / "a", options=BuildOptions(cache_dir=cache)
    )
    copy, release = _new_file_with_digest_held(digits_model, tmp_path / "copy", monkeypatch)
    events = []

    def progress(index: int, phase: str, done: int, total: int) -> None:
        events.append((index, phase))
        release.set()  # a worker is building: only now may the digest finish

    options = BuildOptions(cache_dir=cache, jobs=2)
    report = build_engines(copy, digits_profiles, list(SKUS), ["fp32"], tmp_path / "b", options, progress)
    assert [(t.status, t.cache_hit) for t in report.targets] == [("ok", True), ("ok", True)]
    assert report.model_sha256 == hashlib.sha256(copy.read_bytes()).hexdigest()
    for index in (0, 1):
        phases = [phase for i, phase in events if i == index]
        assert phases[0] != "ok (cache hit)" and phases[-1] == "ok (cache hit)"  # built first, then served

    # The file disappears before its digest is computed (once both builders have parsed it): both builds
    # finish, neither is passed off as done.
    gone, release = _new_file_with_digest_held(digits_model, tmp_path / "gone", monkeypatch)
    building: set[int] = set()

    def remove_then_release(index: int, phase: str, done: int, total: int) -> None:
        building.add(index)
        if building == {0, 1} and gone.exists():
            gone.unlink()
            release.set()

    report = build_engines(gone, digits_profiles, list(SKUS), ["fp32"], tmp_path / "c", options, remove_then_release)
    assert [t.status for t in report.targets] == ["failed", "failed"]
    assert all(
        "could not read the model to hash it" in t.errors[0] and "model.onnx" in t.errors[0] for t in report.targets
    )
    assert not list((tmp_path / "c").glob("*/*/engine.plan"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_cache_hit_records_the_sku_it_was_built_for(tmp_path, jobs):
    """rtx-3090 and rtx-a6000 are both compute capability 8.6: one engine serves both, built once (with --jobs 2
    the second target waits for it rather than build it again beside it), and each engine.json names its SKU."""
    result = run_build(
        tmp_path / "out",
        ("rtx-3090", "rtx-a6000"),
        ("fp32",),
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        "--jobs",
        jobs,
    )
    assert result.exit_code == 0, result.stderr
    assert [(t["sku"], t["cache_hit"]) for t in json.loads(result.stdout)["targets"]] == [
        ("rtx-3090", False),
        ("rtx-a6000", True),
    ]
    records = {
        sku: json.loads((tmp_path / "out" / sku / "fp32" / "engine.json").read_text())
        for sku in ("rtx-3090", "rtx-a6000")
    }
    assert {sku: r["sku"] for sku, r in records.items()} == {"rtx-3090": "rtx-3090", "rtx-a6000": "rtx-a6000"}
    assert records["rtx-3090"]["sha256"] == records["rtx-a6000"]["sha256"]


def test_a_target_whose_folder_cannot_be_made_fails_alone(digits_model, digits_profiles, tmp_path):
    """A file put in the way after the checks (another process): that target fails, the other is built and
    build.json says which."""
    out = tmp_path / "out"
    planned = plan_builds(
        digits_model,
        digits_profiles,
        ["rtx-3090", "rtx-4090"],
        ["fp32"],
        out,
        options=BuildOptions(cache_dir=tmp_path / "cache"),
    )
    (out / "rtx-3090").write_text("in the way\n")
    report = execute_builds(planned, digits_model, out)
    statuses = {t.sku: t for t in report.targets}
    assert statuses["rtx-4090"].status == "ok" and (out / "rtx-4090" / "fp32" / "engine.plan").is_file()
    assert statuses["rtx-3090"].status == "failed"
    assert f"could not make a folder in {out / 'rtx-3090'}" in statuses["rtx-3090"].errors[0]
    assert json.loads((out / "build.json").read_text())["targets"][0]["status"] == "failed"
    assert (out / "rtx-3090").read_text() == "in the way\n"


@pytest.mark.parametrize(
    ("offset", "value", "fragment"),
    [
        (0, b"xtrt", "plan magic 'xtrt' is not 'vtrt'"),
        (24, bytes([1, 7, 2, 0]), "plan says version 1.7.2.0 but the backend is 1.7.1.116"),
        (32, struct.pack("<Q", CC_BITS["8.6"]), "plan targets compute capabilities ['8.6'] but ['8.9'] were requested"),
    ],
)
def test_the_plan_header_check_catches_a_plan_that_is_not_what_was_asked_for(matrix, offset, value, fragment):
    """The check every build runs on its plan before writing engine.json, on a real plan with one field changed."""
    out, _, _ = matrix
    backend = load_backend("tensorrt-rtx")
    plan = (out / "rtx-4090" / "fp32" / "engine.plan").read_bytes()
    assert backend.plan_mismatch(plan, ("8.9",)) is None
    changed = plan[:offset] + value + plan[offset + len(value) :]
    assert backend.plan_mismatch(changed, ("8.9",)) == fragment
    assert backend.plan_mismatch(plan[:40], ("8.9",)) == "plan has 40 bytes, fewer than its 64-byte header"


def test_builder_options_key_the_cache(digits_model, digits_profiles, tmp_path):
    args, cache = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"]), tmp_path / "cache"
    hits = [
        build_engines(*args, tmp_path / str(i), options=BuildOptions(cache_dir=cache, **options)).targets[0].cache_hit
        for i, options in enumerate(
            [{}, {"optimization_level": 1}, {"workspace_mb": 64}, {"optimization_level": 1}, {}]
        )
    ]
    assert hits == [False, False, False, True, True]
    record = json.loads((tmp_path / "1" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert record["builder_options"] == {
        "network": "strongly typed",
        "profiling_verbosity": "detailed",
        "workspace_mb": None,
        "optimization_level": 1,
    }


def test_a_profile_the_builder_finds_not_self_consistent_is_refused_and_never_cached(tmp_path):
    """A profile whose largest batch (the largest dim TensorRT takes) overflows an inner tensor's volume: TensorRT
    builds it with only a warning, an engine that cannot run at its own max. It is refused as bad input (exit 2,
    TensorRT's words kept), every time: nothing of it lands in the cache or the target's folder."""
    profiles = tmp_path / "huge.yaml"
    profiles.write_text(
        "profiles:\n  - name: huge\n    shapes:\n"
        "      image: {min: [1, 1, 8, 8], opt: [1, 1, 8, 8], max: [2147483647, 1, 8, 8]}\n"
    )
    for run in ("a", "b"):
        result = run_build(
            tmp_path / run, ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", profiles=profiles
        )
        assert_clean_error(
            result,
            2,
            "rtx-4090/fp32",
            "shape profiles ask for shapes the model cannot run",
            "Profile kMAX values are not self-consistent",
            "tensor volume exceeds",
        )
        [target] = json.loads((tmp_path / run / "build.json").read_text())["targets"]
        assert (target["status"], target["cache_hit"], target["refused"]) == ("failed", False, True)
        assert sorted(p.name for p in (tmp_path / run / "rtx-4090" / "fp32").iterdir()) == ["build.log"]


def test_an_entry_renamed_into_place_during_a_lookup_is_a_miss_not_evicted(tmp_path, monkeypatch):
    """A run's lookup can race another's store: the entry may appear between the lookup's looks. It is whole
    (entries are renamed into place), so it must not be taken for a damaged one and evicted (seen in CI: a build
    whose digest watcher looked while the same run stored its engine left an empty cache)."""
    cache = BuildCache(tmp_path / "cache")
    key = "ab" * 32
    entry, whole = cache.entry(key), tmp_path / "whole"
    whole.mkdir()
    for name in ENGINE_FILES:
        (whole / name).write_text(name)
    entry.parent.mkdir(parents=True)
    looks = {"is_dir": Path.is_dir, "is_file": Path.is_file}

    def arriving(method: str):
        def look(self: Path) -> bool:
            if (self == entry or self.parent == entry) and whole.exists():
                whole.rename(entry)  # the other run's store lands right after this look
                return False
            return looks[method](self)

        return look

    monkeypatch.setattr(Path, "is_dir", arriving("is_dir"))
    monkeypatch.setattr(Path, "is_file", arriving("is_file"))
    assert cache.lookup(key) is None  # not there when looked: a miss
    monkeypatch.undo()
    assert sorted(p.name for p in entry.iterdir()) == sorted(ENGINE_FILES)
    assert cache.lookup(key) == entry


def test_a_cache_entry_removed_while_it_is_taken_is_a_miss(digits_model, digits_profiles, tmp_path, monkeypatch):
    """A cache cleaner (`find ~/.cache/compile -mtime +30 -delete`) or a concurrent eviction can remove an entry
    between its lookup and its hard links: the target is then built, not failed."""
    args, cache = (digits_model, digits_profiles, ["rtx-4090"], ["fp32"]), tmp_path / "cache"
    build_engines(*args, tmp_path / "a", options=BuildOptions(cache_dir=cache))
    link = compiler.engines.target.copy_file

    def cleaner_strikes(source: Path, target: Path) -> None:
        shutil.rmtree(source.parent)
        link(source, target)

    monkeypatch.setattr(compiler.engines.target, "copy_file", cleaner_strikes)
    [target] = build_engines(*args, tmp_path / "b", options=BuildOptions(cache_dir=cache)).targets
    assert (target.status, target.cache_hit) == ("ok", False)
    plan = (tmp_path / "b/rtx-4090/fp32/engine.plan").read_bytes()
    assert (
        json.loads((tmp_path / "b/rtx-4090/fp32/engine.json").read_text())["sha256"] == hashlib.sha256(plan).hexdigest()
    )
    monkeypatch.setattr(compiler.engines.target, "copy_file", link)
    assert (
        build_engines(*args, tmp_path / "c", options=BuildOptions(cache_dir=cache)).targets[0].cache_hit
    )  # stored again


def _put_in_place_repeatedly(target: Path, rounds: int) -> int:
    """One of several processes finishing the same target over and over; returns how many attempts failed."""
    failures = 0
    for i in range(rounds):
        with compiler.core.files.staging_folder(target.parent, target.name) as staging:
            (staging / "engine.plan").write_bytes(os.urandom(64))
            (staging / "engine.json").write_text(json.dumps({"writer": os.getpid(), "round": i}))
            try:
                compiler.core.files.replace_dir(target, staging)
            except OSError:
                failures += 1
    return failures


def test_runs_finishing_the_same_target_at_once_each_put_a_whole_folder_in_place(tmp_path):
    """Two CI jobs building into one shared OUT: every put-in-place succeeds, the target is always one whole
    folder, and nothing is left beside it (seen before: ENOTEMPTY failures and leftover `.fp32-old-*` folders)."""
    import multiprocessing

    target = tmp_path / "rtx-4090" / "fp32"
    target.parent.mkdir()
    with multiprocessing.get_context("fork").Pool(3) as pool:
        failures = pool.starmap(_put_in_place_repeatedly, [(target, 150)] * 3)
    assert failures == [0, 0, 0]
    assert sorted(p.name for p in target.iterdir()) == ["engine.json", "engine.plan"]
    assert [p.name for p in target.parent.iterdir()] == ["fp32"]


@pytest.mark.parametrize("refused", [False, True], ids=["put in place", "refused"])
def test_without_an_atomic_swap_the_previous_folder_goes_aside_and_comes_back_on_failure(
    tmp_path, monkeypatch, refused
):
    """Filesystems without RENAME_EXCHANGE (NFS): two renames, and a refused one puts the previous folder back."""

    def no_swap(first, second):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(compiler.core.files, "_exchange", no_swap)
    target, staging = tmp_path / "fp32", tmp_path / ".fp32-0123456789ab"
    for folder, text in ((target, "previous"), (staging, "new")):
        folder.mkdir()
        (folder / "engine.json").write_text(text)
    if not refused:
        compiler.core.files.replace_dir(target, staging)
        assert (target / "engine.json").read_text() == "new"
        assert [p.name for p in tmp_path.iterdir()] == ["fp32"]
        return
    rename, calls = os.rename, []

    def refusing(source, destination):
        calls.append(source)
        if Path(source) == staging and len(calls) > 1:  # the first try meets the previous folder (ENOTEMPTY)
            raise OSError(errno.EIO, "Input/output error")
        return rename(source, destination)

    monkeypatch.setattr(os, "rename", refusing)
    with pytest.raises(OSError, match="Input/output error"):
        compiler.core.files.replace_dir(target, staging)
    assert (target / "engine.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging.name, "fp32"]  # the staging folder is its caller's


def test_a_ci_log_gets_a_line_per_finished_target_and_unfolded_paths(tmp_path):
    """Not a terminal: no progress bars (which would show only at the end) but a line as each target ends, no
    escape codes, and a table wide enough that paths are not folded mid-word."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TERM")}
    out = tmp_path / "a-rather-long-folder-name-as-ci-runners-make-them" / "build"
    result = run_build(out, ("rtx-4090", "rtx-3090"), ("fp32",), "--cache-dir", tmp_path / "cache", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == ["rtx-4090 fp32: ok", "rtx-3090 fp32: ok"]
    assert "\x1b" not in result.stdout + result.stderr
    assert str(out / "rtx-4090" / "fp32") in result.stdout


def test_the_python_api_checks_what_the_cli_checks(digits_model, digits_profiles, tmp_path):
    """A library caller gets the same InvalidInput as the CLI's options would, not a TensorRT error or a build of
    something else; a single SKU or precision may be given as a plain string."""
    args = (digits_model, digits_profiles)
    for options, fragment in (
        ({"optimization_level": 9}, "--optimization-level 9: give 0 to 5"),
        ({"workspace_mb": -1}, "--workspace-mb -1: give 1 to 1048576"),
    ):
        with pytest.raises(InvalidInput, match=fragment):
            plan_builds(
                *args,
                ["rtx-4090"],
                ["fp32"],
                tmp_path / "out",
                options=BuildOptions(cache_dir=tmp_path / "cache", **options),
            )
    [target] = build_engines(
        *args, "rtx-4090", "fp32", tmp_path / "out", options=BuildOptions(cache_dir=tmp_path / "cache")
    ).targets
    assert (target.sku, target.precision, target.status) == ("rtx-4090", "fp32", "ok")


def test_layers_json_keeps_node_names_with_commas_brackets_and_spaces(tmp_path):
    """Exporters name nodes freely: the ONNX nodes a kernel covers come back whole, and constants (weights) are not
    counted among a kernel's inputs."""
    weights = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 1, 3, 3)).astype(np.float32), "w")
    names = ["conv, first [0]", "relu]x[y"]
    model = save_model(
        tmp_path / "odd.onnx",
        [
            helper.make_node("Conv", ["image", "w"], ["c"], name=names[0], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["out"], name=names[1]),
        ],
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4, 8, 8])],
        [weights],
    )
    profiles = tmp_path / "p.yaml"
    profiles.write_text(
        "profiles:\n  - name: p\n    shapes:\n      image: {min: [1, 1, 8, 8], opt: [2, 1, 8, 8], max: [4, 1, 8, 8]}\n"
    )
    [target] = build_engines(
        model, profiles, ["rtx-4090"], ["fp32"], tmp_path / "out", options=BuildOptions(cache_dir=tmp_path / "cache")
    ).targets
    assert target.status == "ok", target.errors
    layers = layers_of(tmp_path / "out", "rtx-4090", "fp32")
    assert set(names) <= {node for layer in layers for node in layer["onnx_nodes"]}, layers
    [conv] = [layer for layer in layers if names[0] in layer["onnx_nodes"]]
    assert conv["input_types"] == ["Float"] and conv["constant_types"] == ["Float"] and conv["precision"] == "Float"
