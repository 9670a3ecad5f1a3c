"""Hostile option values of the store commands (`compile publish`, `pull`, `ls`, `promote`): store URIs, names,
versions, channels and --out paths, held to the contract of tests/hostile (harness.py)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

import pytest
from hypothesis import strategies as st

from tests.hostile.harness import Case, Expect, Sandbox, run_cases
from tests.hostile.store_support import CHANNEL, NAME, OTHER, SKU, VERSION, codes, json_flag, tree_kept
from tests.support.cli import CliResult

CLOSED_PORT = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "hostile",
    "AWS_SECRET_ACCESS_KEY": "hostile-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_MAX_ATTEMPTS": "1",
    "AWS_RETRY_MODE": "standard",
}
"""An S3 endpoint nothing listens on (the discard port), so a well-formed s3:// URI fails fast and offline."""

STORE_VALUES = (
    ("", codes(2)),
    (" ", codes(2)),
    ("ftp://host/x", codes(2)),
    ("s3://", codes(2)),
    ("s3://A_B/x", codes(2)),
    ("s3://ab", codes(2)),
    ("s3://a..b/x", codes(2)),
    ("s3://-bucket/x", codes(2)),
    ("s3://bucket/../x", codes(2)),
    ("s3://bucket/a/./b", codes(2)),
    ("s3://bucket/a b", codes(2)),
    ("s3://bucket/x\x1b[2J", codes(2)),
    ("s3://" + "b" * 64, codes(2)),
    ("s3://hostile-bucket/team", codes(3)),
    ("oci://127.0.0.1:9/repo", codes(2, 3)),
    ("file://", codes(2)),
    ("@file", codes(2, 3)),
    ("@under-file", codes(2, 3)),
    ("@missing", codes(2, 3)),
)
"""--store values (issue 21, "Safety"): what no store URI is, exit 2; a store that is not there or cannot be reached,
exit 3 (a file where the folder should be may be either); never a request for a malformed one. NUL cannot reach
the CLI (argv and the environment are C strings): the Python API's open_store refuses it (test below)."""

LONG = "v" * 1000
OPTIONS: tuple[tuple[str, str, str, frozenset[int]], ...] = (
    *(("publish", "--store", value, codes) for value, codes in STORE_VALUES if value != "@missing"),
    *(
        ("pull", "--store", value, codes)
        for value, codes in STORE_VALUES
        if value
        in (
            "",
            "s3://bucket/../x",
            "s3://hostile-bucket/team",
            "oci://127.0.0.1:9/repo",
            "file://",
            "@file",
            "@missing",
        )
    ),
    ("ls", "--store", "", codes(2)),
    ("ls", "--store", "s3://bucket/../x", codes(2)),
    ("ls", "--store", "@file", codes(2, 3)),
    ("promote", "--store", "ftp://x", codes(2)),
    ("publish", "--name", "", codes(2)),
    ("publish", "--name", "../x", codes(2)),
    ("publish", "--name", "UPPER", codes(2)),
    ("publish", "--name", "a" * 65, codes(2)),
    ("publish", "--name", "x\x1b[2J", codes(2)),
    ("publish", "--version", LONG, codes(2)),
    ("publish", "--version", "1.0/../x", codes(2)),
    ("publish", "--version", "", codes(2)),
    ("publish", "--version", "1..0", codes(2)),
    ("publish", "--version", "-1", codes(2)),
    ("pull", "--out", "@out-folder", codes(2)),
    ("pull", "--out", "@missing-parent", codes(0)),  # made, parents too (issue 43, footgun 2)
    ("pull", "--out", "@engine.json", codes(0)),
    ("pull", "--out", "", codes(2)),
    ("pull", "--out", "@long-name", codes(2)),
    ("pull", "--out", "@under-file", codes(2)),
    ("pull", "--out", "@link-out", codes(0)),
    ("pull", "--out", "@dot", codes(2)),
    ("pull", "--sku", "no-such-gpu", codes(2)),
    ("pull", "--sku", "", codes(2)),
    ("pull", "--sku", "auto", codes(3)),
    ("pull", "--sku", "rtx\x1b[2J", codes(2)),
    ("pull", "--precision", "junk", codes(2)),
    ("pull", "--precision", "", codes(2)),
    ("pull", "--precision", "int8", codes(2)),
    ("pull", "--tensorrt-version", "junk\nerror: forged", codes(2)),
    ("pull", "release", f"{NAME}@{LONG}", codes(2)),
    ("pull", "release", f"{NAME}@9.9.9", codes(2)),
    ("pull", "release", NAME, codes(2)),
    ("pull", "release", "@", codes(2)),
    ("pull", "release", "-x", codes(2)),
    ("ls", "release", f"{NAME}@../x", codes(2)),
    ("ls", "release", "nothere", codes(2)),
    ("promote", "--channel", "", codes(2)),
    ("promote", "--channel", "Stable", codes(2)),
    ("promote", "--channel", "1abc", codes(2)),
    ("promote", "--channel", "c" * 33, codes(2)),
    ("promote", "--channel", "../x", codes(2)),
    ("promote", "--channel", "line\nbreak", codes(2)),
    ("promote", "release", f"{NAME}@{LONG}", codes(2)),
    ("promote", "release", "nothere@1.0.0", codes(2)),
)
"""(command, option, value, codes): issue 21: names, versions and channels from a strict character set,
checked before any request (exit 2); --out a file path in an existing folder (2; a plan may be named engine.json:
its record is engine.json.json, issue 31); an unknown SKU, a precision or runtime version the release has no
engine for (2); --sku auto without a GPU (3). "release" is the positional NAME@VERSION. An --out that is a link to
a file outside is replaced, the file it led to left alone."""


