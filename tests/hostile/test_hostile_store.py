"""Hostile inputs to the store commands (`compile publish`, `pull`, `ls`, `promote`) through the real CLI, held to
the same contract as the rest of tests/hostile (harness.py), plus the store's own clauses:

- a refused publish leaves the store as it was (exit 2: not even created; exit 1: no release visible);
- a refused pull writes nothing to --out (no plan, no record, no ``*.partial``), and a pull that succeeds
  wrote the bytes of the digest the release records;
- a promote that fails leaves the store byte for byte as it was; pull and ls never change it (their store is
  under in/, which the harness holds unchanged);
- names in a store that are not valid names (upper case, ``..``, dot files, control characters, links) are
  ignored by ls, never listed nor followed.

Two families here: damaged build folders given to publish (``BUILD_DAMAGE``) and damaged local store contents
given to pull/ls/promote (``STORE_DAMAGE`` x ``STORE_COMMANDS``); hostile option values are in
test_hostile_store_options.py. Every damage has an explicit case (the MUST lists); hypothesis draws a few more
combinations.

    PYTHONPATH=. python -m pytest -q tests/hostile/test_hostile_store.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from tests.hostile import generators as g
from tests.hostile.harness import Case, Expect, Sandbox, run_cases
from tests.hostile.store_support import CHANNEL, NAME, OTHER, SKU, VERSION, codes, json_flag, tree_kept
from tests.support.cli import CliResult

HUGE = (64 << 20) + 4096
"""Past the 64 MiB any record may have (record_files.MAX_RECORD_BYTES); made sparse, so it costs no disk."""


def _edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_bytes())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _replace(path: Path, how: str, box: Sandbox, data: bytes = b"") -> None:
    """Put something hostile where ``path`` was: a FIFO, a folder, a link to a FIFO outside, bytes, a sparse
    file past the record limit."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if how == "fifo":
        g.make_fifo(path)
    elif how == "directory":
        path.mkdir()
    elif how == "link-out":
        target = box.outside / f"fifo-{len(list(box.outside.iterdir()))}"
        g.make_fifo(target)
        path.symlink_to(target)
    elif how == "bytes":
        path.write_bytes(data)
    elif how == "huge":
        with open(path, "wb") as handle:
            handle.write(data)
            handle.truncate(HUGE)
    elif how != "missing":
        raise ValueError(how)


def _manifests(store: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(store)) for p in (store / "releases").glob("*/*/manifest.json"))
        if store.is_dir()
        else []
    )


# --- publish: hostile build folders ----------------------------------------------------------------------------

TARGET = Path(SKU) / "fp16"


def _build_replacements(build: Path) -> dict[str, tuple[Path, str, bytes]]:
    """Damages that put one hostile thing (see _replace) where a file of the build folder was: kind -> (path, how,
    bytes)."""
    target, record, check = build / TARGET, build / "build.json", build / "check.json"
    engine, plan = target / "engine.json", target / "engine.plan"
    return {
        "not-a-folder": (build, "bytes", b"not a folder\n"),
        "build.json-missing": (record, "missing", b""),
        "build.json-garbage": (record, "bytes", b"\x00\xff{not json"),
        "build.json-empty": (record, "bytes", b""),
        "build.json-nested": (record, "bytes", b"[" * 100_000),
        "build.json-huge": (record, "huge", record.read_bytes()),
        "build.json-fifo": (record, "fifo", b""),
        "build.json-link-out": (record, "link-out", b""),
        "engine.json-missing": (engine, "missing", b""),
        "engine.json-garbage": (engine, "bytes", b'{"format_version": 3, "sha256": '),
        "engine.json-fifo": (engine, "fifo", b""),
        "plan-missing": (plan, "missing", b""),
        "plan-fifo": (plan, "fifo", b""),
        "plan-link-out": (plan, "link-out", b""),
        "plan-directory": (plan, "directory", b""),
        # same size: only the digest tells, while the blob is sent
        "plan-other-bytes": (plan, "bytes", g.flip_bits(plan.read_bytes(), [(4000, 1)])),
        "layers.json-garbage": (target / "layers.json", "bytes", b"\xff\xfe"),
        "layers.json-fifo": (target / "layers.json", "fifo", b""),
        "check.json-garbage": (check, "bytes", b"check: passed\n"),
        "check.json-fifo": (check, "fifo", b""),
        "check.json-directory": (check, "directory", b""),
        "check.json-absent": (check, "missing", b""),  # optional: publishes without a check
    }


