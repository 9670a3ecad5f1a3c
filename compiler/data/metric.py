"""The user's own accuracy metric (``--metric module:function``), for what cosine misses (box regression,
ranking): a function given the candidate's outputs, the FP32 reference's and the labels, returning a score.

    def top1(outputs, reference, labels):
        return float((outputs["logits"].argmax(1) == labels["labels"]).mean())

``outputs`` and ``reference`` map each output name to its array over every compared sample (samples on axis 0);
``labels`` maps each array of ``--labels FILE.npz`` (and ``labels``, the data file's own array of that name, never
fed to the model) to its rows for those samples, or is None. The module is a
dotted name importable from the working directory or a ``.py`` file path.

It is the user's own code, so it runs in a child process of its own (:mod:`compiler.data.metric_worker`), once
to check that it imports and then once per score: whatever it does there (prints, ``sys.exit``, ``os._exit``, any
exception, a value that is no finite number, a hang past ``$COMPILE_METRIC_DEADLINE``) is one ``error:`` line and
exit 2, and our stdout stays ours. A call costs a Python start and the module's import (docs/calibrate.md).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.core.errors import InvalidInput
from compiler.data.datasets import LABELS_ARRAY, Dataset
from compiler.data.model import first_line


@dataclass(frozen=True)
class Metric:
    name: str
    """The ``--metric`` spec, as given."""

    def __call__(
        self, outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], labels: dict[str, np.ndarray] | None
    ) -> float:
        return _in_child(self.name, outputs, reference, labels)


def load_metric(spec: str) -> Metric:
    """``module:function`` (a dotted module importable from the working directory, or a .py file) as a Metric,
    its import tried now in its child (a bad one is exit 2 before any work)."""
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name.isidentifier():
        raise InvalidInput(f"--metric {spec}: give MODULE:FUNCTION (metrics.top1, or path/to/metrics.py:top1)")
    if module_name.endswith(".py") and not Path(module_name).is_file():
        raise InvalidInput(f"--metric {spec}: {module_name} is not a file")
    _in_child(spec, None, None, None)
    return Metric(spec)


MAX_ANSWER_BYTES = 64 << 10


def _in_child(
    spec: str,
    outputs: dict[str, np.ndarray] | None,
    reference: dict[str, np.ndarray] | None,
    labels: dict[str, np.ndarray] | None,
) -> float:
    """One run of the worker: the arrays saved for it in a folder of our own (removed after), its answer read
    there and checked again (it is written by a process that runs the user's code)."""
    from compiler.core import child, deadlines
    from compiler.data import metric_worker as worker

    seconds = deadlines.seconds(deadlines.METRIC, deadlines.METRIC_DEFAULT)
    with tempfile.TemporaryDirectory(prefix="compile-metric-") as folder:
        work = Path(folder)
        names = list(outputs or {})
        request = {"spec": spec, "import_only": outputs is None, "outputs": names}
        request["labels"] = None if labels is None else list(labels)
        arrays = {f"o{i}": outputs[n] for i, n in enumerate(names)} | {
            f"r{i}": reference[n] for i, n in enumerate(names)
        }
        arrays |= {f"l{i}": array for i, array in enumerate((labels or {}).values())}
        if outputs is not None:
            np.savez(work / worker.DATA, **arrays)
        (work / worker.REQUEST).write_text(json.dumps(request))
        command = [sys.executable, "-B", "-P", "-m", "compiler.data.metric_worker", folder]  # -B: writes no .pyc
        try:
            done = child.run(command, seconds)
        except OSError as exc:
            raise InvalidInput(f"--metric {spec}: its process could not start ({exc.strerror})") from None
        if done.timed_out:
            raise InvalidInput(
                f"--metric {spec}: gave no score within {seconds:g} s and was stopped; make it faster, or raise "
                f"${deadlines.METRIC} (seconds)"
            )
        return _answer(spec, work / worker.ANSWER, done)


def _answer(spec: str, path: Path, done) -> float:
    from compiler.core.child import last_line
    from compiler.core.text import printable

    try:
        with open(path, "rb") as handle:
            found = json.loads(handle.read(MAX_ANSWER_BYTES))
    except (OSError, ValueError, RecursionError):
        ended = f"exit {done.returncode}" if done.returncode >= 0 else f"signal {-done.returncode}"
        said = last_line(done.stderr)
        raise InvalidInput(
            f"--metric {spec}: its process ended ({ended}) without a score (os._exit, a crash or a kill?)"
            + (f": {said}" if said else "")
        ) from None
    error, value = (found.get("error"), found.get("value")) if isinstance(found, dict) else (None, None)
    if isinstance(error, str):
        raise InvalidInput(f"--metric {spec}: {printable(error[:300])}")
    if not isinstance(value, float) or not math.isfinite(value):
        raise InvalidInput(f"--metric {spec}: its process answered no score; return a finite number")
    return value


def metric_and_labels(
    spec: str | None, threshold: float | None, labels: Path | None, dataset: Dataset | None
) -> tuple[Metric | None, dict[str, np.ndarray] | None]:
    """``--metric`` loaded and its labels read before any work (a bad one is exit 2 at once): ``--labels`` and the
    data file's own ``labels`` array, which must agree when both are given."""
    if spec is None:
        if threshold is not None:
            raise InvalidInput("--min-metric needs --metric MODULE:FUNCTION (the score it holds to the threshold)")
        return None, None
    count = dataset.count if dataset is not None else 0
    given = load_labels(labels, count)
    inline = None if dataset is None else dataset.labels()
    if inline is None:
        return load_metric(spec), given
    where = f"{dataset.path}: array '{LABELS_ARRAY}'"
    _check_rows(where, inline, count)
    if given is not None and LABELS_ARRAY in given and not np.array_equal(given[LABELS_ARRAY], inline):
        differs = _difference(given[LABELS_ARRAY], inline)
        raise InvalidInput(
            f"--labels {labels}: array '{LABELS_ARRAY}' disagrees with {where} ({differs}); give the "
            f"labels in one place"
        )
    return load_metric(spec), {LABELS_ARRAY: inline, **(given or {})}


def load_labels(path: Path | None, count: int) -> dict[str, np.ndarray] | None:
    """``--labels FILE.npz``: arrays of numbers with one row per sample of the data (``count``), loaded without
    pickles."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"--labels {path}: not a file; pass an .npz with one row per data sample")
    try:
        with np.load(path, allow_pickle=False) as archive:
            labels = {name: archive[name] for name in archive.files}
    except Exception as exc:
        raise InvalidInput(f"--labels {path}: not a readable .npz ({first_line(exc)})") from None
    for name, array in labels.items():
        _check_rows(f"--labels {path}: array '{name}'", array, count)
    return labels


def _check_rows(where: str, array: np.ndarray, count: int) -> None:
    if array.dtype.kind not in "biuf":
        raise InvalidInput(f"{where} is {array.dtype}; labels are numbers (integers, floats or booleans)")
    if array.ndim == 0 or len(array) != count:
        raise InvalidInput(
            f"{where} has {len(array) if array.ndim else 0} rows; the data has {count} samples: give "
            f"one label row per sample"
        )


def _difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shape {list(a.shape)} against {list(b.shape)}"
    row = int(np.argmax((a != b).reshape(len(a), -1).any(axis=1)))
    return f"first at row {row}: {a[row]} against {b[row]}"


class MetricRun:
    """The outputs of every compared batch kept for the metric (it sees all samples at once)."""

    def __init__(
        self, metric: Metric, names: list[str], labels: dict[str, np.ndarray] | None, indices: np.ndarray
    ) -> None:
        self.metric, self.names = metric, names
        self.labels = None if labels is None else {k: v[indices] for k, v in labels.items()}
        self.actual: dict[str, list[np.ndarray]] = {n: [] for n in names}
        self.expected: dict[str, list[np.ndarray]] = {n: [] for n in names}

    def add(self, expected: list[np.ndarray], actual: list[np.ndarray]) -> None:
        for name, a, b in zip(self.names, expected, actual, strict=True):
            self.expected[name].append(np.asarray(a))
            self.actual[name].append(np.asarray(b))

    def value(self) -> float:
        return self.metric(
            {n: np.concatenate(v) for n, v in self.actual.items()},
            {n: np.concatenate(v) for n, v in self.expected.items()},
            self.labels,
        )