REFS = (f"{NAME}@{VERSION}", f"{NAME}@{OTHER}", f"{NAME}@{CHANNEL}")
"""The refs the store of an option case resolves."""
CHANNEL_RULE = re.compile(r"[a-z](?:[a-z0-9_-]{0,30}[a-z0-9])?")
VERSION_RULE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?")
"""Issue 21.s rules for channels and versions (no '..' either), written out again as the oracle."""


def _option_value(value: str, box: Sandbox) -> str:
    blocker = box.inputs / "a-file"
    if value in ("@file", "@under-file") and not blocker.exists():
        blocker.write_text("in the way\n")
    if value == "@link-out":
        (box.outside / "target.plan").write_text("outside\n")
        (box.out / "link.plan").symlink_to(box.outside / "target.plan")
    return {
        "@file": str(blocker),
        "@under-file": str(blocker / "sub"),
        "@missing": str(box.inputs / "no-store"),
        "@out-folder": str(box.out),
        "@missing-parent": str(box.out / "no" / "x.plan"),
        "@engine.json": str(box.out / "engine.json"),
        "@long-name": str(box.out / ("p" * 1000)),
        "@link-out": str(box.out / "link.plan"),
        "@dot": str(box.out / "."),
    }.get(value, value)


def _with_option(args: list[str], option: str, value: str) -> list[str]:
    if option == "release":
        return [args[0], value, *args[2:]]
    if option in args:
        index = args.index(option)
        return [*args[: index + 1], value, *args[index + 2 :]]
    return [*args, option, value]


@dataclass(frozen=True)
class OptionCase:
    command: str
    option: str
    value: str
    codes: frozenset[int]
    json_output: bool = False


def test_store_options(request, hostile_base, store_build, store_template):
    def setup(recipe: OptionCase, box: Sandbox) -> Case:
        store = box.inputs / "store"
        box.out.mkdir()
        if recipe.command == "promote":
            store = box.out / "store"
        shutil.copytree(store_template, store, symlinks=True)
        build = box.inputs / "build"
        if recipe.command == "publish":
            shutil.copytree(store_build, build, symlinks=True)
            store = box.out / "published"
        base = {
            "publish": ["publish", build, "--name", NAME, "--version", "2.0.0", "--store", store],
            "pull": ["pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", box.out / "digits.plan", "--store", store],
            "ls": ["ls", NAME, "--store", store],
            "promote": ["promote", f"{NAME}@{OTHER}", "--channel", "beta", "--store", store],
        }[recipe.command]
        value = _option_value(recipe.value, box)
        args = [*_with_option([str(a) for a in base], recipe.option, value), *json_flag(recipe.json_output)]
        kept_out, kept_store = tree_kept(box.out), tree_kept(store)

        def after(result: CliResult) -> list[str]:
            if result.exit_code == 0:
                if recipe.value == "@link-out" and (box.outside / "target.plan").read_text() != "outside\n":
                    return ["pulled through a link into the file outside"]
                return []
            return kept_out() + (kept_store() if recipe.command == "promote" else [])

        names = (
            recipe.option,
            recipe.value.strip() or repr(recipe.value),
            value,
            "store",
            "release",
            "version",
            "channel",
            "name",
            "--out",
            "--sku",
            "--precision",
            "SKU",
            "s3://",
            "no engine",
        )
        env = CLOSED_PORT if recipe.value.startswith("s3://") else None
        return Case(
            args,
            Expect(recipe.codes, f"{recipe.option} {recipe.value!r}", names),
            recipe.json_output,
            reports_failures=False,
            env=env,
            after=after,
        )

    must = [OptionCase(c, o, v, codes, json_output=i % 4 == 0) for i, (c, o, v, codes) in enumerate(OPTIONS)]
    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=80)
    refs = st.one_of(text, st.builds(lambda tag: f"{NAME}@{tag}", text), st.sampled_from(REFS))

    def valid(rule: re.Pattern[str], value: str) -> frozenset[int]:
        return codes(0) if rule.fullmatch(value) and ".." not in value else codes(2)

    generated = st.one_of(
        st.builds(
            lambda t, j: OptionCase("pull", "release", t, codes(0) if t in REFS else codes(2), j), refs, st.booleans()
        ),
        st.builds(
            lambda t, j: OptionCase("promote", "--channel", t, valid(CHANNEL_RULE, t), j),
            st.one_of(text, st.from_regex(CHANNEL_RULE, fullmatch=True)),
            st.booleans(),
        ),
        st.builds(
            lambda t, j: OptionCase("publish", "--version", t, valid(VERSION_RULE, t), j),
            st.one_of(text, st.from_regex(VERSION_RULE, fullmatch=True)),
            st.booleans(),
        ),
    )
    run_cases(request.node.name, "store-options", generated, setup, hostile_base, must)


def test_open_store_refuses_a_nul():
    """The one --store value argv cannot carry, through the Python API: refused as invalid input, not a crash."""
    from compiler.core.errors import InvalidInput
    from compiler.stores import open_store

    for uri in ("a\0b", "file://a\0b", "s3://bucket/a\0b"):
        with pytest.raises(InvalidInput):
            open_store(uri)
