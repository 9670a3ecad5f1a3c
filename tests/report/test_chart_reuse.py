"""A page written again over one that holds the same charts reuses them (issue 45: a re-release that changed nothing
does not import matplotlib); a chart whose figures changed, or a page that is not one we wrote, is drawn again."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli

KEYED = re.compile(r'<div class="chart" data-key="([0-9a-f]{64})">')
# Writes the page of a work folder in a fresh interpreter and says whether matplotlib was imported to do it.
WRITE = """
import sys
from pathlib import Path
from compiler.report import write_page
from compiler.report.view import from_work_folder
work = Path(sys.argv[1])
write_page(from_work_folder(work, "example@1", []), work / "release-report.html")
print("matplotlib" in sys.modules)
"""


def _write(work: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", WRITE, str(work)], capture_output=True, text=True, check=True)
    return done.stdout.strip() == "True"


def _charts(page: Path) -> dict[str, str]:
    text = page.read_text()
    return {m[1]: text[m.end() : text.index("</div>", m.end())] for m in KEYED.finditer(text)}


def test_a_page_written_again_reuses_its_charts_without_matplotlib(released: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(released, work)
    page = work / "release-report.html"
    page.unlink()
    assert _write(work) is True  # nothing to reuse: drawn
    first = _charts(page)
    assert len(first) >= 5
    assert _write(work) is False  # the same figures: every chart reused, matplotlib never imported
    assert _charts(page) == first
    # A chart the page holds under a key is taken from the page, whatever it draws (the key is what it stands for).
    key = next(iter(first))
    page.write_text(page.read_text().replace(first[key], '<svg id="kept-from-the-page"></svg>'))
    _write(work)
    assert _charts(page)[key] == '<svg id="kept-from-the-page"></svg>'


def test_a_changed_figure_or_a_foreign_page_is_drawn_again(released: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(released, work)
    page = work / "release-report.html"
    before = _charts(page)
    check = next(work.glob("builds/*/check.json"))
    text, moved = re.subn(r'"cosine_mean": 0\.9\d*', '"cosine_mean": 0.5', check.read_text(), count=1)
    assert moved == 1, "no cosine figure in the check record"
    check.write_text(text)
    assert _write(work) is True  # one figure moved: its chart is drawn again
    after = _charts(page)
    assert set(after) != set(before) and set(after) & set(before)  # the others are reused
    page.write_text("<html>" + "x" * 100 + "</html>")
    assert _write(work) is True
    assert len(_charts(page)) == len(after)
    assert run_cli("report", work, "--json").exit_code == 0
