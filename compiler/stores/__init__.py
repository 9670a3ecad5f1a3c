"""Store backends behind one interface (:mod:`compiler.stores.base`), opened from a URI.

Each backend is imported only when its URI is used, so a machine without boto3 (or the OCI client) can still use
the others.
"""

from __future__ import annotations

from pathlib import Path

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.text import printable
from compiler.stores.base import Ref, Store

__all__ = ["DEFAULT_STORE", "Ref", "Store", "open_store"]

DEFAULT_STORE = "./artifacts"
CREDENTIALS = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (docs/store.md)",
    "oci": "log in with `docker login HOST` or set DOCKER_CONFIG",
    "oci+http": "log in with `docker login HOST` or set DOCKER_CONFIG",
}
"""Where each store's credentials go instead of its URI."""
SCHEMES = ("file://", "s3://", "oci://", "oci+http://")


def open_store(uri: str | Store, *, create: bool = False) -> Store:
    """The store at ``uri``: a folder path or ``file://`` URI, ``s3://bucket/prefix``, ``oci://host[:port]/repo``
    (HTTPS) or ``oci+http://host:port/repo``; a store already open is returned as it is, so every API function
    takes either. ``create`` makes a missing local folder (for publishing)."""
    if isinstance(uri, Store):
        return uri
    if not isinstance(uri, str) or not uri.strip() or "\0" in uri:
        raise InvalidInput("--store: give a folder, file://PATH, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY")
    scheme, separator, rest = uri.partition("://")
    if separator and "@" in rest.split("/", 1)[0]:  # user:password@host, in any scheme: never echoed
        raise InvalidInput(
            f"store {printable(scheme)[:20]}://...: credentials do not go in the URI (they would show in logs); "
            + CREDENTIALS.get(scheme, "nor is this a store's scheme: use a folder, file://, s3:// or oci://")
        )
    if uri.startswith("s3://"):
        from compiler.stores.s3 import S3Store

        return S3Store(uri)
    if uri.startswith(("oci://", "oci+http://")):
        try:
            from compiler.stores.oci import OciStore
        except ImportError as exc:  # the backend, or the client it needs, is not installed
            raise EnvironmentProblem(
                f"store {uri}: OCI stores are not available in this installation ({exc}); use a folder or s3://"
            ) from None
        return OciStore(uri)
    if "://" in uri and not uri.startswith("file://"):
        raise InvalidInput(
            f"store {uri}: unknown scheme; use a folder, file://, s3:// or oci:// (oci+http:// "
            "for a plain-HTTP registry)"
        )
    from compiler.stores.local import LocalStore

    if not uri.removeprefix("file://").strip():  # Path("") would be the working directory
        raise InvalidInput(f"store {uri}: no folder given; use file://PATH or a folder path")
    return LocalStore(Path(uri.removeprefix("file://")), create=create)
