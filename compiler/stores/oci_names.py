"""The names the OCI store writes: media types ``application/vnd.io.github.trt-compile.*`` and annotation keys
``io.github.trt-compile.*``, reverse-DNS under ``trt-compile.github.io`` (the GitHub organization ``trt-compile``'s
domain, docs/store-oci.md), the way sigstore writes ``application/vnd.dev.sigstore.*`` for ``sigstore.dev``.

Releases published before these names (``application/vnd.trt-compile.*``, ``vnd.trt-compile.*``, a domain that is
not the project's) are still read: every reader accepts both spellings; only the new one is written.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "io.github.trt-compile"
LEGACY_NAMESPACE = "trt-compile"
"""What releases made before issue 42 carry (``vnd.trt-compile.``): read, never written."""


def media_type(kind: str) -> str:
    """``application/vnd.io.github.trt-compile.KIND`` (KIND with its version and suffix: ``plan.v1``)."""
    return f"application/vnd.{NAMESPACE}.{kind}"


def annotation(key: str) -> str:
    return f"{NAMESPACE}.{key}"


def readable(media: str) -> tuple[str, ...]:
    """The spellings of one of our media types a reader accepts: as written now, and as written before."""
    ours = f"application/vnd.{NAMESPACE}."
    return (
        (media, media.replace(ours, f"application/vnd.{LEGACY_NAMESPACE}.", 1)) if media.startswith(ours) else (media,)
    )


def annotation_of(annotations: Any, key: str) -> str | None:
    """The value of our annotation ``key`` in an annotations map, under the current key or the legacy one."""
    if not isinstance(annotations, dict):
        return None
    value = annotations.get(annotation(key), annotations.get(f"vnd.{LEGACY_NAMESPACE}.{key}"))
    return value if isinstance(value, str) else None