def _of_target(change: Callable[[dict], object]) -> Callable[[dict], object]:
    """A change of build.json's target of SKU."""
    return lambda d: change(next(t for t in d["targets"] if t["sku"] == SKU))


def _build_edits(build: Path) -> dict[str, tuple[Path, Callable[[dict], object]]]:
    """Damages that edit one JSON record of the build folder: kind -> (path, change)."""
    record, engine, check = build / "build.json", build / TARGET / "engine.json", build / "check.json"
    return {
        "build.json-format": (record, lambda d: d.update(format_version=2)),
        "targets-none": (record, lambda d: d.update(targets=[])),
        "target-failed": (record, _of_target(lambda t: t.update(status="failed", errors=["the builder failed"]))),
        "target-twice": (record, lambda d: d["targets"].append(dict(d["targets"][-1]))),
        "sku-dotdot": (record, _of_target(lambda t: t.update(sku="../x"))),
        "sku-nul": (record, _of_target(lambda t: t.update(sku="rtx\x004090"))),
        "sku-escape": (record, _of_target(lambda t: t.update(sku="rtx\x1b[2J\nerror: forged"))),
        "sku-long": (record, _of_target(lambda t: t.update(sku="x" * 5000))),
        "precision-absolute": (record, _of_target(lambda t: t.update(precision="/etc/passwd"))),
        "engine.json-other-sku": (engine, lambda d: d.update(sku="rtx-3090")),
        "engine.json-other-model": (engine, lambda d: d.update(model_sha256="0" * 64)),
        "engine.json-digest-traversal": (engine, lambda d: d.update(sha256="../../../outside/x")),
        "check.json-format": (check, lambda d: d.update(format_version=99)),
        "check.json-failed": (check, lambda d: d.update(passed=False, status="failed")),
    }


def _build_damage(kind: str, build: Path, box: Sandbox) -> Path:
    """Damage the copy of the build folder; returns the BUILD_DIR to publish."""
    replacements, edits = _build_replacements(build), _build_edits(build)
    if kind == "missing":
        return build.with_name("no-such-build")
    if kind in replacements:
        path, how, data = replacements[kind]
        _replace(path, how, box, data)
    elif kind in edits:
        _edit_json(*edits[kind])
    elif kind == "sku-absolute":
        g.make_fifo(box.outside / "fp16" / "engine.json")
        _edit_json(build / "build.json", _of_target(lambda t: t.update(sku=str(box.outside))))
    elif kind == "plan-longer":
        with open(build / TARGET / "engine.plan", "ab") as handle:
            handle.write(b"\0")
    elif kind == "target-link-out":
        shutil.copytree(build / SKU, box.outside / SKU)
        _replace(box.outside / TARGET / "engine.plan", "fifo", box)
        shutil.rmtree(build / SKU)
        (build / SKU).symlink_to(box.outside / SKU)
    elif kind != "intact":
        raise ValueError(kind)
    return build


