"""Release reports for people: release-report.html (one self-contained page with charts), ``compile diff`` between
two releases, and node-data overlays for Google's Model Explorer. A consumer of the stages' records and of the
release API, like ``export``: it makes nothing, it shows what was made.

Modules: ``view`` (the one model of what a report shows, from build folders or a published release), ``charts``
(matplotlib SVG), ``page`` (the HTML), ``diff``, ``explorer`` (Model Explorer node data).
"""

from __future__ import annotations

from pathlib import Path

from compiler.core.files import write_atomic
from compiler.report.view import ReleaseView

PAGE = "release-report.html"


def write_page(view: ReleaseView, path: Path, previous: ReleaseView | None = None) -> Path:
    """The page of ``view`` written atomically at ``path`` (with the diff against ``previous`` when given)."""
    from compiler.report import diff, page

    diff_html = diff.html(diff.diff(previous, view)) if previous is not None else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page.render(view, diff_html).encode())
    return path
