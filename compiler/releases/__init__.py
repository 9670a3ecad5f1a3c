"""Releases: publish build folders to a store, and the consumer's Python API over what is published.

    from compiler.releases import pull
    result = pull("s3://models/prod", "digits@stable", sku="auto", out=Path("/models/digits.plan"))

Modules: ``publish`` (immutable releases, staged parts of sharded ones), ``manifest`` (the one reader of
manifests and channel records), ``pull``, ``channels`` (promote), ``listing`` (ls).
"""

from compiler.releases.channels import promote
from compiler.releases.fetch import fetch_verified
from compiler.releases.listing import list_store
from compiler.releases.manifest import resolve
from compiler.releases.pull import pull, select_engine
from compiler.releases.verify import verify_release

__all__ = ["fetch_verified", "list_store", "promote", "pull", "resolve", "select_engine", "verify_release"]
"""The consumer's API, which an import-linter contract keeps free of onnx, onnxruntime and Polygraphy. The producer's
``publish`` is :func:`compiler.releases.publish.publish`: importing it here would bring what publishing reads."""
