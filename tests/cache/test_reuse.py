"""The one reuse protocol (compiler.core.reuse) over a real folder store as the remote tier: a local hit never asks
the remote, a miss says why, a remote entry is verified and kept, one the stage refuses or whose bytes were
changed is dropped in one warning line, and a remote that cannot take what was made is a warning, not a failure."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from compiler.cache.reuse import open_tier
from compiler.core.records import CacheOutcome
from compiler.core.reuse import Refused, Reuse, with_warning

KIND = "checks"
FILE = "check.json"
KEY = "ab" * 32


@pytest.fixture
def remote(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("COMPILE_REMOTE_CACHE", raising=False)
    monkeypatch.delenv("COMPILE_REMOTE_CACHE_MODE", raising=False)
    return tmp_path / "remote"


def _made(tmp_path: Path, data: bytes) -> Path:
    folder = tmp_path / "made"
    folder.mkdir(exist_ok=True)
    (folder / FILE).write_bytes(data)
    return folder


def _sent(remote: Path, tmp_path: Path, data: bytes = b'{"verdict": "ok"}') -> Reuse:
    reuse = Reuse(open_tier(str(remote)), KIND, KEY)
    assert reuse.send(_made(tmp_path, data), [FILE]) is None
    return reuse


def _keeping(local: dict[str, bytes]):
    """A verify step that takes any entry and keeps its file in ``local``, with what it was handed."""
    seen = {}

    def verify(folder: Path, digests: dict[str, str]) -> bytes:
        seen.update(digests)
        local["kept"] = (folder / FILE).read_bytes()
        return local["kept"]

    return verify, seen


def test_a_local_hit_never_asks_the_remote(remote, tmp_path):
    reuse = _sent(remote, tmp_path)
    shutil.rmtree(remote)  # a remote that is gone: a hit must not notice
    found, outcome = reuse.take(lambda: b"here", lambda folder, digests: pytest.fail("fetched"))
    assert (found, outcome) == (b"here", CacheOutcome(source="hit"))


def test_a_miss_says_why_with_and_without_a_remote(remote, tmp_path):
    alone = Reuse(open_tier(None), KIND, KEY)
    assert not alone.remote
    assert alone.take(lambda: None, lambda f, d: b"", missing="no check.json of these inputs") == (
        None,
        CacheOutcome(source="miss", reason="no check.json of these inputs"),
    )
    assert alone.send(_made(tmp_path, b"{}"), [FILE]) is None  # nowhere to send: nothing said
    empty = Reuse(open_tier(str(remote)), KIND, KEY)
    found, outcome = empty.take(lambda: None, lambda f, d: pytest.fail("nothing to verify"))
    assert found is None
    assert outcome == CacheOutcome(source="miss", reason="in neither the local nor the remote cache")


def test_a_remote_entry_is_verified_kept_and_then_a_local_hit(remote, tmp_path):
    data = b'{"verdict": "ok"}'
    reuse = _sent(remote, tmp_path, data)
    local: dict[str, bytes] = {}
    verify, digests = _keeping(local)
    found, outcome = reuse.take(lambda: local.get("kept"), verify)
    assert (found, outcome) == (data, CacheOutcome(source="remote"))
    assert digests == {FILE: hashlib.sha256(data).hexdigest()}  # the sha256 each fetched file was verified against
    assert reuse.take(lambda: local.get("kept"), verify) == (data, CacheOutcome(source="hit"))


def test_an_entry_the_stage_refuses_is_dropped_in_one_warning_line(remote, tmp_path):
    reuse = _sent(remote, tmp_path)

    def contradicts(folder: Path, digests: dict[str, str]) -> bytes:
        raise Refused("its check.json is of other inputs")

    found, outcome = reuse.take(lambda: None, contradicts)
    assert found is None
    assert (outcome.source, outcome.reason) == ("miss", "the remote entry was damaged")
    assert outcome.warning == (
        f"remote cache {remote}: {KIND} entry {KEY[:12]} refused (its check.json is of other inputs); "
        "made again and replaced"
    )
    again = reuse.take(lambda: None, contradicts)[1]  # its index was removed: the rebuild replaces it
    assert again == CacheOutcome(source="miss", reason="in neither the local nor the remote cache")


def test_an_entry_whose_bytes_changed_is_refused_before_the_stage_sees_it(remote, tmp_path):
    data = b'{"verdict": "ok"}'
    reuse = _sent(remote, tmp_path, data)
    (blob,) = [p for p in remote.rglob("*") if p.is_file() and p.read_bytes() == data]
    blob.write_bytes(b'{"verdict": "no"}')  # same size, other bytes
    found, outcome = reuse.take(lambda: None, lambda f, d: pytest.fail("handed a damaged entry"))
    assert found is None and outcome.reason == "the remote entry was damaged"
    assert outcome.warning and "does not hash to the sha256 its index records" in outcome.warning


def test_a_remote_that_cannot_take_what_was_made_is_a_warning(remote, tmp_path):
    reuse = Reuse(open_tier(str(remote)), KIND, KEY)
    shutil.rmtree(remote)
    remote.write_bytes(b"not a folder any more")
    warning = reuse.send(_made(tmp_path, b"{}"), [FILE])
    assert warning and warning.startswith(f"remote cache {remote}: could not send {KIND} entry {KEY[:12]}: ")
    joined = with_warning(CacheOutcome(source="miss", reason="r", warning="first"), None, warning)
    assert joined.warning == f"first / {warning}" and joined.reason == "r"
