"""config.pbtxt of a Triton model: Triton's own ``ModelConfig`` message (tritonclient's ``model_config_pb2``),
built field by field, printed by protobuf's text format and parsed back before it is written.

It serves well where the engines allow it: when every input's and output's first dim is a batch dim that the
shape profiles make dynamic (and cover from 1 up), Triton batches: ``max_batch_size`` is the largest batch the
profiles cover without a gap, ``dims`` leave the batch out, ``dynamic_batching`` prefers the profiles' ``opt``
batches, and ``model_warmup`` runs the release's golden inputs at those batches when the model loads. Otherwise
``max_batch_size: 0`` with the reason in a comment (the batch, if any, stays explicit in ``dims``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.profiles import ShapeProfile
from compiler.core.records import ReleaseEngine, ReleaseManifest, TensorSignature

TRITON_TYPES = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
    "object": "TYPE_STRING",
}
"""numpy's type names (what a release records) to Triton's DataType."""
WARMUP_FOLDER = "warmup"
"""Triton reads a warmup sample's ``input_data_file`` from this folder of the model."""


@dataclass
class Batching:
    """What the profiles allow Triton to batch, or why it cannot."""

    max_batch_size: int = 0
    preferred: list[int] = field(default_factory=list)
    reason: str = ""


@dataclass
class TritonConfig:
    text: str
    batching: Batching
    warmup: dict[str, bytes] = field(default_factory=dict)
    """File name in ``<model>/warmup/`` -> its bytes (one golden sample of an input, raw, row-major)."""
    warmup_skipped: str = ""


def batching(inputs: list[TensorSignature], outputs: list[TensorSignature], profiles: list[ShapeProfile]) -> Batching:
    """Triton may batch only when the first dim of every input and output is a batch dim: dynamic in the model,
    the same in every profile for every input, and covered by the profiles from 1 to ``max_batch_size`` with no
    gap (a batch the dynamic batcher forms must fit a profile)."""
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            if not tensor.shape:
                return Batching(reason=f"{kind} {tensor.name!r} has no first dim")
            first = tensor.shape[0]
            if isinstance(first, int) and first >= 0:
                return Batching(reason=f"{kind} {tensor.name!r} has a fixed first dim ({first}), not a batch dim")
    ranges = []
    for profile in profiles:
        firsts = {name: (shape.min[0], shape.opt[0], shape.max[0]) for name, shape in profile.shapes.items()}
        missing = [t.name for t in inputs if t.name not in firsts]
        if missing:
            return Batching(reason=f"profile {profile.name!r} gives no shape for input {missing[0]!r}")
        if len(set(firsts.values())) > 1:
            return Batching(
                reason=f"profile {profile.name!r} gives its inputs different first dims "
                f"({', '.join(f'{n} {r[0]}..{r[2]}' for n, r in firsts.items())}): not one batch"
            )
        ranges.append(next(iter(firsts.values())))
    if not ranges or (all(low == high for low, _, high in ranges) and len({r[2] for r in ranges}) == 1):
        return Batching(reason="the profiles fix the first dim: nothing to batch")
    covered = 0
    for low, _, high in sorted(ranges):
        if low > covered + 1:
            break
        covered = max(covered, high)
    if covered < 2:
        return Batching(
            reason=f"the profiles do not cover batch 1 and 2 (their first dims: "
            f"{', '.join(f'{low}..{high}' for low, _, high in ranges)})"
        )
    preferred = sorted({opt for _, opt, _ in ranges if 1 < opt <= covered})
    return Batching(max_batch_size=covered, preferred=preferred)


def render_config(
    name: str,
    manifest: ReleaseManifest,
    engines: list[ReleaseEngine],
    plans: dict[str, str],
    default_plan: str | None = None,
    golden: dict[str, np.ndarray] | None = None,
) -> TritonConfig:
    """The model's config.pbtxt and its warmup files. ``golden``: the release's golden inputs (input name ->
    samples on axis 0), when it has them. The text is parsed back and must give the very message built, so nothing
    a manifest holds (a tensor name with a quote, a newline in a profile name) can add a field."""
    model_config_pb2, text_format = _protobuf()
    content = manifest.content
    release = f"{content.name}@{content.version}"
    if not content.inputs or not content.outputs:
        raise InvalidInput(
            f"{release} records no model inputs and outputs (published from a build folder whose "
            "model was not at the path build.json names); publish a new version where the model is"
        )
    profiles = engines[0].profiles
    if any(e.profiles != profiles for e in engines):
        raise InvalidInput(
            f"{release}: its engines were built with different shape profiles; one Triton model needs one profile list"
        )
    batch = batching(content.inputs, content.outputs, profiles)
    config = model_config_pb2.ModelConfig(name=name, platform="tensorrt_plan", max_batch_size=batch.max_batch_size)
    skip = 1 if batch.max_batch_size else 0
    for kind, tensors in (("input", content.inputs), ("output", content.outputs)):
        for tensor in tensors:
            _tensor(getattr(config, kind).add(), kind, tensor, release, model_config_pb2, skip)
    for capability, file in plans.items():
        config.cc_model_filenames[capability] = file
    if default_plan is not None:
        config.default_model_filename = plans[default_plan]
    group = config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_GPU, count=1)
    group.profile.extend(str(index) for index in range(len(profiles)))
    if batch.max_batch_size:
        config.dynamic_batching.preferred_batch_size.extend(batch.preferred)
    result = TritonConfig(text="", batching=batch)
    if not batch.max_batch_size:
        result.warmup_skipped = "the model is not batched (warmup samples leave the batch dim out)"
    elif not golden:
        result.warmup_skipped = "the release has no golden inputs"
    else:
        result.warmup, result.warmup_skipped = _warmup(
            config, content.inputs, profiles, batch, golden, model_config_pb2
        )

    lines = [
        _comment(
            f"{release} ({content.model_name}, sha256 {content.model_sha256[:12]}), written by compile export triton"
        )
    ]
    for index, profile in enumerate(profiles):
        shapes = "; ".join(f"{tensor} min {r.min} opt {r.opt} max {r.max}" for tensor, r in profile.shapes.items())
        lines.append(_comment(f"profile {index} ({profile.name}): {shapes}"))
    if result.warmup_skipped:
        lines.append(_comment(f"no model_warmup: {result.warmup_skipped}"))
    for line in text_format.MessageToString(config).splitlines():
        lines.append(line)
        if line.startswith("platform:") and not batch.max_batch_size:
            lines.append(f"max_batch_size: 0  {_comment(batch.reason + '; the batch dim, if any, is in dims')}")
        elif line.startswith("max_batch_size:"):
            lines[-1] += f"  {_comment('the largest batch the shape profiles cover')}"
    text = "\n".join(lines) + "\n"
    if text_format.Parse(text, model_config_pb2.ModelConfig()) != config:  # a guard: never expected to fire
        raise InvalidInput(f"{release}: config.pbtxt would not say what its ModelConfig says; not written")
    result.text = text
    return result


