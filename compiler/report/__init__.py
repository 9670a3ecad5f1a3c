"""Release reports for people: release-report.html (one self-contained page with charts), ``compile diff`` between
two releases, and node-data overlays for Google's Model Explorer. A consumer of the stages' records and of the
release API, like ``export``: it makes nothing, it shows what was made.

Modules: ``view`` (the one model of what a report shows, from build folders or a published release), ``charts``
(matplotlib SVG), ``page`` (the HTML), ``diff``, ``explorer`` (Model Explorer node data).
"""

from __future__ import annotations

from pathlib import Path

from compiler.core.files import NotRegularFile, read_regular, write_atomic
from compiler.report.view import ReleaseView

PAGE = "release-report.html"


def write_page(view: ReleaseView, path: Path, previous: ReleaseView | None = None) -> Path:
    """The page of ``view`` written atomically at ``path`` (with the diff against ``previous`` when given), reusing
    the charts the page there already holds."""
    from compiler.report import diff, page

    diff_html = diff.html(diff.diff(previous, view)) if previous is not None else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page.render(view, diff_html, _drawn_before(path)).encode())
    return path


def _drawn_before(path: Path) -> dict[str, str]:
    """The charts of the page at ``path`` by key; none when there is no page or it is not one we would write."""
    from compiler.report.charts import MAX_PAGE_BYTES, drawn_in

    try:
        text = read_regular(path, MAX_PAGE_BYTES)
    except (OSError, NotRegularFile):
        return {}
    return drawn_in(text.decode("utf-8", "replace")) if len(text) <= MAX_PAGE_BYTES else {}
