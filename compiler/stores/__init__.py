"""Store backends behind one interface (:mod:`compiler.stores.base`), opened from a URI.

Each backend is imported only when its URI is used, so a machine without boto3 (or the OCI client) can still use
the others.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.plugins import STORES, scheme_mistake, spoken_list, store_forms, store_kind, store_notes
from compiler.core.text import printable
from compiler.stores.base import Ref, Store

__all__ = ["DEFAULT_STORE", "Ref", "Store", "open_store"]

DEFAULT_STORE = "./artifacts"


def open_store(uri: str | Store, *, create: bool = False) -> Store:
    """The store at ``uri``: a folder path or ``file://`` URI, or a URI of another kind of store
    (:data:`compiler.core.plugins.STORES`: ``s3://bucket/prefix``, ``oci://host[:port]/repo``, ...); a store already
    open is returned as it is, so every API function takes either. ``create`` makes a missing local folder (for
    publishing)."""
    if isinstance(uri, Store):
        return uri
    if not isinstance(uri, str) or not uri.strip() or "\0" in uri:
        raise InvalidInput(f"--store: give {_forms_with_path()}")
    _check_scheme(uri)
    scheme, separator, rest = uri.partition("://")
    if separator and "@" in rest.split("/", 1)[0]:  # user:password@host, in any scheme: never echoed
        hint = store_kind(uri).credentials or f"nor is this a store's scheme: use {_schemes()}"
        raise InvalidInput(
            f"store {printable(scheme)[:20]}://...: credentials do not go in the URI (they would show in logs); {hint}"
        )
    kind = store_kind(uri)
    if kind.local and separator and not uri.startswith(kind.prefixes):
        raise InvalidInput(f"store {uri}: unknown scheme; use {_schemes()}")
    try:
        backend = getattr(importlib.import_module(kind.module), kind.cls)
    except ImportError as exc:  # the backend, or the client it needs, is not installed
        install = f"pip install 'trt-compile[{kind.extra}]', or " if kind.extra else ""
        raise EnvironmentProblem(
            f"store {uri}: {kind.name} stores are not available in this installation ({exc}); {install}use a folder"
        ) from None
    if not kind.local:
        return backend(uri)
    if not uri.removeprefix("file://").strip():  # Path("") would be the working directory
        raise InvalidInput(f"store {uri}: no folder given; use file://PATH or a folder path")
    return backend(Path(uri.removeprefix("file://")), create=create)


def _check_scheme(uri: str) -> None:
    """Refuse a misspelt scheme (``s3:/bucket``) before it is taken for a folder of that name."""
    mistake = scheme_mistake(uri)
    if mistake is None:
        return
    if "@" in uri:  # user:password@ is never echoed, however the scheme is spelt
        raise InvalidInput(f"store {printable(uri.split(':', 1)[0])[:20]}:...: {mistake.split('://')[0]}://...?")
    said = f"unknown scheme; use {_schemes()}" if mistake == "unknown scheme" else f"{mistake}?"
    raise InvalidInput(f"store {printable(uri)}: {said} (a folder of that name is written ./{printable(uri)})")


def _forms_with_path() -> str:
    return store_forms().replace("a folder", "a folder, file://PATH", 1)


def _schemes() -> str:
    """``a folder, file://, s3:// or oci:// (oci+http:// for a plain-HTTP registry)``."""
    return f"{spoken_list(['a folder'] + [kind.prefixes[0] for kind in STORES])} ({store_notes()})"
