"""compiler.core.text: what reaches a terminal from an input file is one printable line, and figures read as people
read them."""

from __future__ import annotations

import pytest

from compiler.core.text import and_more, gate_figure, human_size, markdown_cell, printable, redacted_reason


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("model\nerror: forged", "model\\nerror: forged"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("del\x7f c1\x85", "del\\x7f c1\\x85"),
        ("line\u2028sep", "line\\u2028sep"),
        ("bidi\u202eevil", "bidi\\u202eevil"),
        ("lone\udcff", "lone\\udcff"),
        ("back\\slash é 模型", "back\\slash é 模型"),
    ],
)
def test_printable_escapes_every_control_and_keeps_other_text(raw, shown):
    assert printable(raw) == shown
    assert len(printable(raw).splitlines()) == 1


def test_a_markdown_cell_escapes_pipes_after_controls():
    assert markdown_cell("a|b\nc") == "a\\|b\\nc"


@pytest.mark.parametrize(
    ("size", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (5 << 20, "5.0 MiB"), (3 << 30, "3.0 GiB")]
)
def test_human_size_never_shows_a_zero_of_a_larger_unit(size, text):
    assert human_size(size) == text


def test_gate_figures_show_top1_as_a_percentage_and_others_as_numbers():
    assert gate_figure("min-top1", 0.995) == "99.50%"
    assert gate_figure("min-cosine", 0.9999876) == "0.99999"


def test_and_more_says_nothing_for_no_more():
    assert and_more(0, "hint") == ""
    assert and_more(2) == " (and 2 more)"
    assert and_more(3, "see --json") == " (and 3 more; see --json)"


def test_a_redacted_reason_hides_secrets_of_the_environment_and_keeps_one_line(monkeypatch):
    monkeypatch.setenv("HSM_PIN", "12345678")
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to tell from ordinary text: kept
    reason = redacted_reason(RuntimeError("login with 12345678 failed: abc\nsecond line"))
    assert reason == "login with *** failed: abc"
    assert redacted_reason(KeyError()) == "KeyError"
