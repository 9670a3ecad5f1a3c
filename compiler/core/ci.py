"""What a CI system reads besides the exit code: the GitHub Actions job summary."""

from __future__ import annotations

import os


def append_step_summary(markdown: str) -> None:
    """Add a report to the GitHub Actions job summary, when running in one."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
