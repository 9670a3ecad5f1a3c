"""`compile skus`: the GPU SKUs builds target, as a pip user cannot read them from a file of the repository."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from compiler.core.profiles import load_sku_catalog
from compiler.core.records import PRECISIONS


class SkuRow(BaseModel):
    """One SKU as ``compile skus`` lists it."""

    name: str
    compute_capability: str
    backend: str
    precisions: list[str]
    """What ``compile build`` takes for it (fp8 from compute capability 8.9 on)."""
    memory_gb: float
    architecture: str
    platform: str
    """The CPU of the machines carrying the GPU: where a datacenter TensorRT build must run."""
    tensorrt: str | None
    """The oldest datacenter TensorRT that knows the GPU, where that matters."""
    description: str
    source: str
    """``bundled``, or the --skus file that added (or replaced) it."""


class SkuListing(BaseModel):
    skus: list[SkuRow]


def sku_listing(extra: str | Path | None = None) -> SkuListing:
    """The catalog builds take, in its own order, with ``extra``'s new entries after the bundled ones."""
    bundled = load_sku_catalog().skus
    return SkuListing(
        skus=[
            SkuRow(
                name=name,
                compute_capability=sku.compute_capability,
                backend=sku.backend,
                precisions=[p for p in PRECISIONS if p != "fp8" or sku.takes_fp8],
                memory_gb=sku.memory_gb,
                architecture=sku.architecture,
                platform=sku.platform,
                tensorrt=sku.tensorrt,
                description=sku.description,
                source="bundled" if bundled.get(name) == sku else str(extra),
            )
            for name, sku in load_sku_catalog(extra=extra).skus.items()
        ]
    )
