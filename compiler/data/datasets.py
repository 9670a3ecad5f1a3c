"""Calibration data: ``.npz`` files and image folders, validated against the model before any work.

A dataset is read lazily, a few samples at a time, so memory stays bounded however many
samples it holds: uncompressed ``.npz`` members are memory-mapped, compressed ones are
decompressed as a stream, and images are decoded per batch.

- ``.npz``: one array per model input name, samples on axis 0.
- Image folder: ``*.png|jpg|jpeg|bmp|gif|tif|tiff|webp`` (sorted by path, sub-folders included) and a
  ``preprocess.yaml`` declaring how pixels become the model's input (see ``ImagePreprocess``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from math import prod
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from compiler.core.errors import InvalidInput
from compiler.core.files import file_sha256
from compiler.core.profiles import format_dims
from compiler.core.yaml import load_yaml
from compiler.data.model import OnnxModel, first_line
from compiler.data.model_inputs import ModelInput, model_inputs, output_sample_axes

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
PREPROCESS_FILE = "preprocess.yaml"
MAX_IMAGE_SIDE = 4096
"""The largest height or width an image folder is resized to (the model's, or ``size:`` for dynamic dims): one
4096x4096 RGB sample is 192 MiB of float32, a batch of 32 six GiB. Vision models take far less (224 to 1024)."""
MAX_SOURCE_PIXELS = 89_478_485
"""The largest image decoded: Pillow's own decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``, ~9459x9459,
256 MiB as RGB), checked from the file's header before decoding, whatever a caller set Pillow's to."""
SCAN_BYTES = 64 << 20
"""How much data the NaN scan reads at a time."""


class ImagePreprocess(BaseModel):
    """How an image folder becomes one model input (the folder's ``preprocess.yaml``).

    Pixels are converted to ``color``, resized to ``size`` (bilinear), divided by ``scale``, then
    ``(x - mean) / std`` per channel, and laid out as ``layout`` with samples on axis 0.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    input: str | None = Field(None, description="Model input name; optional when the model has one input.")
    size: tuple[int, int] | None = Field(None, description="[height, width]; default: the model's fixed H and W.")
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    color: Literal["RGB", "L"] = "RGB"
    scale: float = Field(255.0, gt=0)
    mean: list[float] = Field(default_factory=lambda: [0.0])
    std: list[float] = Field(default_factory=lambda: [1.0])

    @field_validator("size")
    @classmethod
    def _positive(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and min(size) <= 0:
            raise ValueError("size must be [height, width] with positive values")
        return size

    @field_validator("std")
    @classmethod
    def _nonzero(cls, std: list[float]) -> list[float]:
        if any(s == 0 for s in std):
            raise ValueError("std values must be non-zero")
        return std

    @property
    def channels(self) -> int:
        return 3 if self.color == "RGB" else 1


LABELS_ARRAY = "labels"
"""The ``.npz`` array that holds the labels ``--metric`` is given: set aside, never fed to the model (unless the
model has an input of that name)."""


class Dataset:
    """Samples for each model input, read a few at a time. Subclasses implement ``_read``."""

    path: Path
    kind: str
    names: tuple[str, ...]
    count: int

    axes: Mapping[str, int] = MappingProxyType({})
    """Inputs whose samples the model takes on another axis than 0 (``--sample-axis``); the file keeps them on 0."""
    output_axes: dict[str, int]
    """Outputs whose samples are on another axis than 0 (:func:`output_sample_axes`, and those
    :meth:`batch_first` finds)."""

    def __init__(self) -> None:
        self.output_axes = {}

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (ascending for streamed data) for every input, as contiguous arrays laid out
        as the model takes them (samples on each input's sample axis)."""
        return {
            name: np.ascontiguousarray(np.moveaxis(self._read(name, indices), 0, self.axes.get(name, 0)))
            for name in self.names
        }

    def batch_first(self, names: list[str], outputs: list[np.ndarray], count: int) -> list[np.ndarray]:
        """The model's outputs of a batch of ``count`` samples with their samples on axis 0, as every comparison
        counts them. An output whose axis 0 is not ``count`` long but exactly one other axis is (a recogniser's
        ``[T, batch, classes]``, whatever its declared shape says) has its samples there, from then on."""
        moved = []
        for name, output in zip(names, outputs, strict=True):
            axis = self.output_axes.get(name)
            if axis is None and output.ndim > 1 and output.shape[0] != count:
                found = [a for a in range(1, output.ndim) if output.shape[a] == count]
                if len(found) == 1:
                    axis = self.output_axes[name] = found[0]
            moved.append(np.moveaxis(output, axis, 0) if axis else output)
        return moved

    def _read(self, name: str, indices: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def labels(self) -> np.ndarray | None:
        """The data file's own :data:`LABELS_ARRAY`, whole; None when it has none."""
        return None

    @property
    def sha256(self) -> str:
        raise NotImplementedError

    def inputs(self) -> tuple[Path, ...]:
        """The files the samples are read from (what no output may overwrite)."""
        return (self.path,)

    def check_values(self) -> None:
        """Refuse values that would poison calibration (read in full: called only when work follows)."""

    def close(self) -> None:
        pass


DEFLATE_MAX_RATIO = 1032
"""Deflate cannot expand data more than ~1032:1 (zlib's technical details): a member that claims more
uncompressed bytes than that lies about its size."""


def _damage_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged archive raises: zipfile's CRC and header checks, zlib/lzma on a corrupt stream, a
    stream that ends early, numpy's header parser (a Python literal: SyntaxError, TokenError, an unknown dtype's
    TypeError)."""
    errors: list[type[BaseException]] = [
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        ValueError,
        NotImplementedError,
        SyntaxError,
        tokenize.TokenError,
        TypeError,
        KeyError,
        IndexError,
        struct.error,
        OverflowError,
    ]
    try:
        import lzma

        errors.append(lzma.LZMAError)
    except ImportError:  # a Python built without lzma: zipfile cannot read such members either
        pass
    return tuple(errors)


DAMAGED = _damage_errors()


class _NpyMember:
    """One array of an ``.npz``, readable by sample without loading the whole array.

    Its ``.npy`` header is checked against the member before anything is allocated: the bytes the header's
    shape and dtype need must be the bytes the zip entry holds (and, stored, the archive holds; deflated, at
    most what deflate can expand to), so a header declaring a billion samples is refused at once rather than
    driving a split and a scan sized by the lie. Memory is then bounded by what the file really holds.
    """

    def __init__(self, archive: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, archive_size: int) -> None:
        self.archive, self.zf, self.info = archive, zf, info
        self.name = info.filename[:-4]
        self.stored_at: int | None = None  # where a stored member's samples start in the archive
        self.file = None
        self.stream = None
        if info.header_offset + info.compress_size > archive_size:
            raise self.damaged(
                f"its {info.compress_size} bytes run past the end of the file ({archive_size} "
                f"bytes): the file is truncated"
            )
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise self.damaged(f"stored uncompressed, it claims {info.file_size} bytes but holds {info.compress_size}")
        if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > info.compress_size * DEFLATE_MAX_RATIO + (
            1 << 10
        ):
            raise self.damaged(
                f"it claims {info.file_size} bytes uncompressed from {info.compress_size} deflated, "
                f"more than deflate can expand to"
            )
        with self.reading():
            try:
                self.stream = zf.open(info)
            except RuntimeError as exc:  # zipfile: an encrypted member
                raise self.damaged(first_line(exc)) from None
            version = np.lib.format.read_magic(self.stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(self.stream)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(self.stream)
            self.data_offset = self.stream.tell()
        if dtype.hasobject:
            raise InvalidInput(f"{archive}: array '{self.name}' holds Python objects; save plain numeric arrays")
        if fortran and len(shape) > 1:
            raise InvalidInput(
                f"{archive}: array '{self.name}' is Fortran-ordered; save it with numpy.ascontiguousarray"
            )
        if any(d < 0 for d in shape):
            raise self.damaged(f"its header declares the negative shape {list(shape)}")
        self.shape, self.dtype = tuple(shape), dtype
        self.row_bytes = prod(shape[1:]) * dtype.itemsize if shape else dtype.itemsize
        declared = shape[0] * self.row_bytes if shape else dtype.itemsize
        held = info.file_size - self.data_offset
        if declared != held:
            raise self.damaged(
                f"its header declares shape {list(shape)} {dtype} ({declared} bytes) but the member "
                f"holds {max(held, 0)} bytes of data"
            )
        if shape and shape[0] and self.row_bytes == 0:
            raise InvalidInput(f"{archive}: array '{self.name}' has shape {list(shape)}: its samples hold no values")
        if info.compress_type == zipfile.ZIP_STORED and self.shape:
            with self.reading():
                with open(archive, "rb") as handle:  # the member's data starts after its local header
                    handle.seek(info.header_offset + 26)
                    name_length, extra_length = np.frombuffer(handle.read(4), dtype="<u2")
                start = info.header_offset + 30 + int(name_length) + int(extra_length) + self.data_offset
                if start + declared > archive_size:
                    raise self.damaged("its data runs past the end of the file: the file is truncated")
                self.stored_at, self.file = start, open(archive, "rb")  # noqa: SIM115 - closed by close()

    def damaged(self, problem: object) -> InvalidInput:
        return InvalidInput(
            f"{self.archive}: array '{self.name}' ({self.info.filename}) is damaged: {problem}; "
            f"write the file again (numpy.savez)"
        )

    @contextmanager
    def reading(self) -> Iterator[None]:
        """What a damaged member makes the readers raise, as InvalidInput naming the file and the array. An OSError
        with an errno is the disk's doing (EIO), left to be reported as such; bz2's "Invalid data stream" has none."""
        try:
            yield
        except DAMAGED as exc:
            raise self.damaged(first_line(exc)) from None
        except OSError as exc:
            if exc.errno not in (None, errno.EINVAL):  # EINVAL: a seek to where a lying offset points
                raise
            raise self.damaged(first_line(exc)) from None

    def rows(self, indices: np.ndarray) -> np.ndarray:
        if not self.shape:
            raise InvalidInput(f"{self.archive}: array '{self.name}' is a scalar; samples must be on axis 0")
        out = np.empty((len(indices), *self.shape[1:]), dtype=self.dtype)
        if self.stored_at is not None:
            self._read_stored(indices, out)
            return out
        with self.reading():
            for row, index in enumerate(indices):  # seeking forward in a compressed stream only decompresses
                self.stream.seek(self.data_offset + int(index) * self.row_bytes)
                out[row] = self._frombuffer(self.stream.read(self.row_bytes), 1, int(index)).reshape(self.shape[1:])
        return out

    def _read_stored(self, indices: np.ndarray, out: np.ndarray) -> None:
        """A stored member's rows read straight into ``out``: no memory map, whose pages stay in the process's
        resident memory once touched (256 images of 480x480 held 700 MiB more RSS than 32 at the end of a
        calibration); the page cache keeps them for the next read without counting against the process."""
        rows = out.view(np.uint8).reshape(len(indices), -1)
        fd = self.file.fileno()
        with self.reading():
            for row, index in enumerate(indices):
                if os.preadv(fd, [rows[row]], self.stored_at + int(index) * self.row_bytes) != self.row_bytes:
                    raise self.damaged(f"its data ends before sample {int(index)}: the file is truncated")

    def _frombuffer(self, data: bytes, count: int, first: int) -> np.ndarray:
        if len(data) != count * self.row_bytes:
            raise self.damaged(
                f"its data ends in sample {first + len(data) // max(self.row_bytes, 1)} of "
                f"{self.shape[0]} (the member is shorter than its size says)"
            )
        return np.frombuffer(data, dtype=self.dtype)

    def verify(self) -> None:
        """Read the member once, start to end: the zip's CRC-32 is checked at its end (memory-mapped reads of a
        stored member never check it), and float arrays are checked for NaN/Inf, a bounded chunk at a time."""
        count = self.shape[0] if self.shape else 1
        step = max(1, SCAN_BYTES // max(self.row_bytes, 1))
        with self.reading(), self.zf.open(self.info) as stream:
            stream.read(self.data_offset)
            for start in range(0, count, step):
                n = min(step, count - start)
                rows = self._frombuffer(stream.read(n * self.row_bytes), n, start)
                if self.dtype.kind in "fc" and self.shape:
                    self._check_finite(rows.reshape(n, -1), start)
            if stream.read(1):
                raise self.damaged("it holds more data than its header declares")

    def _check_finite(self, rows: np.ndarray, start: int) -> None:
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            index = int(np.argmax(bad))
            kind = "NaN" if np.isnan(rows[index]).any() else "Inf"
            raise InvalidInput(
                f"{self.archive}: array '{self.name}' has {kind} values (first in sample "
                f"{start + index}); clean the data before calibrating"
            )

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        if self.file is not None:
            self.file.close()
        self.stored_at = self.file = None


class NpzDataset(Dataset):
    kind = "npz"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.members: dict[str, _NpyMember] = {}
        self.labels_member: _NpyMember | None = None
        try:
            self.zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise InvalidInput(
                f"{path}: not a readable .npz file ({first_line(exc)}); write it with numpy.savez"
            ) from None
        try:
            size = path.stat().st_size
            for info in self.zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                if info.filename[:-4] in self.members:
                    raise InvalidInput(
                        f"{path}: array '{info.filename[:-4]}' is in the file twice; write it again with numpy.savez"
                    )
                self.members[info.filename[:-4]] = _NpyMember(path, self.zf, info, size)
        except InvalidInput:
            self.close()
            raise
        except (*DAMAGED, OSError) as exc:  # the archive's directory points where nothing is (a seek: EINVAL)
            self.close()
            if isinstance(exc, OSError) and exc.errno not in (None, errno.EINVAL):
                raise
            raise InvalidInput(
                f"{path}: not a readable .npz file ({first_line(exc)}); write it with numpy.savez"
            ) from None
        except BaseException:
            self.close()
            raise
        self.names = tuple(self.members)
        self.count = min(self.counts.values(), default=0)

    def set_labels_aside(self) -> None:
        """:data:`LABELS_ARRAY` out of the inputs (and the sample count), kept for :meth:`labels`."""
        self.labels_member = self.members.pop(LABELS_ARRAY, None)
        self.names = tuple(self.members)
        self.count = min(self.counts.values(), default=0)

    def labels(self) -> np.ndarray | None:
        member = self.labels_member
        return None if member is None else member.rows(np.arange(member.shape[0] if member.shape else 0))

    @property
    def counts(self) -> dict[str, int]:
        """Samples (axis 0) per array; :attr:`count` is the smallest."""
        return {name: m.shape[0] if m.shape else 0 for name, m in self.members.items()}

    def check_values(self) -> None:
        """Every member read once in full: damage (CRC) and NaN/Inf found before calibrating, not midway."""
        for member in (*self.members.values(), *filter(None, [self.labels_member])):
            member.verify()

    def _read(self, name: str, indices: np.ndarray) -> np.ndarray:
        return self.members[name].rows(indices)

    @property
    def sha256(self) -> str:
        return file_sha256(self.path)

    def close(self) -> None:
        for member in (*self.members.values(), *filter(None, [self.labels_member])):
            member.close()
        self.zf.close()


IMAGE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error, IndexError, TypeError, KeyError)
"""What Pillow raises on a damaged file besides UnidentifiedImageError (an OSError): "broken PNG file" is a
SyntaxError, a text chunk past its limit a ValueError, truncated headers struct.error or EOFError."""


class ImageFolderDataset(Dataset):
    kind = "images"

    def __init__(self, path: Path, preprocess: ImagePreprocess, name: str, size: tuple[int, int]) -> None:
        super().__init__()
        self.path, self.preprocess, self.size = path, preprocess, size
        self.files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        self.names = (name,)
        self.count = len(self.files)
        channels = preprocess.channels
        for field, values in (("mean", preprocess.mean), ("std", preprocess.std)):
            if len(values) not in (1, channels):
                raise InvalidInput(
                    f"{path / PREPROCESS_FILE}: {field} has {len(values)} values; "
                    f"give 1 or {channels} (one per {preprocess.color} channel)"
                )
        self.mean = np.asarray(preprocess.mean, dtype=np.float32)
        self.std = np.asarray(preprocess.std, dtype=np.float32)

    def load(self, file: Path) -> np.ndarray:
        import warnings

        from PIL import Image

        try:
            with warnings.catch_warnings():
                # Pillow warns (a Python warning: two lines of its source on stderr) on damaged metadata such as
                # EXIF, and on sizes our own limit below decides about: the pixels are what we read
                warnings.simplefilter("ignore")
                with Image.open(file) as image:  # reads the header only
                    width, height = image.size
                    if width * height > MAX_SOURCE_PIXELS:
                        raise InvalidInput(
                            f"{file}: {width}x{height} pixels is more than {MAX_SOURCE_PIXELS} (a "
                            f"decompression bomb, or a photo to downscale before calibrating)"
                        )
                    image = image.convert(self.preprocess.color).resize(
                        (self.size[1], self.size[0]), Image.Resampling.BILINEAR
                    )
                    pixels = np.asarray(image, dtype=np.float32)
        except Image.DecompressionBombError as exc:
            raise InvalidInput(f"{file}: {first_line(exc)}") from None
        except IMAGE_ERRORS as exc:
            raise InvalidInput(f"{file}: not a readable image ({first_line(exc)})") from None
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        pixels = (pixels / np.float32(self.preprocess.scale) - self.mean) / self.std
        return pixels.transpose(2, 0, 1) if self.preprocess.layout == "NCHW" else pixels

    def inputs(self) -> tuple[Path, ...]:
        return (*self.files, self.path / PREPROCESS_FILE)

    def _read(self, name: str, indices: np.ndarray) -> np.ndarray:
        return np.stack([self.load(self.files[int(i)]) for i in indices]).astype(np.float32, copy=False)

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256(self.preprocess.model_dump_json().encode() + b"\0")
        digest.update(repr(self.size).encode() + b"\0")
        for file in self.files:
            digest.update(file.relative_to(self.path).as_posix().encode() + b"\0")
            digest.update(bytes.fromhex(file_sha256(file)))
        return digest.hexdigest()


def open_dataset(
    data: str | Path,
    model: OnnxModel,
    preprocess: ImagePreprocess | None = None,
    sample_axes: dict[str, int] | None = None,
) -> Dataset:
    """Open ``data`` (an ``.npz`` or an image folder) and validate it against the model's inputs, whose samples are
    on axis 0 but where ``sample_axes`` says otherwise (the file keeps them on axis 0).

    Checks names, dtypes, shapes and sample counts; :meth:`Dataset.check_values` (NaN/Inf) reads every
    value, so the caller runs it only when it will calibrate. Raises InvalidInput naming the array or file.
    """
    path = Path(data)
    inputs = model_inputs(model, sample_axes)
    moved = {i.name: i.axis for i in inputs if i.axis}
    if moved and path.is_dir():
        raise InvalidInput(f"--sample-axis: {path} is an image folder, whose samples are on axis 0; use an .npz")
    if moved and any(i.batch is not None for i in inputs):
        raise InvalidInput(
            f"--sample-axis: {model.path} has a fixed batch size; a sample axis is declared for a model whose "
            f"batch is dynamic (an RNN's state [layers, batch, hidden])"
        )
    if not path.exists():
        raise InvalidInput(f"{path}: data not found; pass an .npz file or an image folder")
    if path.is_dir():
        dataset: Dataset = _open_images(path, inputs, preprocess)
    elif path.suffix.lower() == ".npz":
        if not path.is_file():  # a FIFO or a device would block the zip reader for good
            raise InvalidInput(f"{path}: not a regular file; pass the .npz file itself")
        dataset = NpzDataset(path)
        if LABELS_ARRAY not in {i.name for i in inputs}:
            dataset.set_labels_aside()
    else:
        raise InvalidInput(
            f"{path}: unsupported data; pass an .npz file (one array per input name, samples "
            f"on axis 0) or an image folder with {PREPROCESS_FILE}"
        )
    try:
        _validate(dataset, inputs, model)
    except BaseException:
        dataset.close()
        raise
    if moved:
        dataset.axes, dataset.output_axes = moved, output_sample_axes(model, inputs)
    return dataset


def _open_images(path: Path, inputs: list[ModelInput], preprocess: ImagePreprocess | None) -> Dataset:
    spec_file = path / PREPROCESS_FILE
    if preprocess is None:
        if not spec_file.is_file():
            raise InvalidInput(
                f"{path}: an image folder needs {PREPROCESS_FILE} declaring the preprocessing "
                f"(size, layout, color, scale, mean, std)"
            )
        preprocess = load_yaml(spec_file, ImagePreprocess)
    names = [i.name for i in inputs]
    if preprocess.input is None and len(inputs) != 1:
        raise InvalidInput(
            f"{spec_file}: the model has inputs {', '.join(names)}; an image folder feeds one: set input"
        )
    name = preprocess.input or names[0]
    if name not in names:
        raise InvalidInput(f"{spec_file}: input '{name}' is not a model input ({', '.join(names)})")
    if len(inputs) != 1:
        raise InvalidInput(
            f"{spec_file}: the model needs inputs {', '.join(names)}; an image folder feeds only "
            f"'{name}': use an .npz with every input"
        )
    dims = inputs[0].dims
    if len(dims) != 4:
        raise InvalidInput(f"{spec_file}: input '{name}' has rank {len(dims)}; images need a rank-4 input")
    h_axis, w_axis = (2, 3) if preprocess.layout == "NCHW" else (1, 2)
    size = preprocess.size or (dims[h_axis], dims[w_axis])
    if size[0] is None or size[1] is None:
        raise InvalidInput(f"{spec_file}: input '{name}' has dynamic height/width; set size: [height, width]")
    # Before any image is decoded: a size the model cannot take would be found only after resizing to it
    for axis, declared in zip((h_axis, w_axis), size, strict=True):
        if dims[axis] is not None and declared != dims[axis]:
            raise InvalidInput(
                f"{spec_file}: size {list(size)} does not fit input '{name}' {format_dims(dims)} "
                f"({preprocess.layout}: axis {axis} is {declared}, expected {dims[axis]}); set size: "
                f"[{dims[h_axis] or 'height'}, {dims[w_axis] or 'width'}] or leave size out"
            )
    if max(size) > MAX_IMAGE_SIDE:
        given = f"size {list(size)}" if preprocess.size else f"input '{name}' {format_dims(dims)}"
        raise InvalidInput(
            f"{spec_file}: {given} is beyond {MAX_IMAGE_SIDE} pixels a side, the most an image "
            f"folder is resized to; use an .npz for larger inputs"
        )
    dataset = ImageFolderDataset(path, preprocess, name, (int(size[0]), int(size[1])))
    if dataset.count == 0:
        raise InvalidInput(f"{path}: no images ({', '.join(IMAGE_SUFFIXES)}) in the folder")
    return dataset


def _validate(dataset: Dataset, inputs: list[ModelInput], model: OnnxModel) -> None:
    where = dataset.path
    expected = {i.name: i for i in inputs}
    missing = [name for name in expected if name not in dataset.names]
    if missing:
        scalars = [name for name in missing if not expected[name].dims]
        raise InvalidInput(
            f"{where}: no array for model input(s) {', '.join(missing)} (has "
            f"{', '.join(dataset.names) or 'none'}); save one array per input name"
            + (
                f", or freeze an input that is not a batch of samples with --const {scalars[0]}=VALUE "
                f"({scalars[0]} is a scalar)"
                if scalars
                else ""
            )
        )
    extra = [name for name in dataset.names if name not in expected]
    if extra:
        raise InvalidInput(
            f"{where}: array(s) {', '.join(extra)} are not inputs of {model.path.name} (inputs: {', '.join(expected)})"
        )
    if dataset.count == 0:
        raise InvalidInput(f"{where}: the dataset is empty (0 samples)")
    if isinstance(dataset, NpzDataset):
        counts = dataset.counts
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{n}: {c}" for n, c in counts.items())
            raise InvalidInput(f"{where}: arrays have different sample counts on axis 0 ({listed})")
        for name in dataset.names:
            member, spec = dataset.members[name], expected[name]
            _check_array(where, name, member.dtype, member.shape, spec)
    else:
        sample = dataset.read(np.array([0]))
        for name, array in sample.items():
            _check_array(where, name, array.dtype, (dataset.count, *array.shape[1:]), expected[name])


def sample_shapes(dataset: Dataset) -> dict[str, tuple[int, ...]]:
    """Each input's shape as the model takes it, the count of samples on its sample axis (an image folder's
    samples all have its first's shape)."""
    if isinstance(dataset, NpzDataset):
        shapes = {name: tuple(member.shape) for name, member in dataset.members.items()}
    else:
        first = dataset.read(np.array([0]))
        shapes = {name: (dataset.count, *array.shape[1:]) for name, array in first.items()}
    for name, axis in dataset.axes.items():
        count, *rest = shapes[name]
        shapes[name] = (*rest[:axis], count, *rest[axis:])
    return shapes


def _check_array(where: Path, name: str, dtype: np.dtype, shape: tuple[int, ...], spec: ModelInput) -> None:
    if dtype != spec.dtype:
        raise InvalidInput(
            f"{where}: array '{name}' is {dtype}, the model's input '{name}' needs {spec.dtype}; "
            f"convert it with .astype(numpy.{spec.dtype})"
        )
    if len(shape) != len(spec.dims):
        raise InvalidInput(
            f"{where}: array '{name}' has shape {list(shape)} (rank {len(shape)}); input '{name}' "
            f"has rank {len(spec.dims)} {format_dims(spec.dims)} with samples on axis {spec.axis}"
        )
    if not spec.axis and spec.dims and isinstance(spec.dims[0], int) and spec.dims[0] > 1 and None in spec.dims[1:]:
        batch_axis = spec.dims.index(None)
        raise InvalidInput(
            f"{where}: input '{name}' is {format_dims(spec.dims)}: axis 0 is a fixed {spec.dims[0]} and axis "
            f"{batch_axis} is dynamic, so its samples are not on axis 0 (an RNN's [steps, batch, …] or state "
            f"[layers, batch, …]); stacking the file's samples {list(shape)} on axis 0 would feed {spec.dims[0]} "
            f"samples as one. Declare where its samples are with --sample-axis {name}={batch_axis} (the file keeps "
            f"them on axis 0), or give it a constant state with --const"
        )
    for axis, (have, want) in enumerate(zip(shape[1:], spec.sample_dims, strict=True), start=1):
        if want is not None and have != want:
            raise InvalidInput(
                f"{where}: array '{name}' has shape {list(shape)}; input '{name}' needs "
                f"{format_dims(spec.dims)}"
                + (f" with samples on axis {spec.axis}" if spec.axis else "")
                + f" (axis {axis}{' of the file' if spec.axis else ''} is {have}, expected {want})"
            )
