"""Plan files are written past the page cache; what lands on disk must be exactly the plan."""

from __future__ import annotations

import errno
import os

import pytest

from compiler.cache import write_unbuffered

# around the 4 KiB blocks O_DIRECT writes and the 8 MiB chunks it copies through
SIZES = [0, 1, 4095, 4096, 4097, 8 << 20, (8 << 20) + 3, (20 << 20) + 12345]


@pytest.mark.parametrize("size", SIZES)
def test_written_file_is_exactly_the_data(tmp_path, size):
    data = os.urandom(size)
    target = tmp_path / "engine.plan"
    target.write_bytes(os.urandom(size + 9000))  # a longer old file must not leave a tail behind
    write_unbuffered(target, memoryview(data))
    assert target.read_bytes() == data


def _refuse_direct_open(real_open):
    def refusing(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)
    return refusing


def _refuse_writes(fd, data):
    raise OSError(errno.EINVAL, "Invalid argument")


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform: only the buffered path runs")
@pytest.mark.parametrize("refusal", ["open", "write"])
def test_filesystem_refusing_direct_io_gets_a_normal_write(tmp_path, monkeypatch, refusal):
    if refusal == "open":
        monkeypatch.setattr(os, "open", _refuse_direct_open(os.open))
    else:
        monkeypatch.setattr(os, "write", _refuse_writes)  # Path.write_bytes does not go through os.write
    data = os.urandom((8 << 20) + 5)
    target = tmp_path / "engine.plan"
    write_unbuffered(target, data)
    assert target.read_bytes() == data


def test_other_write_errors_are_not_swallowed(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_unbuffered(tmp_path / "missing-folder" / "engine.plan", b"plan")
