"""compiler.core.digest: a model's digest covers its file and each external data file by name, however it is
read."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

from compiler.core.digest import finish_model_digest, hash_beside, hash_model_file, hash_model_file_mapped


def test_read_mapped_and_beside_give_the_same_digest_of_the_file(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(bytes(range(256)) * 5000)
    empty = tmp_path / "empty.onnx"
    empty.touch()
    with ThreadPoolExecutor(1) as pool:
        for path in (model, empty):
            expected = hashlib.sha256(path.read_bytes()).hexdigest()
            beside = hash_beside(pool, path).result()
            assert hash_model_file(path).hexdigest() == hash_model_file_mapped(path).hexdigest() == expected
            assert beside.hexdigest() == expected


def test_external_data_enters_by_name_and_in_name_order(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"graph")
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"weights")
    b.write_bytes(b"more")
    both = finish_model_digest(hash_model_file(model), (b, a))
    assert both == finish_model_digest(hash_model_file(model), (a, b))
    assert both != finish_model_digest(hash_model_file(model), ())
    a.rename(tmp_path / "c.bin")  # the same bytes under another name
    assert both != finish_model_digest(hash_model_file(model), (tmp_path / "c.bin", b))
