"""How far a lower-precision model's outputs are from FP32's, in scale-free figures, and the default gates on them.

``compile calibrate`` (held-out samples) and ``compile check`` (the model each engine was built from) use this one
module, so a calibration that collapses accuracy fails where it is made, with the figures check would give.

Why these figures (docs/check.md): an absolute tolerance means nothing for an output whose values are large (a
detector's logits of +-40 fail ``atol 0.1`` on rounding alone while every decision agrees). Cosine similarity (the
mean over samples, and a low quantile rather than the single worst sample of a near-zero output), the signal to
quantization-noise ratio against the reference's spread (SQNR, dB), and top-1/top-5 agreement of class scores do not
depend on the output's scale. NaN and Inf are always fatal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.core.output_kind import OutputKind, parse_output
from compiler.core.records import Gate, OutputReport
from compiler.core.text import gate_figure
from compiler.data.output_kinds import KindTally
from compiler.data.session import cosine_per_sample

COSINE_QUANTILE = 0.05
"""``cosine_low`` is this quantile of the per-sample cosines: one near-zero sample cannot fail a model alone, a
tail of bad ones does."""
LOW_COSINE_SLACK = 5.0
"""``min-cosine-low`` allows the low quantile this many times the mean's shortfall (0.99 mean -> 0.95)."""
SQNR_CAP = 200.0
"""SQNR of an exact match (no noise at all), kept finite for JSON."""
TOP_K = 5
BOOTSTRAP_ROUNDS = 400
"""Resamples of the judged samples behind each 95 % interval (seeded: the same samples give the same interval)."""
MAX_BOOTSTRAP_DRAWS = 1 << 22
"""Indices drawn at most (rounds x samples): a figure on 100,000 samples takes fewer rounds, not more memory."""
GATE_FIGURES = {
    "min-cosine": "cosine_mean",
    "min-cosine-low": "cosine_low",
    "min-sqnr": "sqnr_db",
    "min-top1": "top1_agreement",
}
"""The gates whose figure has a 95 % interval (``OutputReport.intervals``), by the figure's name."""
GATE_TEXT = {
    "min-cosine": "cosine mean",
    "min-cosine-low": f"cosine {COSINE_QUANTILE:.0%} quantile",
    "min-sqnr": "SQNR",
    "min-top1": "top-1 agreement",
}


@dataclass(frozen=True)
class Limits:
    """One output's accuracy gates. ``max_abs_error`` is optional (no default): an absolute figure means something
    only to someone who knows the output's scale."""

    min_cosine: float
    min_sqnr_db: float
    min_top1: float
    max_abs_error: float | None = None
    on_bound: bool = False
    """Gate the figures that have a 95 % interval (:data:`GATE_FIGURES`) on its lower end (``--gate-on
    lower-bound``): a threshold inside the interval is neither pass nor fail but not enough held-out data."""

    @property
    def min_cosine_low(self) -> float:
        return max(-1.0, 1.0 - LOW_COSINE_SLACK * (1.0 - self.min_cosine))

    @property
    def min_found(self) -> float:
        """A declared kind's own gate (detection recall and precision, dense IoU) unless its declaration sets one:
        as strict as top-1 agreement."""
        return self.min_top1

    @property
    def min_top5(self) -> float:
        """The reference's top-5 must hold the candidate's choice half as often as top-1 may miss."""
        return (1.0 + self.min_top1) / 2


DEFAULTS: dict[str, Limits] = {
    "fp16": Limits(min_cosine=0.999, min_sqnr_db=30.0, min_top1=0.99),
    "int8": Limits(min_cosine=0.98, min_sqnr_db=12.0, min_top1=0.90),
    "fp8": Limits(min_cosine=0.96, min_sqnr_db=12.0, min_top1=0.90),
}
"""Per precision; why each (and what the bundled and test models measure) is in docs/check.md. They catch a
collapse (one outlier channel under per-tensor INT8: cosine 0.80) without failing sound conversions on rounding:
FP16 rounds to ~5e-4 relative (30 dB: an error 3 % of the output's spread); INT8 has 255 levels per tensor and
FP8 E4M3 three mantissa bits (6 % relative per value), and 12 dB (an error a quarter of the spread) is where the
decisions of the models measured start to move."""


def limits(
    precision: str,
    min_cosine: float | None = None,
    min_sqnr_db: float | None = None,
    min_top1: float | None = None,
    max_abs_error: float | None = None,
    gate_on: str = "estimate",
) -> Limits:
    """The precision's defaults with the values given in their place."""
    base = DEFAULTS[precision]
    return Limits(
        min_cosine=base.min_cosine if min_cosine is None else min_cosine,
        min_sqnr_db=base.min_sqnr_db if min_sqnr_db is None else min_sqnr_db,
        min_top1=base.min_top1 if min_top1 is None else min_top1,
        max_abs_error=max_abs_error,
        on_bound=gate_on == "lower-bound",
    )


