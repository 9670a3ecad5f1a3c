"""`compile doctor`, `compile skus` and `compile inspect`: the machine, the GPUs builds target, and the model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from compiler.cli import render
from compiler.cli.params import ConstOption, DimOption, JsonOption, ModelArgument, examples, option, switch
from compiler.core.errors import InvalidInput
from compiler.core.flags import BACKENDS, CACHE, INPUTS, TARGETS


@examples(
    "compile doctor",
    "compile doctor --json",
    "compile doctor --store s3://models/team --remote-cache s3://models/cache",
)
def doctor(
    store: Annotated[
        str | None,
        option("URI", INPUTS, "A store to probe read-only (default $COMPILE_STORE).", show_default=False),
    ] = None,
    remote_cache: Annotated[
        str | None,
        option("URI", INPUTS, "A remote cache to probe read-only (default $COMPILE_REMOTE_CACHE).", show_default=False),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Backends and versions, GPUs and compute capabilities, the driver and CUDA, onnxruntime providers, the cache,
    and whether the store and remote cache answer with this machine's credentials."""
    from compiler.inspect.doctor import diagnose

    report = diagnose(store, remote_cache)
    render.emit_json(report) if json else render.doctor(report)


@examples("compile skus", "compile skus --json", "compile skus --skus my-skus.yaml")
def skus(
    extra: Annotated[
        Path | None,
        option("FILE", INPUTS, "More SKUs, in the catalog's YAML format (docs/skus.md).", "--skus", show_default=False),
    ] = None,
    json: JsonOption = False,
) -> None:
    """The GPU SKUs engines are built for: compute capability, backend, precisions, memory."""
    from compiler.inspect.skus import sku_listing

    listing = sku_listing(extra)
    render.emit_json(listing) if json else render.sku_catalog(listing)


@examples(
    "compile inspect model.onnx --profiles profiles.yaml",
    "compile inspect model.onnx --profiles profiles.yaml --build-check --sku rtx-4090",
    "compile inspect model.onnx --dim x:2=H --dim x:3=W --profiles profiles.yaml",
    "compile inspect vad.onnx --const sr=16000",
)
def inspect(
    model: ModelArgument,
    profiles: Annotated[
        Path | None, option("FILE", INPUTS, "Shape profiles YAML to validate against the model.")
    ] = None,
    dim: DimOption = None,
    backend: Annotated[
        str | None, option(BACKENDS, TARGETS, "The TensorRT edition (default: the one installed).")
    ] = None,
    build_check: Annotated[bool, switch("--build-check", TARGETS, "Prove support with a real build.")] = False,
    sku: Annotated[str | None, option("SKU", TARGETS, "SKU for --build-check (default rtx-4090).")] = None,
    cache_dir: Annotated[
        Path | None,
        option(
            "DIR",
            CACHE,
            "Where TensorRT's view and the profile-limits check are "
            "kept (default $COMPILE_CACHE_DIR or ~/.cache/compile).",
        ),
    ] = None,
    const: ConstOption = None,
    json: JsonOption = False,
) -> None:
    """Model summary, TensorRT partitions and unsupported nodes, profile validation."""
    from compiler.data.freeze import frozen_model, parse_consts
    from compiler.inspect.memo import inspect_model

    if sku is not None and not build_check:
        raise InvalidInput(f"--sku {sku} is only used with --build-check; add --build-check or drop --sku")
    from compiler.data.dims import parse_dims

    model = frozen_model(model, parse_consts(const or ()), cache_dir)
    check = (sku or "rtx-4090") if build_check else None
    report = inspect_model(model, profiles, backend, check, cache_dir=cache_dir, dims=parse_dims(dim))
    render.emit_json(report) if json else render.inspection(report)
    if report.problem is not None:
        raise report.problem
