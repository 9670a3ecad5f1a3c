"""A model's run-time inputs as data needs them (dtype, dims, the axis that holds samples) and which of its outputs
hold their samples on another axis than 0."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.core.errors import InvalidInput
from compiler.core.profiles import format_dims
from compiler.data.model import OnnxModel


@dataclass(frozen=True)
class ModelInput:
    """One model input: name, numpy dtype and dims (int, or None when dynamic)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]
    axis: int = 0
    """The axis that holds samples (``--sample-axis``): 0 but for an RNN's state ``[layers, batch, hidden]``."""

    @property
    def batch(self) -> int | None:
        """The model's fixed batch size, or None when the sample axis is dynamic."""
        return self.dims[self.axis] if self.dims else None

    @property
    def sample_dims(self) -> tuple[int | None, ...]:
        """The dims of one sample: every axis but the sample axis (what a data file's axes 1... hold)."""
        return self.dims[: self.axis] + self.dims[self.axis + 1 :]


def model_inputs(model: OnnxModel, sample_axes: dict[str, int] | None = None) -> list[ModelInput]:
    """The model's run-time inputs as calibration needs them: tensors of known rank, each with its sample axis
    (``sample_axes``, ``--sample-axis INPUT=AXIS``; 0 otherwise)."""
    inputs = []
    axes = dict(sample_axes or {})
    for info in model.inputs():
        if info.shape is None or info.dtype in ("non-tensor", "undefined"):
            raise InvalidInput(
                f"{model.path}: input '{info.name}' is not a tensor of known rank; calibration needs tensor inputs"
            )
        dims = tuple(d if isinstance(d, int) else None for d in info.shape)
        axis = axes.pop(info.name, 0)
        if not 0 <= axis < max(len(dims), 1) or (not dims and axis):
            raise InvalidInput(
                f"--sample-axis {info.name}={axis}: input '{info.name}' is {format_dims(dims)}, rank {len(dims)}; "
                f"give an axis from 0 to {max(len(dims) - 1, 0)}"
            )
        inputs.append(ModelInput(info.name, np.dtype(info.dtype), dims, axis))
    if axes:
        name, axis = next(iter(axes.items()))
        raise InvalidInput(
            f"--sample-axis {name}={axis}: {model.path} has no input '{name}' ({', '.join(i.name for i in inputs)})"
        )
    return inputs


def output_sample_axes(model: OnnxModel, inputs: list[ModelInput]) -> dict[str, int]:
    """Outputs whose samples are on another axis than 0: the axis named as the sample axis of an input with a
    declared one (an LSTM's state out ``[layers, B, hidden]`` beside its state in), found by the dim's name."""
    named = {
        info.shape[spec.axis]
        for info, spec in zip(model.inputs(), inputs, strict=True)
        if spec.axis and info.shape and isinstance(info.shape[spec.axis], str)
    }
    axes = {}
    for info in model.outputs():
        for axis, dim in enumerate(info.shape or ()):
            if axis and isinstance(dim, str) and dim in named:
                axes[info.name] = axis
                break
    return axes
