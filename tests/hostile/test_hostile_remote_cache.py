"""Hostile remote-cache entries and indexes (issue 39) on a cache that shares its place with a release store: each
case damages one entry (tests/hostile/generators/remote_cache.py) and runs the build or check that fetches it with
an empty local cache. The contract's oracle, and this family's own clauses: exit 0 (a damaged entry is one warning
and the work is made here), every blob the release names still there and whole, the release's files unchanged,
nothing written in the place but cache entries and blobs, and a plan in --out whose own header is of the rtx-4090
(SM89) and this TensorRT-RTX version."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from compiler.stores.base import holds
from compiler.stores.local import LocalStore
from tests.hostile import generators as g
from tests.hostile.generators.remote_cache import FILES, MUTATIONS, EntryDamage, Seeded, entry_damages
from tests.hostile.harness import Case, Expect, Sandbox, examples, run_cases
from tests.support.cli import CliResult, run_cli

SM89 = 0x8


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> tuple[Seeded, Path]:
    """A place holding digits@1.0.0 (rtx-4090 and rtx-3090 fp16, checked with golden inputs) and the cache entries
    its build and check sent there; and the build folder (a check case checks a copy of it)."""
    root = tmp_path_factory.mktemp("hostile-remote-cache")
    place, build, env = root / "place", root / "build", {"COMPILE_CACHE_DIR": str(root / "cache")}
    targets = ["--sku", "rtx-4090", "--sku", "rtx-3090", "--precision", "fp16"]
    steps = [
        ["build", g.DIGITS_MODEL, "--profiles", g.DIGITS_PROFILES, *targets, "--out", build, "--remote-cache", place],
        ["check", build, "--data", g.DIGITS_DATA, "--remote-cache", place],
        ["publish", build, "--store", place, "--name", "digits", "--version", "1.0.0"],
    ]
    for step in steps:
        result = run_cli(*step, env=env)
        assert result.exit_code == 0, result.stderr
    store = LocalStore(place)
    keys = {"prepared": store.entry_keys("prepared")[0], "check": store.entry_keys("checks")[0]}
    for key in store.entry_keys("engines"):
        index = json.loads(store.read_entry("engines", key))
        record = json.loads((place / "blobs" / "sha256" / index["files"]["engine.json"]["sha256"]).read_bytes())
        keys["engine" if record["sku"] == "rtx-4090" else "engine-3090"] = key
    manifest = json.loads((place / "releases" / "digits" / "1.0.0" / "manifest.json").read_bytes())
    return Seeded(place, keys, tuple(sorted(_blob_refs(manifest["content"])))), build


def _blob_refs(value: object) -> set[tuple[str, int]]:
    """(sha256, size_bytes) of every blob a manifest names."""
    found: set[tuple[str, int]] = set()
    if isinstance(value, dict):
        if isinstance(value.get("sha256"), str) and isinstance(value.get("size_bytes"), int):
            found.add((value["sha256"], value["size_bytes"]))
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found |= _blob_refs(item)
    return found


def _release_files(place: Path) -> dict[str, bytes]:
    return {str(p.relative_to(place)): p.read_bytes() for p in (place / "releases").rglob("*") if p.is_file()}


def _plan_problems(plan: Path) -> list[str]:
    """Why the plan in --out is not an rtx-4090 plan of this TensorRT-RTX version (its own header)."""
    import importlib.metadata

    if not plan.is_file():
        return [f"no {plan.name} in --out after exit 0"]
    head = plan.read_bytes()[:64]
    version = ".".join(str(b) for b in head[24:28])
    problems = []
    if struct.unpack_from("<Q", head, 32)[0] != SM89:
        problems.append(f"the plan in --out targets mask {struct.unpack_from('<Q', head, 32)[0]:#x}, not SM89")
    if version != importlib.metadata.version("tensorrt-rtx"):
        problems.append(f"the plan in --out is of TensorRT-RTX {version}")
    return problems


def test_hostile_remote_cache_entries(request, hostile_base, seeded):
    seed, build = seeded

    def setup(recipe: EntryDamage, box: Sandbox) -> Case:
        place = box.root / "place"
        shutil.copytree(seed.place, place, symlinks=True)
        recipe.apply(place, seed)
        box.writable.append(place)
        released, top = _release_files(place), set(p.name for p in place.iterdir())
        if recipe.entry == "check":
            box.out.mkdir()
            shutil.copytree(build, box.out / "build", symlinks=True)
            args = ["check", box.out / "build", "--data", g.DIGITS_DATA, "--remote-cache", place, "--json"]
        else:
            args = ["build", g.DIGITS_MODEL, "--profiles", g.DIGITS_PROFILES, "--sku", "rtx-4090"]
            args += ["--precision", "fp16", "--out", box.out, "--remote-cache", place, "--json"]

        def after(result: CliResult) -> list[str]:
            store = LocalStore(place)
            problems = [
                f"blob {sha[:12]} of the release is gone or damaged"
                for sha, size in seed.release_blobs
                if not holds(store, "", sha, size)
            ]
            if _release_files(place) != released:
                problems.append("the release's files changed")
            problems += [f"{name} appeared in the place" for name in set(p.name for p in place.iterdir()) - top]
            if result.exit_code == 0 and recipe.entry != "check":
                problems += _plan_problems(box.out / "rtx-4090" / "fp16" / "engine.plan")
            return problems

        expect = Expect(frozenset({0}), "a damaged remote entry is a warning and the work is made here")
        return Case(args, expect, json_output=True, prints_report_on_error=True, after=after)

    must = [
        EntryDamage("prepared", "size", "fp16.onnx", 3, b""),
        EntryDamage("engine", "size", "engine.plan", -1, b""),
        EntryDamage("engine", "digest", "engine.plan", 0, b""),
        EntryDamage("engine", "other-gpu", "engine.plan", 0, b""),
        EntryDamage("engine", "other-version", "engine.plan", 0, b""),
        EntryDamage("engine", "truncate", "build.log", 1, b""),
        EntryDamage("prepared", "extend", "fp16.onnx", 0, b"\x00" * 7),
        EntryDamage("check", "size", "golden.npz", 3, b""),
        EntryDamage("check", "garbage-index", "check.json", 1, b""),
        EntryDamage("engine", "garbage-record", "engine.json", 0, b"\xff{not json"),
    ]
    assert {m.mutation for m in must} == set(MUTATIONS) and {m.file for m in must} <= {
        f for v in FILES.values() for f in v
    }
    run_cases(request.node.name, "remote-cache", entry_damages, setup, hostile_base, must)
    assert examples("remote-cache") >= 1
