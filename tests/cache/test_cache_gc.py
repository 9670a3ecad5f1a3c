"""gc of the remote cache under a size cap: the oldest entries go until the rest fits, a blob two entries share is
counted once, and every entry's index is read once (not again when the unreferenced blobs are swept)."""

from __future__ import annotations

from collections import Counter

from compiler.cache.cache_gc import gc_cache
from compiler.cache.remote import open_remote


def _entries(remote: str, tmp_path, sizes: list[int]) -> list[str]:
    """One prepared-model entry per size, oldest first, each with a file of its own but the last, whose file is the
    same bytes as the one before it (one blob)."""
    cache = open_remote(remote)
    keys = []
    for index, size in enumerate(sizes):
        folder = tmp_path / f"entry-{index}"
        folder.mkdir()
        (folder / "fp16.onnx").write_bytes(bytes([min(index, len(sizes) - 2)]) * size)
        key = f"{index + 1:064x}"
        assert cache.send("prepared", key, folder, ["fp16.onnx"])
        keys.append(key)
    return keys


def test_a_size_cap_drops_the_oldest_until_the_rest_fits_reading_each_entry_once(tmp_path):
    remote = str(tmp_path / "remote")
    keys = _entries(remote, tmp_path, [100, 200, 300, 300])
    store = open_remote(remote).store
    reads: Counter[str] = Counter()
    read_entry = store.read_entry

    def counted(kind: str, key: str) -> bytes | None:
        reads[f"{kind}/{key}"] += 1
        return read_entry(kind, key)

    store.read_entry = counted  # type: ignore[method-assign]
    try:
        report = gc_cache(remote, max_bytes=350, grace_minutes=0)  # 600 bytes live: the shared blob once
    finally:
        del store.read_entry
    assert report.removed_entries == [f"prepared/{keys[0]}", f"prepared/{keys[1]}"]
    assert (report.kept_bytes, report.freed_bytes, report.removed_blobs) == (300, 300, 2)
    assert set(reads.values()) == {1} and len(reads) == 4
    assert sorted(store.entry_keys("prepared")) == keys[2:]
