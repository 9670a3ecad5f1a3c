"""JSON that someone else supplies (a store's records and attachments, a registry's answers, a signature or
provenance bundle), parsed within a size and a nesting limit.

Python's parser recurses: a document of a million ``[`` raises RecursionError (a RuntimeError, which handlers of
ValueError miss), and a document nested a few hundred deep that it does take is one every recursive walk of it
(pydantic, securesystemslib, our own) may still choke on. No document of ours nests past a dozen levels, so
:data:`MAX_DEPTH` refuses anything deeper, and every failure is one exception: :class:`UnreadableJson`.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
"""Nesting levels a supplied document may have (a release manifest has 8, a Sigstore bundle 6)."""


class UnreadableJson(ValueError):
    """Not JSON we read: too large, nested too deep, or not JSON at all (a ValueError, so existing handlers of
    malformed JSON take it)."""


def parse_json(data: bytes | str, max_bytes: int) -> Any:
    """``data`` parsed, once it is at most ``max_bytes`` long and nests at most :data:`MAX_DEPTH` deep;
    UnreadableJson otherwise (its message says which, without quoting the document)."""
    if len(data) > max_bytes:
        raise UnreadableJson(f"over {max_bytes:,} bytes")
    try:
        value = json.loads(data)
    except RecursionError:
        raise UnreadableJson(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of thousands of digits
        raise UnreadableJson((str(exc) or type(exc).__name__).splitlines()[0][:160]) from None
    level, depth = ([value] if isinstance(value, dict | list) else []), 0
    while level:  # breadth first, containers only: each level costs what its containers hold
        depth += 1
        if depth > MAX_DEPTH:
            raise UnreadableJson(f"nested deeper than {MAX_DEPTH} levels")
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
    return value
