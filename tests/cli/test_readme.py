"""The README's walkthrough runs as written, and its links lead somewhere.

The walkthrough is the ``## Walkthrough`` section of README.md: every line of its ``bash`` code blocks
that starts with ``compile `` (a trailing ``\\`` continues it on the next line) is run, in order, in a
temporary copy of the files it reads, with the repository root's layout, so nothing is written into the
repository. A command ends with ``# exits N`` when the README documents another exit code than 0.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import REPO, CliResult, run_cli

README = REPO / "README.md"
DOCS = REPO / "docs"

_FENCE = re.compile(r"^```(\w*)\s*$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of a markdown text."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def bash_blocks(text: str) -> list[list[str]]:
    """The lines of each ``bash`` fenced code block, in order."""
    blocks: list[list[str]] = []
    inside, language, lines = False, "", []
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence and not inside:
            inside, language, lines = True, fence.group(1), []
        elif fence:
            inside = False
            if language in ("bash", "sh", "shell"):
                blocks.append(lines)
        elif inside:
            lines.append(line)
    return blocks


def shell_lines(block: list[str]) -> list[str]:
    """The lines of a block with continuation lines (a trailing ``\\``) joined."""
    joined, pending = [], ""
    for line in block:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append((pending + line).strip())
        pending = ""
    assert not pending, f"a command ends in a continuation: {pending!r}"
    return joined


def commands(block: list[str]) -> list[str]:
    """The ``compile`` command lines of a block."""
    return [line for line in shell_lines(block) if line.startswith("compile ")]


def walkthrough_text() -> str:
    return section(README.read_text(encoding="utf-8"), "Walkthrough")


def walkthrough_commands() -> list[tuple[list[str], int]]:
    """(arguments after ``compile``, documented exit code) of every walkthrough command, in order."""
    found = []
    for block in bash_blocks(walkthrough_text()):
        for line in commands(block):
            expected = _EXITS.search(line)
            found.append((shlex.split(line, comments=True)[1:], int(expected.group(1)) if expected else 0))
    return found


def option_values(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == option]


def promised_files() -> set[str]:
    """The paths under a walkthrough command's --out folder that the walkthrough's text names in backticks."""
    outs = {out.rstrip("/") for args, _ in walkthrough_commands() for out in option_values(args, "--out")}
    prose = re.sub(r"^```.*?^```", "", walkthrough_text(), flags=re.M | re.S)
    spans = re.findall(r"`([^`\s]+)`", prose)
    return {span for span in spans if any(span.startswith(f"{out}/") for out in outs)}


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[list[str], int, CliResult]]]:
    """Run the walkthrough once in a fresh copy of the repository's tracked files, as a fresh clone has them:
    (its working directory, each run)."""
    work = tmp_path_factory.mktemp("walkthrough")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for relative in filter(None, tracked.decode().split("\0")):
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, work / relative)
    runs = []
    for args, expected in walkthrough_commands():
        result = run_cli(*args, cwd=work)
        runs.append((args, expected, result))
        if result.exit_code != expected:
            break  # the later commands build on this one
    return work, runs


def test_the_walkthrough_goes_from_inspect_to_release_in_order():
    assert [args[0] for args, _ in walkthrough_commands()] == [
        "inspect",
        "calibrate",
        "build",
        "check",
        "publish",
        "promote",
        "pull",
        "release",
    ]


def test_every_walkthrough_command_exits_as_documented(walkthrough):
    _, runs = walkthrough
    assert len(runs) == len(walkthrough_commands())
    for args, expected, result in runs:
        assert result.exit_code == expected, (shlex.join(["compile", *args]), result.stderr)
        assert "Traceback" not in result.stderr


def test_the_files_the_walkthrough_names_exist_afterwards(walkthrough):
    work, _ = walkthrough
    promised = promised_files()
    assert {
        "calibrated/model.onnx",
        "calibrated/calibration.json",
        "engines/build.json",
        "engines/rtx-4090/fp32/engine.plan",
        "engines/rtx-4090/int8/engine.plan",
    } <= promised
    for path in sorted(promised):
        assert (work / path).is_file(), path


def test_each_target_folder_holds_what_the_walkthrough_says(walkthrough):
    work, runs = walkthrough
    build = next(args for args, _, _ in runs if args[0] == "build")
    report = json.loads((work / option_values(build, "--out")[0] / "build.json").read_text())
    wanted = {
        (sku, precision) for sku in option_values(build, "--sku") for precision in option_values(build, "--precision")
    }
    assert {(t["sku"], t["precision"]) for t in report["targets"]} == wanted
    for target in report["targets"]:
        assert target["status"] == "ok", target
        for name in ("engine.plan", "engine.json", "layers.json", "build.log"):
            assert (work / target["path"] / name).is_file(), (target["path"], name)
        engine = json.loads((work / target["path"] / "engine.json").read_text())
        assert [p["name"] for p in engine["profiles"]] == ["online", "batch"]  # "both engines carry both profiles"


def test_running_the_build_again_takes_every_target_from_the_cache(walkthrough):
    work, runs = walkthrough
    build = next(args for args, _, _ in runs if args[0] == "build")
    again = run_cli(*build, "--json", cwd=work)
    assert again.exit_code == 0, again.stderr
    assert all(target["cache_hit"] for target in json.loads(again.stdout)["targets"])


def _ignored(paths: list[str]) -> set[str]:
    """The paths (relative to the repository) that .gitignore ignores, as git itself decides."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-z"],
        cwd=REPO,
        capture_output=True,
        input="\0".join(paths).encode(),
    )
    return set(filter(None, done.stdout.decode().split("\0")))


