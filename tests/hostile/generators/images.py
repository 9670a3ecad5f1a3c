"""Image folders: headers, sizes, preprocess.yaml."""

from __future__ import annotations

import io
import math
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.hostile.generators.common import (
    INVALID,
    MODEL_INPUT,
    SAMPLES,
    VALID,
    Made,
    digits_samples,
    flip_bits,
    make_fifo,
)
from tests.hostile.generators.profiles import dump_yaml


def png_bytes(
    width: int, height: int, pixels: bytes, bit_depth: int = 8, color_type: int = 0, compress: bool = True
) -> bytes:
    """A PNG written by hand: the header may declare any size, whatever the data holds."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    data = zlib.compress(pixels) if compress else pixels
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def bmp_header_only(width: int, height: int) -> bytes:
    """A BMP header declaring width x height 8-bit pixels, with (almost) no pixel data."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 8, 0, 0, 2835, 2835, 256, 0)
    palette = b"".join(bytes((i, i, i, 0)) for i in range(256))
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + 64, 0, 0, offset) + info + palette + b"\0" * 64


def gif_header_only(width: int, height: int) -> bytes:
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", width, height, 0, 0, 0)
        + b","
        + struct.pack("<HHHHB", 0, 0, width, height, 0)
        + b"\x08\x02\x4c\x01\x00;"
    )


def digit_png(index: int, mode: str = "L", size: tuple[int, int] = (8, 8), fmt: str = "PNG") -> bytes:
    """Digit sample ``index`` as an image file of the given mode, size and format."""
    from PIL import Image

    pixels = (digits_samples()[index % SAMPLES, 0] * 255).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(pixels).resize(size)
    if mode == "I;16":
        image = Image.fromarray((np.asarray(image, dtype=np.uint16) * 257).astype("<u2"))
    elif mode != "L":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


VALID_PREPROCESS: dict[str, Any] = {
    "input": MODEL_INPUT,
    "layout": "NCHW",
    "color": "L",
    "scale": 255.0,
    "mean": [0.0],
    "std": [1.0],
}
"""What feeds the digits CNN from grayscale images (its fixed 8 x 8 is the default size)."""


def preprocess_verdict(data: Any) -> str:
    """The documented preprocess.yaml rules (docs/calibrate.md) against the digits CNN (one input, [B, 1, 8, 8]),
    for values whose meaning is clear (no numeric strings that a lenient reader might coerce)."""
    if data is None:
        data = {}
    if not isinstance(data, dict) or not set(data) <= set(VALID_PREPROCESS) | {"size"}:
        return INVALID
    merged = {"layout": "NCHW", "color": "RGB", "scale": 255.0, "mean": [0.0], "std": [1.0], **data}

    def number(value: Any) -> bool:
        return type(value) in (int, float) and math.isfinite(value)

    if merged.get("input") not in (None, MODEL_INPUT):
        return INVALID
    size = merged.get("size")
    if size is not None and (not isinstance(size, list) or [type(v) for v in size] != [int, int] or size != [8, 8]):
        return INVALID  # any other size makes images the model cannot take
    if merged["layout"] != "NCHW" or merged["color"] != "L":
        return INVALID  # NHWC or RGB: the wrong axis sizes for [B, 1, 8, 8]
    if not number(merged["scale"]) or merged["scale"] <= 0:
        return INVALID
    for key in ("mean", "std"):
        values = merged[key]
        if not isinstance(values, list) or len(values) != 1 or not all(number(v) for v in values):
            return INVALID  # non-finite constants poison every pixel, as NaN data would
    if merged["std"][0] == 0:
        return INVALID
    return VALID


