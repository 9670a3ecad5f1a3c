"""Golden inputs: a few of the check's samples and the FP32 model's outputs for them, written beside check.json as
golden.npz so publish stores them with the release (compiler.releases.golden reads them back)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.core.files import write_atomic
from compiler.core.records import GOLDEN_FILE, GOLDEN_MAX_BYTES, BlobRef, GoldenRecord, GoldenTensor

if TYPE_CHECKING:  # still_there is read by every reuse of a check, which must not import numpy
    import numpy as np

SAMPLES = 4
"""A few: enough to see a plan compute, small enough to ship with every release."""


def capture(
    folder: Path, dataset, indices: np.ndarray, reference: dict[str, np.ndarray], batch: int | None
) -> GoldenRecord | None:
    """golden.npz of the first samples checked (a whole batch of a fixed-batch model) and their FP32 outputs; none
    for a model that takes samples on another axis than 0 (``--sample-axis``): golden inputs are fed as they are
    stored, samples on axis 0."""
    count = min(len(indices), max(SAMPLES, batch or 1) // (batch or 1) * (batch or 1))
    if count < 1 or dataset.axes:
        return None
    inputs = dataset.read(indices[:count])
    return write_golden_npz(
        folder / GOLDEN_FILE, inputs, {name: values[:count] for name, values in reference.items()}, batch or 1
    )


def write_golden_npz(
    path: Path, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray], step: int = 1
) -> GoldenRecord | None:
    """golden.npz of these samples (uncompressed, atomically) and its record; None when even one sample would be
    over :data:`GOLDEN_MAX_BYTES` (then no file is written)."""
    count = min(len(a) for a in [*inputs.values(), *outputs.values()])
    per_sample = sum(a[:1].nbytes for a in [*inputs.values(), *outputs.values()])
    count = min(count, (GOLDEN_MAX_BYTES - 64 * 1024) // max(per_sample, 1))  # room for the zip's own headers
    count -= count % step
    if count < 1:
        return None
    import numpy as np

    arrays = {f"input_{i}": np.ascontiguousarray(a[:count]) for i, a in enumerate(inputs.values())}
    arrays |= {f"output_{i}": np.ascontiguousarray(a[:count]) for i, a in enumerate(outputs.values())}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    if len(data) > GOLDEN_MAX_BYTES:
        return None
    write_atomic(path, data)
    return GoldenRecord(
        blob=BlobRef(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)),
        samples=count,
        inputs=_listing(inputs, count),
        outputs=_listing(outputs, count),
    )


def _listing(arrays: dict[str, np.ndarray], count: int) -> list[GoldenTensor]:
    return [GoldenTensor(name=name, dtype=str(a.dtype), shape=[count, *a.shape[1:]]) for name, a in arrays.items()]


def still_there(folder: Path, record: GoldenRecord) -> bool:
    """Whether the folder's golden.npz is still the file ``record`` describes (a check reusing its earlier report
    writes it again otherwise)."""
    from compiler.core.files import file_sha256

    path = folder / GOLDEN_FILE
    return (
        path.is_file()
        and not path.is_symlink()
        and path.stat().st_size == record.blob.size_bytes
        and file_sha256(path) == record.blob.sha256
    )
