"""compiler.core.yaml: user YAML is read safely (no Python tags, no duplicate keys, no alias bombs) and every
problem is one line naming the file."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from compiler.core.errors import InvalidInput
from compiler.core.yaml import load_yaml, read_yaml

ALIAS_BOMB = "a: &a [1, 2]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
)
"""Seven levels of ten aliases each: 2 * 10**7 values from a few hundred bytes."""


def _file(tmp_path, text: str | bytes):
    path = tmp_path / "file.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_yaml_reads_as_plain_data(tmp_path):
    assert read_yaml(_file(tmp_path, "a: [1, 2]\nb: {c: x}\n")) == {"a": [1, 2], "b": {"c": "x"}}
    assert read_yaml(_file(tmp_path, "")) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("!!python/object/apply:os.system ['true']\n", "not valid YAML"),
        ("a: [1\n", "at line 2"),
        (b"\xff\xfe", "not UTF-8"),
        (ALIAS_BOMB, "alias bomb"),
    ],
)
def test_what_we_do_not_read_is_one_line_naming_the_file(tmp_path, text, fragment):
    path = _file(tmp_path, text)
    with pytest.raises(InvalidInput, match=fragment) as caught:
        read_yaml(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("name", "fragment"), [("missing.yaml", "file not found"), ("", "a directory")])
def test_a_path_that_is_no_file_is_named(tmp_path, name, fragment):
    with pytest.raises(InvalidInput, match=fragment):
        read_yaml(tmp_path / name)


class _Profile(BaseModel):
    name: str
    batch: int


def test_a_schema_error_names_the_field(tmp_path):
    assert load_yaml(_file(tmp_path, "name: online\nbatch: 4\n"), _Profile) == _Profile(name="online", batch=4)
    with pytest.raises(InvalidInput, match="batch"):
        load_yaml(_file(tmp_path, "name: online\nbatch: lots\n"), _Profile)