PREPROCESS_VALUES: dict[str, tuple[Any, ...]] = {
    "size": (
        [1, 10**12],
        [100000, 100000],
        [2**31, 2**31],
        [10**12, 1],
        [8, 8],
        [0, 8],
        [-8, 8],
        [8],
        [8, 8, 8],
        [16, 16],
        [1, 1],
        "8x8",
        None,
        [8.5, 8],
        [[8], [8]],
        {"h": 8},
    ),
    "layout": ("NHWC", "NCHW", "CHW", "nchw", "", None, 4),
    "color": ("RGB", "L", "CMYK", "l", "", None, ["L"]),
    "scale": (float("nan"), 16, 1e-30, 0, -1, 255.0, float("inf"), "x", None, [255]),
    "mean": ([float("inf")], [0.5], [0.0, 0.0], [], [float("nan")], [0.0], 0.5, ["x"], None, [[0.0]]),
    "std": ([0], [-1.0], [1.0], [0.0, 1.0], [float("nan")], [float("inf")], [1e-30], 1.0, None),
    "input": ("image\nerror: forged", "nope", "", 5, None, MODEL_INPUT, "\x1b[2J"),
}


@dataclass(frozen=True)
class ImageFolder:
    """A folder of digit images with a preprocess.yaml: ``preprocess`` overrides fields (a None value drops the
    field), ``images`` says what the images are, ``damage`` what happens to one of them."""

    preprocess: tuple[tuple[str, Any], ...] = ()
    spec: str = "yaml"
    """``yaml`` (the fields), or a hostile whole file: ``missing``, ``directory``, ``not-a-mapping``, ``broken``,
    ``python-tag``, ``empty``, ``unknown-key``."""
    count: int = 4
    modes: tuple[str, ...] = ("L",)
    damage: str | None = None
    where: int = 0

    def write(self, box) -> Made:
        folder = box.inputs / "images"
        folder.mkdir()
        verdict = VALID
        names = ["images", "preprocess.yaml"]
        for index in range(self.count):
            mode = self.modes[index % len(self.modes)]
            fmt, suffix = {
                "CMYK": ("JPEG", ".jpg"),
                "F": ("TIFF", ".tif"),
                "I": ("TIFF", ".tiff"),
                "P": ("GIF", ".gif"),
                "1": ("BMP", ".bmp"),
                "RGBA": ("WEBP", ".webp"),
            }.get(mode, ("PNG", ".png"))
            sub = folder / ("nested" if index % 3 == 2 else "")
            sub.mkdir(exist_ok=True)
            size = (8, 8) if index % 2 == 0 else (5 + index, 12)
            (sub / f"{index:03d}{suffix.upper() if index == 1 else suffix}").write_bytes(
                digit_png(index, mode, size, fmt)
            )
        if self.count < 2:
            verdict = INVALID  # calibration needs at least 2 samples
        if self.damage is not None:
            target = folder / "000.png"
            names.append(target.name)
            verdict = _damage_image(target, self.damage, self.where, verdict)
        data = dict(VALID_PREPROCESS)
        for key, value in self.preprocess:
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        spec = folder / "preprocess.yaml"
        if self.spec == "yaml":
            spec.write_text(dump_yaml(data), encoding="utf-8")
            if preprocess_verdict(data) == INVALID:
                verdict = INVALID
        else:
            verdict = INVALID
            text = {
                "not-a-mapping": "- color: L\n",
                "broken": "color: [L\n",
                "empty": "",
                "python-tag": "color: !!python/object/apply:os.system ['true']\n",
                "unknown-key": dump_yaml({**data, "resize": "bicubic"}),
                "not-utf8": "color: L\nscale: 255\n# \udcff\n",
            }.get(self.spec)
            if self.spec == "directory":
                spec.mkdir()
            elif self.spec == "fifo":
                make_fifo(spec)
            elif text is not None:
                spec.write_bytes(text.encode("utf-8", "surrogateescape"))
            elif self.spec != "missing":
                raise AssertionError(self.spec)
        return Made(folder, verdict, tuple(names))


