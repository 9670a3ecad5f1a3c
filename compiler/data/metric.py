"""The user's own accuracy metric (``--metric module:function``), for what cosine misses (box regression,
ranking): a function given the candidate's outputs, the FP32 reference's and the labels, returning a score.

    def top1(outputs, reference, labels):
        return float((outputs["logits"].argmax(1) == labels["labels"]).mean())

``outputs`` and ``reference`` map each output name to its array over every compared sample (samples on axis 0);
``labels`` maps each array of ``--labels FILE.npz`` (and ``labels``, the data file's own array of that name, never
fed to the model) to its rows for those samples, or is None. The module is a
dotted name importable from the working directory or a ``.py`` file path. It is the user's own code, run as is.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.core.errors import InvalidInput
from compiler.data.datasets import LABELS_ARRAY, Dataset
from compiler.data.model import first_line

MetricFunction = Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray] | None], float]


@dataclass(frozen=True)
class Metric:
    name: str
    function: MetricFunction

    def __call__(
        self, outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], labels: dict[str, np.ndarray] | None
    ) -> float:
        try:
            value = self.function(outputs, reference, labels)
        except Exception as exc:  # the user's code: its failure is named, not ours
            raise InvalidInput(f"--metric {self.name}: raised {type(exc).__name__}: {first_line(exc)}") from None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float | np.floating | np.integer)
            or not math.isfinite(float(value))
        ):
            raise InvalidInput(f"--metric {self.name}: returned {str(value)[:60]!r}; return a finite number")
        return float(value)


def load_metric(spec: str) -> Metric:
    """``module:function`` (a dotted module importable from the working directory, or a .py file) as a Metric."""
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name.isidentifier():
        raise InvalidInput(f"--metric {spec}: give MODULE:FUNCTION (metrics.top1, or path/to/metrics.py:top1)")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise InvalidInput(f"--metric {spec}: {path} is not a file")
            loader = importlib.util.spec_from_file_location(f"compile_metric_{path.stem}", path)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except InvalidInput:
        raise
    except Exception as exc:
        raise InvalidInput(
            f"--metric {spec}: cannot import {module_name}: {type(exc).__name__}: {first_line(exc)}"
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidInput(f"--metric {spec}: {module_name} has no function {function_name}")
    return Metric(spec, function)


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