BUILD_DAMAGE: dict[str, tuple[frozenset[int], tuple[str, ...]]] = {
    "not-a-folder": (codes(2), ("build",)),
    "missing": (codes(2), ("no-such-build",)),
    **{
        f"build.json-{k}": (codes(2), ("build.json",))
        for k in ("missing", "garbage", "empty", "format", "nested", "huge", "fifo", "link-out")
    },
    "targets-none": (codes(1, 2), ()),
    "target-failed": (codes(1), ()),
    "target-twice": (codes(2), ("build.json",)),
    "sku-dotdot": (codes(2), ("build.json", "../x")),
    "sku-absolute": (codes(2), ("build.json",)),
    "sku-nul": (codes(2), ("build.json",)),
    "sku-escape": (codes(2), ("build.json", "not a SKU name")),
    "sku-long": (codes(2), ("build.json", "not a SKU name")),
    "precision-absolute": (codes(2), ("build.json",)),
    **{
        f"engine.json-{k}": (codes(2), ("engine.json",))
        for k in ("missing", "garbage", "fifo", "other-sku", "other-model")
    },
    "engine.json-digest-traversal": (codes(2), ("engine.json", "digest")),
    "plan-missing": (codes(1), ("engine.plan", "missing")),
    **{f"plan-{k}": (codes(2), ("engine.plan",)) for k in ("fifo", "link-out", "directory", "longer")},
    "plan-other-bytes": (codes(1), ()),
    "target-link-out": (codes(2), (SKU,)),
    **{f"layers.json-{k}": (codes(2), ("layers.json",)) for k in ("garbage", "fifo")},
    **{f"check.json-{k}": (codes(2), ("check.json",)) for k in ("garbage", "format", "fifo", "directory")},
    "check.json-failed": (codes(1), ()),
    "check.json-absent": (codes(0), ()),
    "intact": (codes(0), ()),
}
"""Issue 21 (compiler/releases/publish.py through compiler/engines/folder.py): the folder is read and verified before
anything is sent: not a build folder, a record damaged, foreign, of another format or version, a plan that is not a
regular file inside the folder, or not the size engine.json records: exit 2 naming the file. A failed or missing
target (no engine.plan) or check, or a folder with nothing built, is a failed gate (1). A plan of the recorded size
but other bytes is found while it is sent (1) and leaves no release. check.json is optional."""


@dataclass(frozen=True)
class BuildCase:
    damage: str
    json_output: bool


def test_publish_damaged_build_folders(request, hostile_base, store_build):
    def setup(recipe: BuildCase, box: Sandbox) -> Case:
        build = box.inputs / "build"
        shutil.copytree(store_build, build, symlinks=True)
        build_dir = _build_damage(recipe.damage, build, box)
        store = box.out / "store"
        expected, names = BUILD_DAMAGE[recipe.damage]
        kept = tree_kept(box.out)

        def after(result: CliResult) -> list[str]:
            if result.exit_code == 0:
                return (
                    []
                    if _manifests(store) == [f"releases/{NAME}/{VERSION}/manifest.json"]
                    else [f"exit 0 but the store holds {_manifests(store)}"]
                )
            if result.exit_code == 2:  # refused before the store was opened
                return kept()
            return [f"a refused publish left a release: {_manifests(store)}"] if _manifests(store) else []

        args = [
            "publish",
            build_dir,
            "--store",
            store,
            "--name",
            NAME,
            "--version",
            VERSION,
            *json_flag(recipe.json_output),
        ]
        return Case(
            args,
            Expect(expected, f"{recipe.damage} build folder", names),
            recipe.json_output,
            reports_failures=False,
            after=after,
        )

    must = [BuildCase(damage, json_output=index % 3 == 0) for index, damage in enumerate(BUILD_DAMAGE)]
    strategy = st.builds(BuildCase, st.sampled_from(sorted(BUILD_DAMAGE)), st.booleans())
    run_cases(request.node.name, "store-builds", strategy, setup, hostile_base, must)


# --- pull, ls, promote: hostile store contents -----------------------------------------------------------------

STORE_COMMANDS = ("pull-version", "pull-channel", "ls", "ls-name", "ls-version", "promote-new", "promote-move")
"""pull digits@1.0.0 / digits@stable; ls; ls digits; ls digits@1.0.0; promote digits@1.0.0 to a new channel
(beta); promote digits@1.0.1 to stable (moving it)."""

READS = {
    "manifest": {"pull-version", "pull-channel", "ls-name", "ls-version", "promote-new"},
    "release": {"pull-version", "pull-channel", "ls-name", "ls-version", "promote-new", "promote-move"},
    "releases": set(STORE_COMMANDS),
    "blob": {"pull-version", "pull-channel"},
    "channel": {"pull-channel", "ls", "ls-name", "promote-move"},
    "nothing": set(),
}
"""Which commands read which part of the store: the ones that must refuse a damaged part; the others must not care."""


def _blob_digest(store: Path) -> str:
    manifest = json.loads((store / "releases" / NAME / VERSION / "manifest.json").read_bytes())
    return next(e["plan"]["sha256"] for e in manifest["content"]["engines"] if e["sku"] == SKU)


def _other_blob(store: Path, digest: str) -> Path:
    return next(p for p in sorted((store / "blobs" / "sha256").iterdir()) if p.name != digest)


def _writable(path: Path) -> Path:
    path.chmod(0o644)
    return path


