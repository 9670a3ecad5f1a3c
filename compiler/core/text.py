"""Text as people read it: one safe line per name from an input file, sizes, gate figures, Markdown cells."""

from __future__ import annotations

import os
import re

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (from an input file: a name, a path, a library's message) made safe to print on one line.

    Line breaks and every other control character are written as escapes (``\\n``, ``\\r``, ``\\t``,
    ``\\x1b``, ``\\x7f``, ``\\x85``...): C0, DEL and C1 controls, Unicode's line and paragraph separators
    (``str.splitlines`` breaks there), bidirectional overrides (they reorder what a terminal shows) and lone
    surrogates (undecodable bytes of a file name; a strict stream cannot encode them). So a name holding
    ``\\nerror: ...`` cannot forge a second error line and an ESC cannot drive the terminal. Other text,
    backslashes included, is left as it is.
    """
    return _UNPRINTABLE.sub(_escape, str(text))


def markdown_cell(text: object) -> str:
    """``text`` made safe for one cell of a Markdown table (a job summary): printable, its pipes escaped."""
    return printable(text).replace("|", "\\|")


def human_size(size: int) -> str:
    """``1.2 MiB``, ``39.5 KiB``, ``512 B``: sizes as a person reads them (never ``0.0 MiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} B"


def gate_figure(gate: str, value: float) -> str:
    """A gate's value or threshold in the unit the accuracy table shows it: fractions (top-1 agreement, detection
    recall and precision, mask IoU) as a percentage."""
    return f"{value:.2%}" if gate in FRACTION_GATES else f"{value:.5g}"


FRACTION_GATES = ("min-top1", "min-top5", "min-recall", "min-precision", "min-iou")


def and_more(count: int, hint: str = "") -> str:
    """`` (and 3 more; hint)`` after the first of several problems (our errors are one line), or ``""``."""
    return f" (and {count} more{'; ' + hint if hint else ''})" if count > 0 else ""


def redacted_reason(exc: BaseException) -> str:
    """An exception's first line without any secret of the environment (a PIN, a key, a token) in it."""
    text = str(exc).strip()
    text = text.splitlines()[0][:200] if text else type(exc).__name__
    for name, secret in os.environ.items():
        if len(secret) >= 4 and any(word in name.upper() for word in ("PIN", "SECRET", "TOKEN", "PASSWORD", "KEY")):
            text = text.replace(secret, "***")
    return text
