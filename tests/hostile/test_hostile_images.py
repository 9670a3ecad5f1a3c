"""Image folders whose preprocess.yaml or images declare more work than the model takes: refused (exit 2,
naming the file) before anything is decoded, in bounded time and memory."""

from __future__ import annotations

import io
import resource
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from compiler.core.errors import InvalidInput
from compiler.data.datasets import MAX_IMAGE_SIDE, ImageFolderDataset, ImagePreprocess
from tests.support.cli import assert_clean_error
from tests.support.digits import run_calibrate

MEMORY = 3 << 30


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _folder(path: Path, preprocess: str, count: int = 4) -> Path:
    from PIL import Image

    path.mkdir()
    for i in range(count):
        Image.new("L", (8, 8), i * 40).save(path / f"{i}.png")
    (path / "preprocess.yaml").write_text(preprocess)
    return path


def _dynamic_model(path: Path) -> Path:
    """A real model taking any height and width: [B, 1, H, W] -> GlobalAveragePool -> [B, 1]."""
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["image"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["score"]),
        ],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["B", 1, "H", "W"])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["B", 1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG that declares ``width`` x ``height`` grey pixels in a few bytes (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )
    return path


def _run(model: Path, folder: Path, out: Path):
    return run_calibrate(out, model=model, data=folder, timeout=30, preexec_fn=limited)


@pytest.mark.parametrize("size", ["[40000, 40000]", "[8, 40000]", "[9, 8]"])
def test_a_size_the_model_cannot_take_is_refused_before_decoding(tmp_path, digits_model, size):
    folder = _folder(tmp_path / "imgs", f"color: L\nsize: {size}\n")
    done = _run(digits_model, folder, tmp_path / "out")
    assert_clean_error(done, 2, "preprocess.yaml", f"size {size}", "expected 8", "set size: [8, 8]")
    assert not (tmp_path / "out").exists()


def test_a_size_beyond_the_documented_maximum_is_refused_for_dynamic_dims(tmp_path):
    model = _dynamic_model(tmp_path / "any_size.onnx")
    folder = _folder(tmp_path / "imgs", "color: L\nsize: [100000, 100000]\n")
    done = _run(model, folder, tmp_path / "out")
    assert_clean_error(done, 2, "preprocess.yaml", "size [100000, 100000]", str(MAX_IMAGE_SIDE))
    ok = tmp_path / "ok"
    (folder / "preprocess.yaml").write_text("color: L\nsize: [16, 12]\n")
    # fp16: the model has no op TensorRT runs in int8, which an int8 calibration now refuses
    calibrated = run_calibrate(
        ok, "--holdout", "1", "--min-samples", "0", "--precision", "fp16", model=model, data=folder, timeout=120
    )
    assert calibrated.exit_code == 0, calibrated.stderr


@pytest.mark.parametrize(
    ("side", "fragment"),
    [(10_000, "10000x10000 pixels is more than 89478485"), (20_000, "could be decompression bomb")],
)
def test_decompression_bombs_are_refused_naming_the_file(tmp_path, digits_model, side, fragment):
    """10000x10000 is past our limit and only a warning for Pillow; 20000x20000 an error of Pillow's too. The
    bomb is not the first image, so it is met while calibrating, not while validating."""
    folder = _folder(tmp_path / "imgs", "color: L\n", count=40)
    bomb = _png_header_only(folder / "7-bomb.png", side, side)
    done = _run(digits_model, folder, tmp_path / "out")
    line = assert_clean_error(done, 2, f"error: {bomb}: ", fragment)
    assert "onnxruntime" not in line and "Warning" not in done.stderr
    assert not (tmp_path / "out" / "model.onnx").exists()


@pytest.fixture(scope="module")
def image_bytes() -> dict[str, bytes]:
    from PIL import Image

    pixels = (np.arange(24 * 24 * 3) % 251).astype(np.uint8).reshape(24, 24, 3)
    out = {}
    for suffix, options in (
        (".png", {}),
        (".jpg", {"quality": 90}),
        (".gif", {}),
        (".bmp", {}),
        (".tif", {}),
        (".webp", {}),
    ):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=Image.registered_extensions()[suffix], **options)
        out[suffix] = buffer.getvalue()
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_images_are_invalid_input_or_pixels(tmp_path, image_bytes, data):
    """Whatever a damaged image file holds, decoding it gives the sample or an InvalidInput naming it."""
    suffix = data.draw(st.sampled_from(sorted(image_bytes)))
    raw = bytearray(image_bytes[suffix])
    cut = data.draw(st.integers(0, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(1, 255)), max_size=4))
    for offset, mask in flips:
        raw[offset] ^= mask
    file = tmp_path / f"damaged{suffix}"
    file.write_bytes(bytes(raw[:cut] if data.draw(st.booleans()) else raw))
    dataset = ImageFolderDataset(tmp_path, ImagePreprocess(color="L"), "image", (8, 8))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing on stderr but our error line
            pixels = dataset.load(file)
    except InvalidInput as exc:
        assert str(exc).startswith(str(file))
    else:
        assert pixels.shape == (1, 8, 8)