BAD_NAMES = ("a..b", ".hidden", "-lead", "trail-", "evil\x1b[2J", "line\nbreak", "sp ace", "x" * 70)
"""Entries no valid release name, version or channel has: ls must skip them (and "UPPER" where a release name or a
channel would be: versions may have capitals)."""


def _odd_names(kind: str, store: Path, box: Sandbox) -> tuple[str, ...]:
    """Entries with names no release, version or channel has, links out, and what a killed publisher leaves: the
    names ls must not print."""
    other = store / "releases" / NAME / OTHER / "manifest.json"
    channel = store / "channels" / NAME / CHANNEL
    if kind == "bad-names":
        for bad in (*BAD_NAMES, "UPPER"):
            folders = [store / "releases" / bad / VERSION] + (
                [store / "releases" / NAME / bad] if bad != "UPPER" else []
            )
            for folder in folders:
                folder.mkdir(parents=True)
                shutil.copyfile(other, folder / "manifest.json")
            shutil.copyfile(channel, store / "channels" / NAME / bad)
        make = box.outside / "linked" / VERSION
        make.mkdir(parents=True)
        g.make_fifo(make / "manifest.json")
        (store / "releases" / "linked").symlink_to(box.outside / "linked")  # a valid name, but a link out
        (store / "releases" / NAME / "2.0.0").symlink_to(box.outside / "linked" / VERSION)
        g.make_fifo(box.outside / "channel")
        (store / "channels" / NAME / "linked").symlink_to(box.outside / "channel")
        return (*BAD_NAMES, "UPPER", "linked", "2.0.0")
    elif kind == "unfinished-version":  # what a publisher killed before its manifest leaves in a local store
        folder = store / "releases" / NAME / "3.0.0"
        folder.mkdir()
        (folder / ".manifest.json.4242.0badc0de.partial").write_bytes(other.read_bytes()[:100])
        (store / "releases" / "ghost" / "0.1").mkdir(parents=True)
        return ("3.0.0", "ghost")
    return ()


def _store_replacements(store: Path) -> dict[str, tuple[Path, str, bytes]]:
    """Damages that put one hostile thing (see _replace) where a manifest, blob or channel was: kind -> (path, how,
    bytes)."""
    manifest = store / "releases" / NAME / VERSION / "manifest.json"
    other = store / "releases" / NAME / OTHER / "manifest.json"
    blob = store / "blobs" / "sha256" / _blob_digest(store)
    channel = store / "channels" / NAME / CHANNEL
    return {
        "manifest-garbage": (manifest, "bytes", b"\x00\x01garbage\xff"),
        "manifest-truncated": (manifest, "bytes", manifest.read_bytes()[:500]),
        "manifest-empty": (manifest, "bytes", b""),
        "manifest-other-release": (manifest, "bytes", other.read_bytes()),
        "manifest-nested": (manifest, "bytes", b'{"a":' * 50_000),
        "manifest-huge": (manifest, "huge", manifest.read_bytes()),
        "manifest-link-out": (manifest, "link-out", b""),
        "manifest-fifo": (manifest, "fifo", b""),
        "manifest-directory": (manifest, "directory", b""),
        "blob-missing": (blob, "missing", b""),
        "blob-other-bytes": (blob, "bytes", g.flip_bits(blob.read_bytes(), [(1000, 3)])),
        "blob-truncated": (blob, "bytes", blob.read_bytes()[:100]),
        "blob-link-out": (blob, "link-out", b""),
        "blob-fifo": (blob, "fifo", b""),
        "blob-directory": (blob, "directory", b""),
        "channel-garbage": (channel, "bytes", b"1.0.0\n"),
        "channel-fifo": (channel, "fifo", b""),
        "channel-link-out": (channel, "link-out", b""),
        "channel-directory": (channel, "directory", b""),
    }


def _store_edits(store: Path) -> dict[str, tuple[Path, Callable[[dict], object]]]:
    """Damages that edit one JSON record of the store: kind -> (path, change)."""
    manifest = store / "releases" / NAME / VERSION / "manifest.json"
    channel = store / "channels" / NAME / CHANNEL
    digest = _blob_digest(store)

    def swap_plan(d: dict) -> None:  # the plan swapped for another blob, content_sha256 left as it was
        engine = next(e for e in d["content"]["engines"] if e["sku"] == SKU)
        engine["plan"].update(sha256=_other_blob(store, digest).name)

    return {
        "manifest-edited": (manifest, swap_plan),
        "manifest-format": (manifest, lambda d: d.update(format_version=99)),
        "channel-missing-version": (channel, lambda d: d.update(version="9.9.9")),
        "channel-bad-version": (channel, lambda d: d.update(version="../../releases/x")),
        "channel-of-another": (channel, lambda d: d.update(channel="beta")),
    }