class _Output:
    def __init__(self) -> None:
        self.cosines: list[np.ndarray] = []
        self.signal = self.signal_sq = self.noise_sq = self.abs_sum = self.max_abs = 0.0
        self.elements = self.nonfinite = self.top1 = self.top5 = 0
        self.classes = self.steps = 0
        self.per_sample: list[np.ndarray] = []
        """Per batch, each sample's (sum, sum of squares, squared error, agreeing steps, steps): the bootstrap's."""


def _class_axis(array: np.ndarray) -> bool:
    """Whether the last axis holds class scores: a float [B, C] (C > 1) or a sequence of them [B, T, C] (CTC)."""
    return array.ndim in (2, 3) and array.shape[-1] > 1 and np.issubdtype(array.dtype, np.floating)


def _centred(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Scores with each sample's (or step's) mean over the classes taken off: the shift-invariant part."""
    scores = flat.reshape(-1, shape[-1])
    return (scores - scores.mean(axis=1, keepdims=True)).reshape(flat.shape)


class Agreement:
    """Figures of every output, accumulated batch by batch (memory bounded by one batch). ``kinds`` are the
    outputs declared with ``--output``; ``notes`` say what the report could not judge alone (mixed outputs)."""

    def __init__(
        self, names: list[str], kinds: dict[str, OutputKind] | None = None, notes: dict[str, str] | None = None
    ) -> None:
        self.names = names
        self.outputs = {name: _Output() for name in names}
        self.kinds = kinds or {}
        self.notes = {name: note for name, note in (notes or {}).items() if name not in self.kinds}
        self.tallies = {name: KindTally(spec) for name, spec in self.kinds.items()}
        self.samples = 0

    def add(self, expected: list[np.ndarray], actual: list[np.ndarray]) -> None:
        """One batch: the reference's outputs and the candidate's, in ``names`` order."""
        count = len(expected[0]) if expected else 0
        self.samples += count
        for name, a, b in zip(self.names, expected, actual, strict=True):
            out = self.outputs[name]
            scores = self._scores(name, np.asarray(a))
            if name in self.tallies:
                self.tallies[name].add(np.asarray(a), np.asarray(b))
            ref = np.asarray(a, dtype=np.float64).reshape(count, -1)
            cand = np.asarray(b, dtype=np.float64).reshape(count, -1)
            finite = np.isfinite(cand)
            out.nonfinite += int(cand.size - np.count_nonzero(finite))
            cand = np.where(finite, cand, 0.0)  # counted above; the other figures describe the finite values
            out.cosines.append(cosine_per_sample(ref, cand))
            diff = np.abs(ref - cand)
            out.max_abs = max(out.max_abs, float(diff.max()) if diff.size else 0.0)
            out.abs_sum += float(diff.sum())
            if scores:  # class scores, per sample or per step: a shift of all of them is no error (softmax ignores it)
                centred = _centred(ref, np.asarray(a).shape)
                if (centred * centred).sum() > 1e-9 * (ref * ref).sum():  # scores that differ at all (not a constant)
                    ref, cand = centred, _centred(cand, np.asarray(a).shape)
            noise = ((ref - cand) ** 2).sum(axis=1)
            out.noise_sq += float(noise.sum())
            out.signal += float(ref.sum())
            out.signal_sq += float((ref * ref).sum())
            out.elements += ref.size
            agreeing = steps = np.zeros(count)
            if scores:
                agreeing, steps = self._agreement(
                    out, np.asarray(a, dtype=np.float64), np.where(np.isfinite(b), b, 0.0), count
                )
            out.per_sample.append(np.stack([ref.sum(axis=1), (ref * ref).sum(axis=1), noise, agreeing, steps], 1))

    def _scores(self, name: str, array: np.ndarray) -> bool:
        """Whether the last axis holds class scores: as declared, else by shape."""
        spec = self.kinds.get(name)
        if spec is None:
            return _class_axis(array)
        return spec.kind in ("logits", "sequence") and array.ndim >= 2 and array.shape[-1] > 1

    @staticmethod
    def _agreement(out: _Output, ref: np.ndarray, cand: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-1 (and top-5) agreement over the class axis, per sample ([B, C]) or per step ([B, T, C]); each
        sample's agreeing steps and steps."""
        classes = ref.shape[-1]
        ref, cand = ref.reshape(-1, classes), cand.reshape(-1, classes)
        out.classes, out.steps = classes, out.steps + len(ref)
        chosen = cand.argmax(axis=1)
        agree = ref.argmax(axis=1) == chosen
        out.top1 += int(agree.sum())
        if classes > TOP_K:
            best = np.argpartition(-ref, TOP_K - 1, axis=1)[:, :TOP_K]
            out.top5 += int((best == chosen[:, None]).any(axis=1).sum())
        per_sample = agree.reshape(count, -1)
        return per_sample.sum(axis=1).astype(np.float64), np.full(count, per_sample.shape[1], dtype=np.float64)

    def reports(self) -> list[OutputReport]:
        return [self._report(name, out) for name, out in self.outputs.items()]

    def _report(self, name: str, out: _Output) -> OutputReport:
        cosines = np.concatenate(out.cosines) if out.cosines else np.ones(1)
        sqnr = sqnr_db(out.signal, out.signal_sq, out.noise_sq, out.elements)
        samples = self.samples
        sequence = out.classes and out.steps > samples
        spec = self.kinds.get(name)
        inferred = "sequence" if sequence else "class-scores" if out.classes else "tensor"
        return OutputReport(
            name=name,
            kind=spec.kind if spec else inferred,
            declared=spec.text if spec else None,
            note=self.notes.get(name),
            **(self.tallies[name].figures() if name in self.tallies else {}),
            samples=samples,
            cosine_mean=float(cosines.mean()),
            cosine_min=float(cosines.min()),
            cosine_low=float(np.quantile(cosines, COSINE_QUANTILE)),
            sqnr_db=sqnr,
            max_abs_error=out.max_abs,
            mean_abs_error=out.abs_sum / max(out.elements, 1),
            nonfinite=out.nonfinite,
            top1_agreement=out.top1 / out.steps if out.classes and out.steps else None,
            top5_agreement=out.top5 / out.steps if out.classes > TOP_K and out.steps else None,
            intervals=_intervals(out, cosines, out.elements // max(samples, 1)),
        )


def _intervals(out: _Output, cosines: np.ndarray, per_sample: int) -> dict[str, list[float]] | None:
    """95 % bootstrap intervals of the gated figures: the samples resampled with replacement, each figure made again
    from the resampled samples' sums (None for fewer than 2 samples)."""
    if not out.per_sample or len(cosines) < 2:
        return None
    sums = np.concatenate(out.per_sample)
    count = len(sums)
    rounds = max(20, min(BOOTSTRAP_ROUNDS, MAX_BOOTSTRAP_DRAWS // count))
    drawn = np.random.default_rng(0).integers(0, count, (rounds, count))
    totals = sums[drawn].sum(axis=1)  # rounds x (sum, squares, noise, agreeing, steps)
    figures = {
        "cosine_mean": cosines[drawn].mean(axis=1),
        "cosine_low": np.quantile(cosines[drawn], COSINE_QUANTILE, axis=1),
        "sqnr_db": np.array([sqnr_db(s, q, n, per_sample * count) for s, q, n in totals[:, :3]]),
    }
    if out.classes:
        figures["top1_agreement"] = totals[:, 3] / np.maximum(totals[:, 4], 1)
    return {name: [float(v) for v in np.quantile(values, [0.025, 0.975])] for name, values in figures.items()}


def sqnr_db(total: float, squares: float, noise: float, count: int) -> float:
    """10 log10(spread / noise), the spread being the sum of (ref - mean)^2; a reference with no spread (a
    constant output) is measured against its own energy instead, and an exact match is :data:`SQNR_CAP`."""
    if noise == 0:
        return SQNR_CAP
    spread = squares - total * total / max(count, 1)
    base = spread if spread > 1e-9 * squares else squares
    if base <= 0:
        return -SQNR_CAP
    return round(max(-SQNR_CAP, min(SQNR_CAP, 10 * math.log10(base / noise))), 3)


def judge(output: OutputReport, limit: Limits) -> list[Gate]:
    """Every gate of one output: NaN/Inf (always), then what its kind is judged by: a declared ``detection`` by
    recall and precision, ``dense`` by its mask IoU and mean cosine, ``embedding`` by cosine; anything else by
    cosine mean and low quantile, SQNR and top-1/top-5 agreement (class scores); max absolute error when given."""

    def gate(name: str, value: float, threshold: float, passed: bool) -> Gate:
        interval = (output.intervals or {}).get(GATE_FIGURES.get(name, ""))
        if limit.on_bound and interval is not None:
            passed = passed and interval[0] >= threshold
        return Gate(name=name, output=output.name, value=value, threshold=threshold, passed=passed, interval=interval)

    found = [gate("finite", float(output.nonfinite), 0.0, output.nonfinite == 0)]
    declared = parse_output(output.declared) if output.declared else None
    least = declared.minimum if declared and declared.minimum is not None else limit.min_found
    if output.kind == "detection":
        for name, value in (("min-recall", output.recall), ("min-precision", output.precision)):
            if value is not None:
                found.append(gate(name, value, least, value >= least))
        return found + _abs_gate(output, limit, gate)
    found.append(gate("min-cosine", output.cosine_mean, limit.min_cosine, output.cosine_mean >= limit.min_cosine))
    if output.kind == "dense":
        if output.iou is not None:
            found.append(gate("min-iou", output.iou, least, output.iou >= least))
        return found + _abs_gate(output, limit, gate)
    if output.cosine_low is not None:  # None: a report written before these figures
        found.append(
            gate("min-cosine-low", output.cosine_low, limit.min_cosine_low, output.cosine_low >= limit.min_cosine_low)
        )
    if output.sqnr_db is not None and output.kind != "embedding":
        found.append(gate("min-sqnr", output.sqnr_db, limit.min_sqnr_db, output.sqnr_db >= limit.min_sqnr_db))
    if output.top1_agreement is not None:
        found.append(gate("min-top1", output.top1_agreement, limit.min_top1, output.top1_agreement >= limit.min_top1))
    if output.top5_agreement is not None:
        found.append(gate("min-top5", output.top5_agreement, limit.min_top5, output.top5_agreement >= limit.min_top5))
    return found + _abs_gate(output, limit, gate)


def _abs_gate(output: OutputReport, limit: Limits, gate) -> list[Gate]:
    if limit.max_abs_error is None:
        return []
    return [
        gate("max-abs-error", output.max_abs_error, limit.max_abs_error, output.max_abs_error <= limit.max_abs_error)
    ]


def enough_samples(samples: int, minimum: int) -> Gate:
    """The verdict's own gate: at least ``minimum`` samples judged, else neither pass nor fail."""
    return Gate(name="min-samples", output="", value=samples, threshold=minimum, passed=samples >= minimum)


def inconclusive(gate: Gate) -> bool:
    """A failed gate whose threshold lies inside its figure's 95 % interval: the samples cannot tell an engine that
    holds the threshold from one that does not, whichever side the figure itself fell on."""
    return not gate.passed and gate.interval is not None and gate.interval[0] <= gate.threshold <= gate.interval[1]


def describe(gate: Gate) -> str:
    """A failed gate as one line naming the output, the figure and the threshold (and the flag that sets it)."""
    if inconclusive(gate):
        low, high = (gate_figure(gate.name, v) for v in gate.interval)
        holds = gate.value >= gate.threshold
        return (
            f"output {gate.output}: not enough held-out data to tell: {GATE_TEXT.get(gate.name, gate.name)} "
            f"{gate_figure(gate.name, gate.value)} {'holds' if holds else 'is below'} "
            f"{gate_figure(gate.name, gate.threshold)}, and its 95 % interval over the held-out samples, {low} to "
            f"{high}, holds the threshold; judge more samples (a larger data file or --holdout)"
            + (", or gate on the figure itself with --gate-on estimate" if holds else "")
        )
    if gate.name == "min-samples":
        return (
            f"not enough held-out data: {gate.value:.0f} sample(s) judged, fewer than --min-samples "
            f"{gate.threshold:.0f}, so the figures can neither pass nor fail it; judge more samples (a larger data "
            f"file or --holdout), or lower --min-samples"
        )
    what = {
        "finite": f"{gate.value:.0f} NaN/Inf values (never allowed)",
        "min-cosine": f"cosine mean {gate.value:.8f} below --min-cosine {gate.threshold:.8g}",
        "min-cosine-low": f"cosine {COSINE_QUANTILE:.0%} quantile {gate.value:.8f} below {gate.threshold:.8g} "
        f"(set by --min-cosine)",
        "min-sqnr": f"SQNR {gate.value:.1f} dB below --min-sqnr {gate.threshold:g} dB",
        "min-top1": f"top-1 agreement {gate.value:.2%} below --min-top1 {gate.threshold:.2%}",
        "min-top5": f"top-5 agreement {gate.value:.2%} below {gate.threshold:.2%} (set by --min-top1)",
        "max-abs-error": f"max abs error {gate.value:.4g} above --max-abs-error {gate.threshold:g}",
        "min-recall": f"detection recall {gate.value:.2%} below {gate.threshold:.2%} (of FP32's detections, found "
        f"again; set by min= in --output or --min-top1)",
        "min-precision": f"detection precision {gate.value:.2%} below {gate.threshold:.2%} (of its detections, "
        f"FP32's; set by min= in --output or --min-top1)",
        "min-iou": f"mask IoU {gate.value:.2%} below {gate.threshold:.2%} (set by min= in --output or --min-top1)",
        "fp16-range": f"|x| {gate.value:.6g} beyond FP16's {gate.threshold:g}",
    }
    return f"output {gate.output}: {what.get(gate.name, f'{gate.name} {gate.value:g} vs {gate.threshold:g}')}"
