"""Releases: publish build folders to a store, and the consumer's Python API over what is published.

    from compiler.releases import pull
    result = pull("s3://models/prod", "digits@stable", sku="auto", out=Path("/models/digits.plan"))

Modules: ``publish`` (immutable releases, staged parts of sharded ones), ``manifest`` (the one reader of
manifests and channel records), ``pull``, ``channels`` (promote), ``listing`` (ls).
"""

import importlib
from typing import Any

_API = {
    "fetch_verified": "compiler.releases.fetch",
    "list_store": "compiler.releases.listing",
    "promote": "compiler.releases.channels",
    "publish": "compiler.releases.publish",
    "pull": "compiler.releases.pull",
    "resolve": "compiler.releases.manifest",
    "select_engine": "compiler.releases.pull",
    "verify_release": "compiler.releases.verify",
}
"""Name -> the module that defines it, imported on first use (as Polygraphy's lazy importer does): a consumer that
pulls imports neither publish nor what publishing needs (onnx), which an import-linter contract keeps."""

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)