def test_gitignore_covers_every_folder_the_readme_and_the_docs_write():
    outs = set()
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for block in bash_blocks(page.read_text(encoding="utf-8")):
            for line in shell_lines(block):
                outs.update(out.rstrip("/") for out in option_values(shlex.split(line, comments=True), "--out"))
    assert {"calibrated", "engines"} <= outs
    # An absolute --out (/models/...) is outside the checkout: git check-ignore refuses it.
    written = [f"{out}/engine.plan" for out in sorted(outs) if not out.startswith("/")]
    assert _ignored(written) == set(written)


def test_gitignore_ignores_no_source_file():
    """An output folder's pattern must not match a package folder of the same name (``build/`` once ignored
    compiler/engines/, so its modules were never committed)."""
    sources = [
        str(p.relative_to(REPO))
        for folder in ("compiler", "calibration", "profiles", "tests", "benchmarks")
        for p in (REPO / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert "compiler/engines/jobs.py" in sources
    assert _ignored(sources) == set()


def relative_links(page: Path) -> list[str]:
    return [
        link for link in _LINK.findall(page.read_text(encoding="utf-8")) if not re.match(r"^[a-z][a-z0-9+.-]*:", link)
    ]


def anchors(page: Path) -> set[str]:
    """The fragments GitHub gives the page's headings: lower case, punctuation but ``-`` dropped, spaces to ``-``."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def assert_resolves(page: Path, link: str) -> None:
    path, _, fragment = link.partition("#")
    target = page.parent / path if path else page
    assert target.is_file(), (page.name, link)
    if fragment and target.suffix == ".md":
        assert fragment in anchors(target), (page.name, link, sorted(anchors(target)))


def test_every_relative_link_of_the_readme_points_to_a_file():
    links = relative_links(README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert_resolves(README, link)


def test_every_docs_page_is_linked_from_the_readme_and_its_links_resolve():
    linked = {(REPO / link.partition("#")[0]).resolve() for link in relative_links(README)}
    for page in sorted(DOCS.glob("*.md")):
        assert page.resolve() in linked, f"README.md does not link {page.relative_to(REPO)}"
        for link in relative_links(page):
            assert_resolves(page, link)
