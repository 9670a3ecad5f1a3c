"""compiler.core.files and compiler.core.paths: readers never see half-written files, outputs are proven writable
before work is spent, and a command never writes over what it reads."""

from __future__ import annotations

import os
import time

import pytest

from compiler.core.errors import InvalidInput
from compiler.core.files import (
    STALE_PARTIAL_SECONDS,
    NotRegularFile,
    changed_since,
    check_writable_folder,
    copy_file,
    hash_json,
    open_lock_file,
    read_regular,
    replace_dir,
    staging_folder,
    stat_key,
    sweep_partials,
    writable_folder,
    write_atomic,
)
from compiler.core.paths import check_not_overwriting


def test_write_atomic_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "deep" / "record.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]


def test_a_staging_folder_replaces_its_target_whole_and_is_gone_afterwards(tmp_path):
    target = tmp_path / "engines"
    target.mkdir()
    (target / "old.plan").write_bytes(b"old")
    with staging_folder(tmp_path, "engines") as staging:
        assert staging.name.startswith(".engines-")
        (staging / "new.plan").write_bytes(b"new")
        replace_dir(target, staging)
    assert [p.name for p in tmp_path.iterdir()] == ["engines"]
    assert [p.name for p in target.iterdir()] == ["new.plan"]


def test_a_staging_folder_not_renamed_into_place_is_removed(tmp_path):
    with staging_folder(tmp_path, "out") as staging:
        (staging / "half.plan").write_bytes(b"half")
    assert list(tmp_path.iterdir()) == []


def test_a_copy_is_independent_of_its_source(tmp_path):
    source, copy = tmp_path / "a", tmp_path / "b"
    source.write_bytes(b"plan")
    copy_file(source, copy)
    copy.write_bytes(b"edited")
    assert source.read_bytes() == b"plan" and os.stat(source).st_nlink == 1
    with pytest.raises(FileExistsError):
        copy_file(source, copy)


def test_hash_json_ignores_key_order():
    assert hash_json({"a": 1, "b": [2]}) == hash_json({"b": [2], "a": 1}) != hash_json({"a": 1})


def test_changed_since_names_files_written_or_removed(tmp_path):
    kept, written, removed = (tmp_path / name for name in ("kept", "written", "removed"))
    for path in (kept, written, removed):
        path.write_text("x")
    stats = [(str(path), stat_key(path)) for path in (kept, written, removed)]
    written.write_text("y")
    removed.unlink()
    assert changed_since(stats) == [str(written), str(removed)]


def test_a_folder_behind_a_file_is_refused_before_and_when_made(tmp_path):
    (tmp_path / "file").write_text("x")
    for check in (check_writable_folder, writable_folder):
        with pytest.raises(InvalidInput, match=r"--out .*file/sub: cannot write there"):
            check(tmp_path / "file" / "sub", "--out")
    assert writable_folder(tmp_path / "new" / "sub", "--out").is_dir()


def test_only_stale_partials_are_swept(tmp_path):
    stale, fresh, other = tmp_path / ".a.partial", tmp_path / ".b.partial", tmp_path / "c.partial"
    for path in (stale, fresh, other):
        path.write_bytes(b"x")
    old = time.time() - STALE_PARTIAL_SECONDS - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    sweep_partials(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.partial", "c.partial"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_a_lock_or_record_that_is_no_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "lock"
    if kind == "symlink":
        (tmp_path / "elsewhere").write_text("x")
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(NotRegularFile):
        open_lock_file(path)
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "x"  # never followed, never written
    else:  # reading follows a link to a regular file, and nothing else
        with pytest.raises(NotRegularFile):
            read_regular(path, 10)


def test_read_regular_reads_one_byte_past_the_limit_at_most(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100)
    assert len(read_regular(path, 10)) == 11


def test_an_output_that_is_an_input_under_another_name_is_refused(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"m")
    (tmp_path / "alias.onnx").symlink_to(model)
    with pytest.raises(InvalidInput, match="another name"):
        check_not_overwriting([tmp_path / "alias.onnx"], [model], "--out")
    with pytest.raises(InvalidInput, match="is inside it"):
        check_not_overwriting([], [model], "--out", replaced=[tmp_path])
    check_not_overwriting([tmp_path / "new.onnx"], [model], "--out")  # a new file: nothing to refuse