def _damage_image(path: Path, damage: str, where: int, verdict: str) -> str:
    data = path.read_bytes() if path.exists() else digit_png(0)
    if damage == "zero-bytes":
        path.write_bytes(b"")
    elif damage == "random-bytes":
        path.write_bytes(os.urandom(16) + bytes(range(256)) * (1 + where % 8))
    elif damage == "text":
        path.write_text("not an image\n")
    elif damage == "truncated":
        path.write_bytes(data[: 8 + where % max(1, len(data) - 8)])
        return _decodes(path, verdict)
    elif damage == "bit-flipped":
        path.write_bytes(flip_bits(data, [(8 + where, where % 8), (where * 7 + 33, (where + 3) % 8)]))
        return _decodes(path, verdict)
    elif damage.startswith("bomb-"):  # bomb-<format>-<width>x<height>: a header declaring a huge image
        fmt, dims = damage.split("-")[1:]
        width, height = map(int, dims.split("x"))
        path = path.with_suffix("." + fmt)
        path.write_bytes(
            {
                "png": lambda: png_bytes(width, height, b"\0" * 64),
                "bmp": lambda: bmp_header_only(width, height),
                "gif": lambda: gif_header_only(width, height),
            }[fmt]()
        )
    elif damage == "png-bad-crc":
        mutable = bytearray(data)
        mutable[29] ^= 0xFF  # inside the IHDR chunk's CRC
        path.write_bytes(bytes(mutable))
    elif damage == "wrong-suffix":  # a JPEG named .png: the content decides, a valid image
        path.write_bytes(digit_png(0, "L", (8, 8), "JPEG"))
        return verdict
    else:
        raise AssertionError(damage)
    return INVALID


def _decodes(path: Path, verdict: str) -> str:
    """The reference decode of one image (PIL, as documented): INVALID when it fails."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                image.convert("L").resize((8, 8))
    except Exception:
        return INVALID
    return verdict


IMAGE_DAMAGE = (
    "truncated",
    "random-bytes",
    "text",
    "zero-bytes",
    "bit-flipped",
    "png-bad-crc",
    "wrong-suffix",
    "bomb-png-100000x100000",
    "bomb-png-30000x30000",
    "bomb-png-12000x12000",
    "bomb-png-65535x1",
    "bomb-png-1x2147483647",
    "bomb-bmp-100000x100000",
    "bomb-bmp-12000x12000",
    "bomb-gif-65535x65535",
)
IMAGE_MODES = ("CMYK", "RGB", "RGBA", "P", "1", "I;16", "I", "F", "L", "LA")
SPEC_KINDS = (
    "fifo",
    "directory",
    "missing",
    "not-a-mapping",
    "broken",
    "python-tag",
    "empty",
    "unknown-key",
    "not-utf8",
)


def image_recipes(kind: str) -> st.SearchStrategy[Any]:
    def fields(keys: tuple[str, ...]) -> st.SearchStrategy[tuple[tuple[str, Any], ...]]:
        pair = st.sampled_from(keys).flatmap(
            lambda key: st.tuples(st.just(key), st.sampled_from(PREPROCESS_VALUES[key]))
        )
        return st.lists(pair, min_size=1, max_size=2, unique_by=lambda p: p[0]).map(tuple)

    return {
        "damaged-image": st.builds(ImageFolder, damage=st.sampled_from(IMAGE_DAMAGE), where=st.integers(0, 2**16)),
        "resize": st.builds(ImageFolder, preprocess=fields(("size",))),
        "preprocess-fields": st.builds(
            ImageFolder, preprocess=fields(tuple(k for k in PREPROCESS_VALUES if k != "size"))
        ),
        "preprocess-file": st.builds(ImageFolder, spec=st.sampled_from(SPEC_KINDS)),
        "counts-and-modes": st.builds(
            ImageFolder,
            count=st.sampled_from([5, 1, 0, 2]),
            modes=st.lists(st.sampled_from(IMAGE_MODES), min_size=1, max_size=3).map(tuple),
        ),
    }[kind]


IMAGE_KINDS = ("damaged-image", "resize", "preprocess-fields", "preprocess-file", "counts-and-modes")