def _store_damage(kind: str, store: Path, box: Sandbox) -> tuple[str, ...]:
    """Damage the copy of the store; returns strings ls must not print (names it must ignore)."""
    manifest = store / "releases" / NAME / VERSION / "manifest.json"
    digest = _blob_digest(store)
    blob = store / "blobs" / "sha256" / digest
    if kind.startswith("manifest-"):
        _writable(manifest)
    if kind.startswith("blob-"):
        _writable(blob)
    replacements, edits = _store_replacements(store), _store_edits(store)
    if kind in replacements:
        path, how, data = replacements[kind]
        _replace(path, how, box, data)
    elif kind in edits:
        _edit_json(*edits[kind])
    elif kind == "manifest-link-in":  # to a manifest of the store, another version's
        _replace(manifest, "missing", box)
        manifest.symlink_to(Path("..") / OTHER / "manifest.json")
    elif kind == "release-link-out":
        shutil.copytree(store / "releases" / NAME, box.outside / NAME)
        _replace(box.outside / NAME / VERSION / "manifest.json", "fifo", box)
        _replace(box.outside / NAME / OTHER / "manifest.json", "fifo", box)
        shutil.rmtree(store / "releases" / NAME)
        (store / "releases" / NAME).symlink_to(box.outside / NAME)
    elif kind == "releases-link-out":
        (box.outside / "releases").mkdir()
        shutil.rmtree(store / "releases")
        (store / "releases").symlink_to(box.outside / "releases")
    elif kind == "blob-link-in":  # to another blob of the store
        _replace(blob, "missing", box)
        blob.symlink_to(_other_blob(store, digest).name)
    elif kind in ("bad-names", "unfinished-version"):
        return _odd_names(kind, store, box)
    elif kind != "intact":
        raise ValueError(kind)
    return ()


STORE_DAMAGE: dict[str, tuple[str, frozenset[int]]] = {
    **{
        f"manifest-{k}": ("manifest", codes(1))
        for k in (
            "garbage",
            "truncated",
            "empty",
            "other-release",
            "edited",
            "format",
            "nested",
            "huge",
            "fifo",
            "directory",
        )
    },
    "manifest-link-out": ("manifest", codes(1, 2)),
    "manifest-link-in": ("manifest", codes(1, 2)),
    "release-link-out": ("release", codes(1, 2)),
    "releases-link-out": ("releases", codes(1, 2)),
    **{f"blob-{k}": ("blob", codes(1)) for k in ("missing", "other-bytes", "truncated", "fifo", "directory")},
    "blob-link-in": ("blob", codes(1, 2)),
    "blob-link-out": ("blob", codes(1, 2)),
    **{f"channel-{k}": ("channel", codes(1)) for k in ("garbage", "bad-version", "of-another", "fifo", "directory")},
    "channel-link-out": ("channel", codes(1, 2)),
    "channel-missing-version": ("channel", codes(1)),
    "bad-names": ("nothing", codes()),
    "unfinished-version": ("nothing", codes()),
    "intact": ("nothing", codes()),
}
"""Damage -> (the part it hits, the codes a command reading that part may exit with). Issue 21 (compiler/releases.py):
a store's contents are not the user's input but evidence: a manifest, channel or blob that is not whole,
not ours, not what its key says or not a regular file is refused as damaged (exit 1, naming the key; a blob by
its digest), never followed out of the store (2 is allowed for a link leading out, which is refused as such) and
never blocks (FIFOs). Commands that do not read the damaged part succeed. A channel at a version without a manifest
is damaged for a pull through it; promoting it elsewhere repairs it."""

