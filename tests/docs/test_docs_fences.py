"""Every code block in README.md and docs/ says what it is, and the data and code blocks parse as written.

test_docs_commands runs the bash blocks (issue 43, "every example in docs/ runs as written") from this list of blocks.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^\s*```(\S*)\s*$")
LANGUAGES = {"bash", "text", "yaml", "json", "python"}
SKIP = re.compile(r"^<!-- not run: (.+) -->$")
REASONS = {
    "needs a GPU",
    "needs a cloud account",
    "needs cosign, which cannot be installed here",
    "needs oras, which cannot be installed here",
    "needs a serving host (its /etc and /models)",
    "installs the tool (what CI itself runs)",
    "installs NVIDIA ModelOpt in a venv of its own (what CI itself runs)",
    "runs the opt-in field zoo (tests/field runs its default cases in CI)",
}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[tuple[int, str, str, str]]:
    """(line, language, skip reason or '', body) of each fenced block, so a bare fence is seen, not guessed at."""
    lines = page.read_text().splitlines()
    found, start, language = [], None, ""
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if not match:
            continue
        if start is None:
            start, language = number, match.group(1)
            continue
        before = SKIP.match(lines[start - 1].strip()) if start else None
        found.append((start + 1, language, before.group(1) if before else "", "\n".join(lines[start + 1 : number])))
        start = None
    assert start is None, f"{page.name}:{start + 1}: a fence is never closed"
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_fence_says_what_it_is(page: Path) -> None:
    bad = [
        f"{page.name}:{line}: {language or 'bare'}"
        for line, language, _, _ in blocks(page)
        if language not in LANGUAGES
    ]
    assert not bad


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_skips_give_a_known_reason(page: Path) -> None:
    assert {reason for _, _, reason, _ in blocks(page) if reason} <= REASONS


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_data_and_code_blocks_parse(page: Path) -> None:
    for line, language, _, body in blocks(page):
        where = f"{page.name}:{line}"
        if language == "yaml":
            assert yaml.safe_load(body) is not None, where
        elif language == "json":
            json.loads(body)
        elif language == "python":
            compile(body, where, "exec")


def test_a_bare_fence_is_seen(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- not run: needs a GPU -->\n```\nls\n```\n```bash\nls\n```\n")
    assert [(line, language, reason) for line, language, reason, _ in blocks(page)] == [
        (3, "", "needs a GPU"),
        (6, "bash", ""),
    ]
