"""The samples of `compile check --data` against the engines' shape profiles, before anything runs.

Accuracy measured on shapes no engine takes says nothing about the engines (a sequence of 512 judged for an engine
whose profiles stop at 64), and inputs that disagree on a shared dim (``input_ids [N, 64]`` with
``attention_mask [N, 128]``) would only surface as onnxruntime's broadcast error. The sample axis (0, or the
input's ``--sample-axis``) holds samples (the check chooses its batches); every other axis of every input must fit
one profile of every judged engine, the same profile for all inputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from compiler.core.errors import InvalidInput
from compiler.core.profiles import ShapeProfile, format_dims
from compiler.core.records import EngineRecord
from compiler.data.datasets import Dataset, sample_shapes
from compiler.data.model import OnnxModel


def check_data_shapes(dataset: Dataset, model: OnnxModel, engines: list[EngineRecord]) -> None:
    """Raise InvalidInput naming the input, the samples' shape and the profile's range when the samples disagree
    on a symbolic dim or fit no profile of some engine."""
    shapes = sample_shapes(dataset)
    _check_shared_dims(dataset, model, shapes)
    judged: dict[str, list[str]] = defaultdict(list)  # one verdict per distinct profile set
    sets: dict[str, tuple[ShapeProfile, ...]] = {}
    for engine in engines:
        key = repr([p.model_dump() for p in engine.profiles])
        sets[key] = tuple(engine.profiles)
        judged[key].append(f"{engine.sku}/{engine.precision.value}")
    for key, profiles in sets.items():
        misfits = [_misfit(profile, shapes, dataset.axes) for profile in profiles]
        if profiles and all(misfits):
            name, axis, size, profile = misfits[0]
            others = f" (nor any of its {len(profiles) - 1} other profile(s))" if len(profiles) > 1 else ""
            shape = profile.shapes[name]
            raise InvalidInput(
                f"{dataset.path}: input '{name}' samples of shape {_shown(dataset, name, shapes)} fit no profile of "
                f"the engine {', '.join(judged[key])}: profile '{profile.name}' takes dim {axis} from "
                f"{shape.min[axis]} to {shape.max[axis]}, the samples have {size}{others}; give samples within "
                f"the profiles, or build with a profile that covers them"
            )


def _check_shared_dims(dataset: Dataset, model: OnnxModel, shapes: dict[str, tuple[int, ...]]) -> None:
    seen: dict[str, tuple[str, int, int]] = {}
    for info in model.inputs():
        if info.name not in shapes or info.shape is None:
            continue
        for axis, dim in enumerate(info.shape):
            if axis == dataset.axes.get(info.name, 0) or not isinstance(dim, str) or axis >= len(shapes[info.name]):
                continue
            size = shapes[info.name][axis]
            first = seen.setdefault(dim, (info.name, axis, size))
            if first[2] != size:
                raise InvalidInput(
                    f"{dataset.path}: input '{first[0]}' has shape {_shown(dataset, first[0], shapes)} and input "
                    f"'{info.name}' {_shown(dataset, info.name, shapes)}, but the model's symbolic dim '{dim}' (dim "
                    f"{first[1]} of '{first[0]}', dim {axis} of '{info.name}') must be the same size in both; "
                    f"give them samples of one {dim}"
                )


def _misfit(
    profile: ShapeProfile, shapes: dict[str, tuple[int, ...]], sample_axes: Mapping[str, int]
) -> tuple[str, int, int, ShapeProfile] | None:
    """The first (input, axis, size) the samples give outside this profile's range, or None when they fit."""
    for name, shape in profile.shapes.items():
        have = shapes.get(name)
        if have is None or len(have) != len(shape.min):
            continue
        for axis in range(len(have)):
            if axis != sample_axes.get(name, 0) and not shape.min[axis] <= have[axis] <= shape.max[axis]:
                return name, axis, have[axis], profile
    return None


def _shown(dataset: Dataset, name: str, shapes: dict[str, tuple[int, ...]]) -> str:
    """The samples' shape with N on the input's sample axis."""
    axis = dataset.axes.get(name, 0)
    return format_dims([*shapes[name][:axis], "N", *shapes[name][axis + 1 :]])