EXCEPTIONS = {
    ("channel-missing-version", "ls"): codes(0),
    ("channel-missing-version", "ls-name"): codes(0),
    ("channel-missing-version", "promote-move"): codes(0),
    ("release-link-out", "ls"): codes(0),
    **{(f"channel-{kind}", command): codes(0, 1) for kind in ("fifo", "link-out") for command in ("ls", "ls-name")},
}
"""Commands that read the damaged part and still succeed: ls shows where a channel points without reading that
manifest; promote moves a channel off a missing version; ls skips a release or channel that is a link or a FIFO
(no listing follows one)."""


def _listed(stdout: str, json_output: bool) -> str:
    """What ls listed: its table, or its JSON without ``skipped`` (where it names, on purpose, what it did not
    follow)."""
    if not json_output:
        return stdout
    try:
        listing = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(listing, dict):
        listing.pop("skipped", None)
    return json.dumps(listing)


def _store_codes(damage: str, command: str) -> frozenset[int]:
    part, expected = STORE_DAMAGE[damage]
    if (damage, command) in EXCEPTIONS:
        return EXCEPTIONS[(damage, command)]
    return expected if command in READS[part] else codes(0)


@dataclass(frozen=True)
class StoreCase:
    damage: str
    command: str
    json_output: bool


def _store_args(command: str, store: Path, out: Path) -> list[str]:
    return {
        "pull-version": ["pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", out, "--no-cache"],
        "pull-channel": ["pull", f"{NAME}@{CHANNEL}", "--sku", SKU, "--out", out],
        "ls": ["ls"],
        "ls-name": ["ls", NAME],
        "ls-version": ["ls", f"{NAME}@{VERSION}"],
        "promote-new": ["promote", f"{NAME}@{VERSION}", "--channel", "beta"],
        "promote-move": ["promote", f"{NAME}@{OTHER}", "--channel", CHANNEL],
    }[command] + ["--store", store]


def test_store_contents(request, hostile_base, store_template):
    def setup(recipe: StoreCase, box: Sandbox) -> Case:
        promoting = recipe.command.startswith("promote")
        store = (box.out if promoting else box.inputs) / "store"  # pull and ls: an input the harness holds fixed
        shutil.copytree(store_template, store, symlinks=True)
        digest = _blob_digest(store)
        ignored = _store_damage(recipe.damage, store, box)
        box.out.mkdir(exist_ok=True)
        out = box.out / "digits.plan"
        kept_store, kept_out = tree_kept(store), tree_kept(box.out)

        def after(result: CliResult) -> list[str]:
            problems = []
            if recipe.command.startswith("pull"):
                if result.exit_code != 0:
                    problems += kept_out()
                elif hashlib.sha256(out.read_bytes()).hexdigest() != digest:
                    problems.append(f"exit 0 but {out.name} is not the blob sha256:{digest}")
            if promoting and result.exit_code != 0:
                problems += kept_store()
            if recipe.command.startswith("ls") and result.exit_code == 0:
                listed = _listed(result.stdout, recipe.json_output)
                shown = [bad for bad in ignored if bad in listed or json.dumps(bad)[1:-1] in listed]
                if shown:
                    problems.append(f"ls listed names it must ignore: {shown}")
            return problems

        codes = _store_codes(recipe.damage, recipe.command)
        args = [*_store_args(recipe.command, store, out), *json_flag(recipe.json_output)]
        names = ("manifest", "channel", "blob", "store", "releases", digest)
        return Case(
            args,
            Expect(codes, f"{recipe.damage} store, {recipe.command}", names),
            recipe.json_output,
            reports_failures=False,
            after=after,
        )

    must = []
    for index, damage in enumerate(STORE_DAMAGE):  # each damage read by two commands (FIFOs and links by all)
        part = STORE_DAMAGE[damage][0]
        commands = sorted(READS[part]) if part != "nothing" else ["ls", "ls-name", "pull-channel", "promote-move"]
        if part != "nothing" and not damage.endswith(("fifo", "link-out")):
            commands = [commands[(index + k) % len(commands)] for k in range(min(2, len(commands)))]
        must += [StoreCase(damage, command, json_output=(index + i) % 2 == 0) for i, command in enumerate(commands)]
    strategy = st.builds(
        StoreCase, st.sampled_from(sorted(STORE_DAMAGE)), st.sampled_from(STORE_COMMANDS), st.booleans()
    )
    run_cases(request.node.name, "store-contents", strategy, setup, hostile_base, must)


# --- hostile option values -------------------------------------------------------------------------------------
