"""compiler.core.records: a record written is the record read back, and a file of another format or kind is one
error naming the file and what to do."""

from __future__ import annotations

import json

import pytest

from compiler.core.errors import InvalidInput
from compiler.core.record_files import read_record
from compiler.core.records import RELEASE_FORMAT, ChannelMove, ChannelRecord, YankRecord

HINT = "publish again"


def _channel() -> ChannelRecord:
    move = ChannelMove(version="1.0.0", by="ci", at="2026-12-04T00:00:00Z")
    return ChannelRecord(name="digits", channel="stable", version="1.0.0", history=[move])


@pytest.mark.parametrize("record", [_channel(), YankRecord(name="d", version="1", reason="r", by="b", at="t")])
def test_a_record_round_trips_through_its_file(tmp_path, record):
    path = tmp_path / "record.json"
    path.write_text(record.model_dump_json())
    assert read_record(path, type(record), HINT) == record
    assert json.loads(path.read_text())["format_version"] == RELEASE_FORMAT


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d.pop("format_version"), "format_version None"),
        (lambda d: d.update(format_version=99), "format_version 99, this version reads 1 or 2"),
        (lambda d: d.update(format_version=True), "format_version True"),
        (lambda d: d.pop("history"), "not a record.json this version writes"),
    ],
)
def test_a_record_of_another_format_or_shape_is_refused_naming_the_file(tmp_path, change, fragment):
    data = json.loads(_channel().model_dump_json())
    change(data)
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInput, match=fragment) as caught:
        read_record(path, ChannelRecord, HINT)
    assert str(caught.value).startswith(str(path)) and str(caught.value).endswith(HINT)


@pytest.mark.parametrize("content", [b"{not json", b"[" * 100 + b"]" * 100])
def test_a_file_that_is_no_json_of_ours_is_refused(tmp_path, content):
    path = tmp_path / "record.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match="not JSON of ours"):
        read_record(path, ChannelRecord, HINT)


def test_a_record_path_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_record(tmp_path, ChannelRecord, HINT)
