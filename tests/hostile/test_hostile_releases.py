"""Hostile inputs after the build (issue 29), through the real CLI, held to the contract of tests/hostile
(harness.py) plus each family's own clauses:

- ``store-values``: a local store whose manifest holds a hostile value (re-signed: its content digest matches, so
  only the value's own check can refuse it) or whose channel or lock file is hostile, given to ls, ls --verify,
  pull, promote and export. A refused command leaves the store and --out as they were; a pull that succeeds
  wrote the digest's bytes; nothing is written outside the Triton repository.
- ``registry-answers``: a hostile registry (tests/support/hostile_registry.py) in front of the real one answers one
  request with nested JSON, an endless body, a bad Content-Length, a paging loop...; ls, pull and ls --verify
  must answer exit 1 (damage) or 3 (a registry the tool cannot use), bounded, and a pull that succeeds is
  verified.
- ``pipeline-yaml``: generated pipeline files (version scalars YAML reads as other types, alias bombs, precisions
  twice, unknown backends) given to ``compile plan``: exit 0 exactly when the documented rules accept the file,
  else 2, in bounded time and memory.
- ``export-targets``: hostile things standing in the Triton model repository (links out, FIFOs, folders where
  files go, other content) and hostile --model-name values.

    PYTHONPATH=. python -m pytest -q tests/hostile/test_hostile_releases.py
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st

from compiler.core.files import hash_json
from tests.hostile import generators as g
from tests.hostile.harness import Case, Expect, Sandbox, run_cases, snapshot, snapshot_changes
from tests.support.cli import CliResult, run_cli
from tests.support.hostile_registry import Answer, endless, hostile_registry, nested
from tests.support.registry import environment_without_credentials
from tests.support.serving import datacenter_copy

NAME, VERSION, OTHER, CHANNEL, SKU = "digits", "1.0.0", "1.0.1", "stable", "rtx-4090"
TRITON = ("--triton-release", "25.10")
"""The Triton release served (its TensorRT 10.11 loads the datacenter stand-in plans)."""


def _codes(*codes: int) -> frozenset[int]:
    return frozenset(codes)


def _json(flag: bool) -> list[str]:
    return ["--json"] if flag else []


def _kept(root: Path):
    """A check that ``root`` is as it is now, but for lock files (an export's stays: removing a lock would race)."""
    before = snapshot(root, []) if root.is_dir() else {}

    def check() -> list[str]:
        changes = [
            c
            for c in snapshot_changes(before, snapshot(root, []) if root.is_dir() else {})
            if not c.split(" ")[0].endswith(".lock")
        ]
        return [f"{root.name}/ changed: {changes[:6]}"] if changes else []

    return check


# --- store values ---------------------------------------------------------------------------------------------

NESTED = "[" * 10_000 + "]" * 10_000
"""JSON nested 10,000 deep, written as text (Python's json cannot write it)."""


def _set(content: dict, dotted: str, value: object) -> None:
    *path, last = dotted.split(".")
    for part in path:
        content = content[int(part)] if part.isdigit() else content[part]
    content[int(last) if isinstance(content, list) else last] = value


def _resign(manifest: Path, store: Path, kind: str) -> None:
    """Put the value ``kind`` names into the manifest's content (``engines.0``: the engine a pull for SKU gets)
    and recompute content_sha256."""
    data = json.loads(manifest.read_bytes())
    dotted, value = g.MANIFEST_VALUES[kind]
    engines = data["content"]["engines"]
    pulled = next(index for index, engine in enumerate(engines) if engine["sku"] == SKU)
    dotted = dotted.replace("engines.0.", f"engines.{pulled}.")
    if value == "@other":  # a blob of another size (a plan of the same size re-signed in is a signature's job)
        value = next(
            p.name
            for p in sorted((store / "blobs" / "sha256").iterdir())
            if p.stat().st_size != engines[pulled]["plan"]["size_bytes"]
        )
    elif value == "@many":
        value = [dict(engines[pulled], sku=f"sku-{i}") for i in range(20_000)]
    _set(data["content"], dotted, value)
    if value != "@nested":  # nested 10,000 deep, which no JSON library of Python can hash or write: unsigned
        data["content_sha256"] = hash_json(data["content"])
    manifest.chmod(0o644)
    manifest.write_text(json.dumps(data).replace('"@nested"', NESTED))


STORE_EXTRA = {
    "channel-history-huge": "nothing",
    "channel-history-nested": "channel",
    "lock-link-out": "lock",
    "lock-fifo": "lock",
    "lock-directory": "lock",
    "stray-partial": "nothing",
}
"""Damage besides manifest values: a channel whose history is 200,000 moves (16 MB: still read; a promote keeps
the latest 10,000) or nested deep, a promote lock that is
a link out, a FIFO or a folder, a stale ``.partial`` a killed publisher left (harmless)."""
VALUE_KINDS = sorted(g.MANIFEST_VALUES) + sorted(STORE_EXTRA)
STORE_COMMANDS = ("ls", "ls-name", "ls-version", "verify", "pull", "promote", "export")
MANIFEST_READERS = ("ls-name", "ls-version", "verify", "pull", "export")
VALUE_CODES: dict[str, dict[str, frozenset[int]]] = {
    "size-zero": {"pull": _codes(1), "export": _codes(1), "verify": _codes(1)},
    "sha-other-blob": {"pull": _codes(1), "export": _codes(1), "verify": _codes(1)},
    "cc-empty": {"pull": _codes(2)},  # an engine for no GPU: never picked, so rtx-4090 has none
    "engines-empty": {"pull": _codes(2), "export": _codes(2)},
    "engines-many": {"pull": _codes(2)},  # 20,000 engines for 8.9, none named rtx-4090: which one?
}
"""Manifest values the records accept, and what each command makes of them (unlisted: exit 0): a blob that is not
what the manifest says is found by whoever reads it (1); a release without an engine for the GPU is the user's
ask that cannot be met (2). Every other value is refused by the record (exit 1, damaged) by every reader."""


def _damage(kind: str, store: Path, box: Sandbox) -> str:
    """Damage the copy of the store; returns the part it hits (manifest, channel, lock, nothing)."""
    channel = store / "channels" / NAME / CHANNEL
    if kind in g.MANIFEST_VALUES:
        _resign(store / "releases" / NAME / VERSION / "manifest.json", store, kind)
        return "manifest"
    if kind.startswith("channel-"):
        record = json.loads(channel.read_bytes())
        move = record["history"][0]
        record["history"] = [move] * 200_000 if kind == "channel-history-huge" else "@nested"
        channel.write_text(json.dumps(record).replace('"@nested"', NESTED))
    lock = store / "channels" / NAME / f".{CHANNEL}.lock"
    lock.unlink(missing_ok=True)
    if kind == "lock-link-out":
        lock.symlink_to(box.outside / "created-by-lock")
    elif kind == "lock-fifo":
        os.mkfifo(lock)
    elif kind == "lock-directory":
        lock.mkdir()
    elif kind == "stray-partial":
        (store / "blobs" / "sha256" / ".0000.4242.abcd.partial").write_bytes(b"half")
    return STORE_EXTRA[kind]


def _value_codes(kind: str, part: str, command: str) -> frozenset[int]:
    reads_manifest = command in MANIFEST_READERS
    if part == "manifest":
        if kind in VALUE_CODES:
            return VALUE_CODES[kind].get(command, _codes(0))
        return _codes(1) if reads_manifest else _codes(0)
    if part == "channel":  # nested past reading: damaged
        return _codes(1) if command in ("ls", "ls-name", "verify", "promote") else _codes(0)
    if part == "lock":
        return _codes(1) if command == "promote" else _codes(0)
    return _codes(0)


@dataclass(frozen=True)
class ValueCase:
    kind: str
    command: str
    json_output: bool


@pytest.fixture(scope="module")
def served_template(store_build, tmp_path_factory) -> Path:
    """A local store like conftest's store_template (digits@1.0.0 and 1.0.1, stable at 1.0.0) of datacenter
    TensorRT stand-ins of the build (tests/support/serving.py): what Triton serves, so export runs too."""
    root = tmp_path_factory.mktemp("served")
    build, store = datacenter_copy(store_build, root / "build"), root / "store"
    for version in (VERSION, OTHER):
        assert run_cli("publish", build, "--store", store, "--name", NAME, "--version", version).exit_code == 0
    assert run_cli("promote", f"{NAME}@{VERSION}", "--channel", CHANNEL, "--store", store).exit_code == 0
    return store


def test_store_values(request, hostile_base, served_template):
    def setup(recipe: ValueCase, box: Sandbox) -> Case:
        writes = recipe.command == "promote"
        store = (box.out if writes else box.inputs) / "store"
        shutil.copytree(served_template, store, symlinks=True)
        part = _damage(recipe.kind, store, box)
        box.out.mkdir(exist_ok=True)
        out, repo = box.out / "digits.plan", box.out / "repo"
        repo.mkdir()
        kept_store, kept_out = _kept(store), _kept(box.out)
        args = {
            "ls": ["ls"],
            "ls-name": ["ls", NAME],
            "ls-version": ["ls", f"{NAME}@{VERSION}"],
            "verify": ["ls", "--verify"],
            "pull": ["pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", out],
            "promote": ["promote", f"{NAME}@{OTHER}", "--channel", CHANNEL],
            "export": ["export", "triton", f"{NAME}@{VERSION}", "--repo", repo, *TRITON],
        }[recipe.command]

        def after(result: CliResult) -> list[str]:
            problems = []
            if result.exit_code != 0:
                problems += kept_out() if not writes else kept_store()
            elif recipe.command == "pull":
                manifest = json.loads((store / "releases" / NAME / VERSION / "manifest.json").read_bytes())["content"]
                digest = next(e["plan"]["sha256"] for e in manifest["engines"] if e["sku"] == SKU)
                if hashlib.sha256(out.read_bytes()).hexdigest() != digest:
                    problems.append("exit 0 but the pulled plan is not the blob of its digest")
            return problems

        codes = _value_codes(recipe.kind, part, recipe.command)
        return Case(
            [*args, "--store", store, *_json(recipe.json_output)],
            Expect(
                codes, f"{recipe.kind} store, {recipe.command}", ("manifest", "channel", "store", f"{NAME}@{VERSION}")
            ),
            recipe.json_output,
            reports_failures=recipe.command == "verify",
            after=after,
        )

    readers = ("ls-version", "pull", "export", "verify")  # each value read by two of them, in turn
    must = [
        ValueCase(kind, command, json_output=i % 2 == 0)
        for i, kind in enumerate(VALUE_KINDS)
        for command in ((readers[i % 4], readers[(i + 1) % 4]) if kind in g.MANIFEST_VALUES else ("promote", "ls-name"))
    ]
    strategy = st.builds(ValueCase, st.sampled_from(VALUE_KINDS), st.sampled_from(STORE_COMMANDS), st.booleans())
    run_cases(request.node.name, "store-values", strategy, setup, hostile_base, must)


# --- registry answers -----------------------------------------------------------------------------------------

ANSWERS = {
    "nested": lambda request: Answer(body=nested(), headers={"Content-Type": "application/json"}),
    "endless": lambda request: Answer(body=endless(b"[")),
    "not-json": lambda request: Answer(body=b"\x00\xff<html>", headers={"Content-Type": "application/json"}),
    "wrong-type": lambda request: Answer(body=b"[1, 2, 3]", headers={"Content-Type": "application/json"}),
    "length-abc": lambda request: Answer(body=b"{}", headers={"Content-Length": "abc"}),
    "length-short": lambda request: Answer(body=b"{}" * 100, headers={"Content-Length": "7"}),
    "status-500": lambda request: Answer(500, body=nested()),
    "status-418": lambda request: Answer(418, body=b'{"errors": [{"code": "\\u001b[2J", "message": "x"}]}'),
    "unauthorized": lambda request: Answer(401, {"WWW-Authenticate": 'Bearer realm="http://127.0.0.1:9/token"'}),
    "paging-loop": lambda request: Answer(
        headers={"Link": f'<{request.path}>; rel="next"'}, body=b'{"tags": ["1.0.0"], "repositories": []}'
    ),
    "paging-elsewhere": lambda request: Answer(
        headers={"Link": '<http://127.0.0.1:9/v2/x>; rel="next"'}, body=b'{"tags": ["1.0.0"], "repositories": []}'
    ),
}
"""What the hostile registry answers the targeted request with."""
TARGETS = {
    "catalog": r"^/v2/_catalog",
    "tags": r"/tags/list",
    "manifest": r"/manifests/1\.0\.0$",
    "channel": r"/manifests/_channel\.",
    "blob": r"/blobs/sha256:[0-9a-f]{64}$",
}
REGISTRY_COMMANDS = ("ls", "ls-name", "pull", "pull-channel", "verify")


@dataclass(frozen=True)
class RegistryCase:
    target: str
    answer: str
    command: str
    json_output: bool


@pytest.fixture(scope="module")
def registry_release(registry, store_build, tmp_path_factory) -> str:
    """A repository of the real registry holding digits@1.0.0 with the channel stable."""
    repository = "hostile" + uuid.uuid4().hex[:10]
    env = environment_without_credentials(tmp_path_factory.mktemp("registry-home"))
    uri = registry.uri(repository)
    assert run_cli("publish", store_build, "--name", NAME, "--version", VERSION, "--store", uri, env=env).exit_code == 0
    assert run_cli("promote", f"{NAME}@{VERSION}", "--channel", CHANNEL, "--store", uri, env=env).exit_code == 0
    return repository


def test_registry_answers(request, hostile_base, registry, registry_release):
    with hostile_registry(registry) as hostile:

        def setup(recipe: RegistryCase, box: Sandbox) -> Case:
            hostile.reset()
            hostile.answer("GET", TARGETS[recipe.target], ANSWERS[recipe.answer])
            hostile.answer("HEAD", TARGETS[recipe.target], ANSWERS[recipe.answer])
            box.out.mkdir(exist_ok=True)
            out = box.out / "digits.plan"
            args = {
                "ls": ["ls"],
                "ls-name": ["ls", NAME],
                "verify": ["ls", NAME, "--verify"],
                "pull": ["pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", out, "--no-cache"],
                "pull-channel": ["pull", f"{NAME}@{CHANNEL}", "--sku", SKU, "--out", out, "--no-cache"],
            }[recipe.command]
            kept_out = _kept(box.out)
            digest = hashlib.sha256(
                (request.getfixturevalue("store_build") / SKU / "fp16" / "engine.plan").read_bytes()
            ).hexdigest()

            def after(result: CliResult) -> list[str]:
                if result.exit_code != 0:
                    return kept_out()
                if recipe.command.startswith("pull") and hashlib.sha256(out.read_bytes()).hexdigest() != digest:
                    return ["exit 0 but the pulled plan is not the blob of its digest"]
                return []

            env = {"DOCKER_CONFIG": str(box.home)}
            # 0: the command never made the targeted request, or the answer does it no harm; 2: a listing that
            # lost the release is "no such release"
            return Case(
                [*args, "--store", hostile.uri(registry_release), *_json(recipe.json_output)],
                Expect(_codes(0, 1, 2, 3), f"{recipe.answer} answer to {recipe.target}, {recipe.command}"),
                recipe.json_output,
                reports_failures=recipe.command == "verify",
                env=env,
                after=after,
            )

        must = [
            RegistryCase(target, answer, command, json_output=False)
            for target, commands in (
                ("catalog", ["ls"]),
                ("tags", ["ls-name"]),
                ("manifest", ["pull"]),
                ("channel", ["pull-channel"]),
                ("blob", ["pull", "verify"]),
            )
            for answer in ANSWERS
            for command in commands
            if not (answer.startswith("paging") and target not in ("catalog", "tags"))
        ]
        strategy = st.builds(
            RegistryCase,
            st.sampled_from(sorted(TARGETS)),
            st.sampled_from(sorted(ANSWERS)),
            st.sampled_from(REGISTRY_COMMANDS),
            st.booleans(),
        )
        run_cases(request.node.name, "registry-answers", strategy, setup, hostile_base, must)


# --- pipeline YAML --------------------------------------------------------------------------------------------


def test_pipeline_yaml(request, hostile_base):
    def setup(recipe: g.PipelineRecipe, box: Sandbox) -> Case:
        path = box.inputs / "pipeline.yaml"
        path.write_text(recipe.text(), encoding="utf-8")
        codes = _codes(0) if recipe.verdict() == g.VALID else _codes(2)
        return Case(
            ["plan", path, "--format", "json"],
            Expect(codes, f"{recipe.verdict()} pipeline", ("pipeline.yaml",)),
            json_output=True,
        )

    must = [g.PipelineRecipe(version, ("fp16",), None, None) for version in g.VERSION_TEXTS]
    must += [
        g.PipelineRecipe('"1.0.0"', ("fp16", "fp16"), None, None),
        g.PipelineRecipe('"1.0.0"', ("fp16",), "bogus", None),
        g.PipelineRecipe('"1.0.0"', ("fp16",), "tensorrt", None),
        g.PipelineRecipe('"1.0.0"', ("fp16",), None, (9, 8)),
        g.PipelineRecipe('"1.0.0"', ("fp16",), None, (2, 1)),
    ]
    run_cases(request.node.name, "pipeline-yaml", g.pipeline_recipes(), setup, hostile_base, must)


# --- export targets -------------------------------------------------------------------------------------------

EXPORT_DAMAGE = {
    "intact": _codes(0),
    "repo-missing": _codes(0),  # made, parents too (issue 43, footgun 2)
    "repo-file": _codes(2),
    "model-file": _codes(2, 3),
    "model-fifo": _codes(2, 3),
    "model-link-out": _codes(2, 3, 4),
    "version-other": _codes(4),
    "version-file": _codes(4),
    "config-garbage": _codes(4),
    "config-fifo": _codes(2),
    "config-directory": _codes(2),
    "config-link-out": _codes(2),
    "lock-link-out": _codes(2),
    "lock-fifo": _codes(2),
    "lock-directory": _codes(2),
    "stale-partial": _codes(0),
}
"""What stands in the repository -> the exit codes the contract allows: a missing repository is made; one that is
not a folder is bad input (2); a model or version folder of other content is a conflict (4); a lock that is no
lock file is refused (2); what cannot be written (a FIFO or folder where a file goes) is 2, 3 or 4; a link out is
never followed (the outside folder is FIFOs the harness watches)."""


MODEL_RULE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
"""docs/export.md: --model-name is 1 to 128 of A-Z a-z 0-9 . _ - (a folder name)."""


@dataclass(frozen=True)
class ExportCase:
    damage: str
    model_name: str | None
    json_output: bool


def _export_damage(kind: str, repo: Path, box: Sandbox) -> Path:
    model = repo / "m"
    if kind == "repo-missing":
        return repo / "missing"
    if kind == "repo-file":
        shutil.rmtree(repo)
        repo.write_bytes(b"not a folder")
        return repo
    if kind == "model-file":
        model.write_bytes(b"x")
    elif kind == "model-fifo":
        os.mkfifo(model)
    elif kind == "model-link-out":
        model.symlink_to(g.make_fifo(box.outside / "model"))
    elif kind.startswith(("version-", "config-", "stale-")):
        model.mkdir()
        if kind == "version-other":
            (model / "1").mkdir()
            (model / "1" / "other.plan").write_bytes(b"other")
        elif kind == "version-file":
            (model / "1").write_bytes(b"x")
        elif kind == "config-garbage":
            (model / "config.pbtxt").write_bytes(b'name: "other"\n')
        elif kind == "config-fifo":
            os.mkfifo(model / "config.pbtxt")
        elif kind == "config-directory":
            (model / "config.pbtxt").mkdir()
        elif kind == "config-link-out":
            (model / "config.pbtxt").symlink_to(g.make_fifo(box.outside / "config"))
        elif kind == "stale-partial":
            stale = model / ".1.4242.abcd.partial"
            stale.mkdir()
            os.utime(stale, (0, 0))
    elif kind == "lock-link-out":
        (repo / ".m.lock").symlink_to(box.outside / "lock")
    elif kind == "lock-fifo":
        os.mkfifo(repo / ".m.lock")
    elif kind == "lock-directory":
        (repo / ".m.lock").mkdir()
    return repo


def test_export_targets(request, hostile_base, served_template):
    def setup(recipe: ExportCase, box: Sandbox) -> Case:
        store = box.inputs / "store"
        shutil.copytree(served_template, store, symlinks=True)
        box.out.mkdir(exist_ok=True)
        root = box.out / "repo"
        root.mkdir()
        repo = _export_damage(recipe.damage, root, box)
        name = recipe.model_name if recipe.model_name is not None else "m"
        valid_name = MODEL_RULE.fullmatch(name) is not None and ".." not in name
        codes = EXPORT_DAMAGE[recipe.damage] if valid_name else _codes(2)
        if valid_name and name != "m" and recipe.damage not in ("repo-missing", "repo-file"):
            codes = _codes(0)  # the damage stands at model m; this export writes another model
        args = [
            "export",
            "triton",
            f"{NAME}@{VERSION}",
            "--store",
            store,
            "--repo",
            repo,
            "--model-name",
            name,
            *TRITON,
        ]
        return Case(
            [*args, *_json(recipe.json_output)],
            Expect(codes, f"{recipe.damage} repo, model {name!r}", ("--repo", "--model-name", "m", "config")),
            recipe.json_output,
            reports_failures=False,
        )

    must = [ExportCase(damage, None, json_output=i % 2 == 0) for i, damage in enumerate(EXPORT_DAMAGE)]
    must += [ExportCase("intact", text, False) for text in ("..", ".hidden", "a/b", "x" * 200, "ok-name")]
    strategy = st.builds(
        ExportCase,
        st.sampled_from(sorted(EXPORT_DAMAGE)),
        st.one_of(st.none(), st.sampled_from(g.HOSTILE_TEXT), st.text(max_size=30)).filter(
            lambda t: t is None or "\x00" not in t
        ),
        st.booleans(),
    )
    run_cases(request.node.name, "export-targets", strategy, setup, hostile_base, must)