def _warmup(
    config,
    inputs: list[TensorSignature],
    profiles: list[ShapeProfile],
    batch: Batching,
    golden: dict[str, np.ndarray],
    model_config_pb2,
) -> tuple[dict[str, bytes], str]:
    """One warmup sample per batch size (1 and each preferred one) that a profile takes with the first golden
    sample's shape; Triton repeats the sample to fill the batch. Files are named by their content, so the warmup
    files of several releases' versions of one model live side by side."""
    files: dict[str, bytes] = {}
    sample: dict[str, tuple[list[int], str]] = {}
    for tensor in inputs:
        values = golden.get(tensor.name)
        if (
            values is None
            or values.ndim < 1
            or len(values) < 1
            or tensor.dtype not in TRITON_TYPES
            or tensor.dtype == "object"
        ):
            return {}, f"the golden inputs have no usable sample of input {tensor.name!r}"
        data = np.ascontiguousarray(values[0], dtype=np.dtype(tensor.dtype)).tobytes()
        file = f"golden-{hashlib.sha256(data).hexdigest()[:16]}"
        files[file] = data
        sample[tensor.name] = ([int(d) for d in values.shape[1:]], file)
    added = []
    for size in sorted({1, *batch.preferred}):
        if not any(_fits(profile, sample, size) for profile in profiles):
            continue
        warmup = config.model_warmup.add(name=f"golden batch {size}", batch_size=size)
        for tensor in inputs:
            dims, file = sample[tensor.name]
            entry = warmup.inputs[tensor.name]
            entry.data_type = model_config_pb2.DataType.Value(TRITON_TYPES[tensor.dtype])
            entry.dims.extend(dims)
            entry.input_data_file = file
        added.append(size)
    if not added:
        return {}, "no profile takes the golden sample's shape"
    return files, ""


def _fits(profile: ShapeProfile, sample: dict[str, tuple[list[int], str]], size: int) -> bool:
    for name, (dims, _) in sample.items():
        shape = profile.shapes.get(name)
        if shape is None or len(shape.min) != len(dims) + 1:
            return False
        wanted = [size, *dims]
        if any(not low <= value <= high for low, value, high in zip(shape.min, wanted, shape.max, strict=True)):
            return False
    return True


def _protobuf():
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:
        raise EnvironmentProblem(
            f"compile export triton writes config.pbtxt with tritonclient's ModelConfig, which "
            f"is not installed ({exc}); install the [triton] extra"
        ) from None
    return model_config_pb2, text_format


def parse_config(text: bytes):
    """A config.pbtxt as a ModelConfig, or None when it is not one."""
    model_config_pb2, text_format = _protobuf()
    try:
        return text_format.Parse(text.decode("utf-8"), model_config_pb2.ModelConfig())
    except (text_format.ParseError, UnicodeDecodeError):
        return None


def _tensor(message, kind: str, tensor: TensorSignature, release: str, model_config_pb2, skip: int) -> None:
    data_type = TRITON_TYPES.get(tensor.dtype)
    if data_type is None:
        raise InvalidInput(f"{release}: {kind} {tensor.name!r} is of type {tensor.dtype}, which Triton has no type for")
    if tensor.shape is None:
        raise InvalidInput(f"{release}: {kind} {tensor.name!r} has no known rank; Triton needs its dims")
    message.name = tensor.name
    message.data_type = model_config_pb2.DataType.Value(data_type)
    message.dims.extend(d if isinstance(d, int) and d >= 0 else -1 for d in tensor.shape[skip:])


def _comment(text: str) -> str:
    """A comment, its text kept to one line (a manifest's model or profile name could hold a newline)."""
    return "# " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
