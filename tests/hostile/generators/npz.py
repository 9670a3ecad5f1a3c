"""npz data: dtypes, shapes, counts, values, names, header lies, zip damage, odd members."""

from __future__ import annotations

import io
import math
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.hostile.generators.common import (
    AMBIGUOUS,
    INVALID,
    MODEL_INPUT,
    SAMPLES,
    VALID,
    Made,
    digits_samples,
    make_fifo,
)


def npz_bytes(arrays: dict[str, Any], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def npy_bytes(array: np.ndarray, header: dict[str, Any] | None = None) -> bytes:
    """An .npy member; ``header`` overrides the header dict written (shape/descr/fortran_order), not the data."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    if header is None:
        return buffer.getvalue()
    data = buffer.getvalue()
    if (data[6], data[7]) == (1, 0):
        body = data[10 + struct.unpack("<H", data[8:10])[0] :]
    else:
        body = data[12 + struct.unpack("<I", data[8:12])[0] :]
    fields = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False, "shape": array.shape}
    fields.update(header)
    text = repr(fields).encode("latin1")
    pad = (-(10 + len(text) + 1)) % 64
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text) + pad + 1) + text + b" " * pad + b"\n" + body


def zip_members(members: dict[str, bytes], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npz_file(box, data: bytes, name: str = "data.npz") -> Path:
    path = box.inputs / name
    path.write_bytes(data)
    return path


DTYPES = (
    ">f4",
    "float16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "<U3",
    "datetime64[s]",
    "object",
    "structured",
    "float64",
    "float32",
)
"""``>f4`` is big-endian float32 (its dtype is not the model's float32 for numpy equality: a documented mismatch);
``float32`` is the valid control."""


@dataclass(frozen=True)
class NpzArrays:
    """An .npz of arrays derived from the digits samples: a dtype, a shape, a sample count, values, names and
    memory order changed."""

    dtype: str = "float32"
    shape: tuple[int, ...] | None = None
    count: int = SAMPLES
    poison: tuple[tuple[int, str], ...] = ()
    """(flat index, value) with value nan, inf, -inf, huge or tiny."""
    names: tuple[str, ...] = (MODEL_INPUT,)
    fortran: bool = False
    compressed: bool = False

    def arrays(self) -> dict[str, np.ndarray]:
        base = digits_samples(max(self.count, 1))[: self.count]
        if self.shape is not None:
            base = np.resize(base, self.shape)
        for index, value in self.poison:
            if base.size:
                base.reshape(-1)[index % base.size] = {
                    "nan": np.nan,
                    "inf": np.inf,
                    "-inf": -np.inf,
                    "huge": 3e38,
                    "tiny": 1e-45,
                }[value]
        if self.dtype == "object":
            array: np.ndarray = np.empty(base.shape, dtype=object)
            array[...] = 0.5
        elif self.dtype == "structured":
            array = np.zeros(base.shape, dtype=[("x", "<f4"), ("y", "<f4")])
        elif self.dtype.startswith("datetime64"):
            array = np.zeros(base.shape, dtype=self.dtype)
        elif self.dtype == "<U3":
            array = base.astype("<U3")
        else:
            array = base.astype(self.dtype)
        if self.fortran:
            array = np.asfortranarray(array)
        return {name: array for name in self.names}

    def verdict(self) -> str:
        shape = self.shape if self.shape is not None else (self.count, 1, 8, 8)
        if self.names != (MODEL_INPUT,) or self.dtype != "float32" or len(shape) != 4 or tuple(shape[1:]) != (1, 8, 8):
            return INVALID
        if shape[0] < 2 or any(value in ("nan", "inf", "-inf") for _, value in self.poison):
            return INVALID
        if any(value == "huge" for _, value in self.poison) or (self.fortran and math.prod(shape[1:]) > 1):
            return AMBIGUOUS  # activations that overflow; a Fortran-ordered array numpy.savez wrote
        return VALID

    def write(self, box) -> Made:
        arrays = self.arrays()
        return Made(_npz_file(box, npz_bytes(arrays, self.compressed)), self.verdict(), ("data.npz",))


@dataclass(frozen=True)
class NpzHeader:
    """A consistent zip whose .npy header lies: more rows than the data holds, fewer, another dtype, garbage."""

    lie: str
    amount: int
    compressed: bool

    def write(self, box) -> Made:
        array = digits_samples()
        verdict = INVALID
        header: dict[str, Any] | None = None
        raw: bytes | None = None
        if self.lie == "more-rows":
            header = {"shape": (SAMPLES + 1 + self.amount, 1, 8, 8)}
        elif self.lie == "far-more-rows":
            header = {"shape": (10**12 + self.amount, 1, 8, 8)}
        elif self.lie == "fewer-rows":
            header, verdict = {"shape": (2 + self.amount % (SAMPLES - 2), 1, 8, 8)}, AMBIGUOUS
        elif self.lie == "wider-dtype":
            header = {"descr": "<f8"}
        elif self.lie == "negative-dim":
            header = {"shape": (-SAMPLES, 1, 8, 8)}
        elif self.lie == "huge-inner-dims":
            header = {"shape": (SAMPLES, 2**40, 8, 8)}
        elif self.lie == "bad-descr":
            header = {"descr": "not-a-dtype"}
        elif self.lie == "pickle-descr":
            header = {"descr": "|O"}
        elif self.lie == "not-a-dict":
            raw = b"\x93NUMPY\x01\x00" + struct.pack("<H", 54) + b"[1, 2, 3]".ljust(53) + b"\n"
        elif self.lie == "code-in-header":
            raw = (
                b"\x93NUMPY\x01\x00"
                + struct.pack("<H", 118)
                + b"__import__('os').system('touch PWNED')".ljust(117)
                + b"\n"
            )
        elif self.lie == "bad-magic":
            raw = b"\x93NUMPZ\x01\x00" + npy_bytes(array)[8:]
        elif self.lie == "version-9":
            raw = b"\x93NUMPY\x09\x09" + npy_bytes(array)[8:]
        elif self.lie == "header-length-huge":
            raw = b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1) + b"{}"
        else:
            raise AssertionError(self.lie)
        member = raw if raw is not None else npy_bytes(array, header)
        data = zip_members({f"{MODEL_INPUT}.npy": member}, self.compressed)
        return Made(_npz_file(box, data), verdict, ("data.npz",))


HEADER_LIES = (
    "wider-dtype",
    "far-more-rows",
    "fewer-rows",
    "more-rows",
    "negative-dim",
    "huge-inner-dims",
    "bad-descr",
    "pickle-descr",
    "not-a-dict",
    "code-in-header",
    "bad-magic",
    "version-9",
    "header-length-huge",
)


@dataclass(frozen=True)
class NpzDamage:
    """A valid .npz damaged as bytes: a CRC that no longer matches (data flipped, or the CRC field), a deflate
    stream corrupted, the archive cut short, garbage before or after."""

    damage: str
    where: int
    compressed: bool

    def write(self, box) -> Made:
        data = bytearray(npz_bytes({MODEL_INPUT: digits_samples()}, self.compressed))
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
            info = archive.infolist()[0]
        name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
        start = info.header_offset + 30 + name_length + extra_length
        verdict = INVALID
        if self.damage == "data-bytes":  # CRC mismatch: the bytes changed, the recorded CRC did not
            position = start + 128 + self.where % (info.compress_size - 128)
            data[position] ^= 0x5A
        elif self.damage == "crc-field":
            for offset in (info.header_offset + 14, _central_offset(bytes(data)) + 16):
                data[offset] ^= 0xFF
        elif self.damage == "deflate-stream":
            for step in range(4):
                data[start + (self.where + 97 * step) % info.compress_size] ^= 0xA5
        elif self.damage == "truncated":
            data = data[: self.where % len(data)]
        elif self.damage == "size-field":  # the local header's uncompressed size says 4 GiB
            data[info.header_offset + 22 : info.header_offset + 26] = b"\xff\xff\xff\xfe"
            central = _central_offset(bytes(data))
            data[central + 24 : central + 28] = b"\xff\xff\xff\xfe"
        elif self.damage == "central-directory-cut":
            data = data[: _central_offset(bytes(data)) + 10]
        elif self.damage == "eocd-offset":  # the end record points past the file
            data[-6:-2] = struct.pack("<I", 2**31)
        elif self.damage == "prefix-garbage":  # a self-extractor style prefix: zip readers accept it
            data = bytearray(b"#!garbage\n" * (1 + self.where % 20)) + data
            verdict = AMBIGUOUS
        elif self.damage == "suffix-garbage":
            data += b"\0garbage" * (1 + self.where % 20)
            verdict = AMBIGUOUS
        else:
            raise AssertionError(self.damage)
        return Made(_npz_file(box, bytes(data)), verdict, ("data.npz",))


def _central_offset(data: bytes) -> int:
    return data.rindex(b"PK\x01\x02")


NPZ_DAMAGE = (
    "crc-field",
    "data-bytes",
    "deflate-stream",
    "truncated",
    "size-field",
    "central-directory-cut",
    "eocd-offset",
    "prefix-garbage",
    "suffix-garbage",
)


class _Boom:
    """Pickled, it runs ``touch <path>`` when loaded: a member that must never be unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@dataclass(frozen=True)
class NpzOddMembers:
    """Members that are not plain arrays: pickles (one that runs a command when loaded), an .npy that is a raw
    pickle, a scalar, no members at all, a plain .npy under an .npz name, odd member paths."""

    kind: str
    compressed: bool

    def write(self, box) -> Made:
        good = npy_bytes(digits_samples())
        name = "data.npz"
        verdict = INVALID
        if self.kind == "pickled-object-array":
            array = np.empty(2, dtype=object)
            array[0], array[1] = _Boom(str(box.outside / "PWNED")), [1, 2]
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(array)}, self.compressed)
        elif self.kind == "raw-pickle-member":
            data = zip_members({f"{MODEL_INPUT}.npy": pickle.dumps(_Boom(str(box.outside / "PWNED")))}, self.compressed)
        elif self.kind == "scalar":
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(np.float32(1.0).reshape(()))}, self.compressed)
        elif self.kind == "no-members":
            data = zip_members({}, self.compressed)
        elif self.kind == "only-other-files":
            data = zip_members({"README.txt": b"hello", f"{MODEL_INPUT}.pkl": pickle.dumps([1])}, self.compressed)
        elif self.kind == "plain-npy":
            data = good
        elif self.kind == "nested-member":
            data = zip_members({f"sub/{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "traversal-member":
            data = zip_members({f"../{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "duplicate-member":
            data = zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed)
            data = _duplicate(data, npy_bytes(digits_samples(3)), self.compressed)
            verdict = AMBIGUOUS
        elif self.kind == "directory":
            path = box.inputs / name
            path.mkdir()
            return Made(path, INVALID, (name,))
        elif self.kind == "fifo":
            return Made(make_fifo(box.inputs / name), INVALID, (name,))
        elif self.kind == "no-suffix":
            name, data = "data", zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed)
        elif self.kind == "upper-suffix":
            name, data, verdict = "data.NPZ", zip_members({f"{MODEL_INPUT}.npy": good}, self.compressed), VALID
        elif self.kind == "extra-array":
            data = zip_members({f"{MODEL_INPUT}.npy": good, "mask.npy": good}, self.compressed)
        elif self.kind == "zero-samples":
            data = zip_members({f"{MODEL_INPUT}.npy": npy_bytes(digits_samples()[:0])}, self.compressed)
        else:
            raise AssertionError(self.kind)
        return Made(_npz_file(box, data, name), verdict, (name,))


def _duplicate(data: bytes, other: bytes, compressed: bool) -> bytes:
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            archive.writestr(f"{MODEL_INPUT}.npy", other)
    return buffer.getvalue()


ODD_MEMBERS = (
    "traversal-member",
    "raw-pickle-member",
    "scalar",
    "no-members",
    "only-other-files",
    "plain-npy",
    "nested-member",
    "pickled-object-array",
    "duplicate-member",
    "directory",
    "fifo",
    "no-suffix",
    "upper-suffix",
    "extra-array",
    "zero-samples",
)

ARRAY_SHAPES = (
    (SAMPLES, 8, 8, 1),
    (SAMPLES, 1, 8, 8, 1),
    (SAMPLES, 3, 8, 8),
    (SAMPLES, 1, 8, 9),
    (SAMPLES, 64),
    (SAMPLES,),
    (SAMPLES, 1, 0, 8),
    (SAMPLES, 1, 8),
    (3, 1, 8, 8),
)


def npz_recipes(kind: str) -> st.SearchStrategy[Any]:
    compressed = st.booleans()
    return {
        "dtype": st.builds(NpzArrays, dtype=st.sampled_from(DTYPES), compressed=compressed),
        "shape": st.builds(NpzArrays, shape=st.sampled_from(ARRAY_SHAPES), compressed=compressed),
        "count": st.builds(NpzArrays, count=st.sampled_from([1, 0, 2, 3, SAMPLES]), compressed=compressed),
        "values": st.builds(
            NpzArrays,
            poison=st.lists(
                st.tuples(st.integers(0, 2**20), st.sampled_from(["nan", "inf", "-inf", "huge", "tiny"])),
                min_size=1,
                max_size=3,
            ).map(tuple),
            compressed=compressed,
        ),
        "names": st.builds(
            NpzArrays,
            names=st.sampled_from(
                [("",), ("img",), (MODEL_INPUT, "extra"), ("IMAGE",), (MODEL_INPUT + " ",), ("imagé",), ("a/b",)]
            ),
            compressed=compressed,
        ),
        "fortran": st.builds(NpzArrays, fortran=st.just(True), compressed=compressed),
        "header-lies": st.builds(NpzHeader, st.sampled_from(HEADER_LIES), st.integers(0, 2**16), compressed),
        "zip-damage": st.builds(NpzDamage, st.sampled_from(NPZ_DAMAGE), st.integers(0, 2**20), compressed),
        "odd-members": st.builds(NpzOddMembers, st.sampled_from(ODD_MEMBERS), compressed),
    }[kind]


NPZ_KINDS = ("dtype", "shape", "count", "values", "names", "fortran", "header-lies", "zip-damage", "odd-members")
