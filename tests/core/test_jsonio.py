"""compiler.core.jsonio: supplied JSON is parsed within a size and a depth, and every failure is one ValueError."""

from __future__ import annotations

import pytest

from compiler.core.jsonio import MAX_DEPTH, UnreadableJson, parse_json


def test_a_document_within_the_limits_reads_as_json():
    assert parse_json(b'{"a": [1, {"b": null}]}', 100) == {"a": [1, {"b": None}]}
    assert parse_json("3", 1) == 3


def test_nesting_up_to_the_limit_reads_and_one_level_more_is_refused():
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, 1 << 10)
    with pytest.raises(UnreadableJson, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), 1 << 10)


def test_a_million_deep_is_refused_without_a_recursion_error():
    deep = "[" * 1_000_000 + "]" * 1_000_000
    with pytest.raises(UnreadableJson, match="nested deeper"):
        parse_json(deep, len(deep))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [(b"x" * 11, "over 10 bytes"), (b"{not json", "Expecting property name"), (b"\x80abc", "can.t decode")],
)
def test_what_is_not_json_of_ours_is_one_unreadable_json_error(data, fragment):
    with pytest.raises(UnreadableJson, match=fragment) as caught:
        parse_json(data, 10)
    assert isinstance(caught.value, ValueError) and "\n" not in str(caught.value)
