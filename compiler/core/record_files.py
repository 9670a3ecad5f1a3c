"""Reading a record file: bounded, validated, one ``error:`` line for a damaged or foreign file.

Every stage reads the records another wrote through these, so no stage trusts a file it did not write.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from compiler.core.errors import InvalidInput
from compiler.core.files import NotRegularFile, read_regular

Record = TypeVar("Record", bound=BaseModel)
MAX_RECORD_BYTES = 64 << 20
"""Records are KBs (a BERT layers.json ~1 MB); a file far beyond that is not one of ours."""


def read_record(path: Path, kind: type[Record], hint: str) -> Record:
    """A record read and validated; InvalidInput naming the file and ``hint`` (what to do) otherwise."""
    return parse_record(read_record_bytes(path, hint), path, kind, hint)


def read_record_bytes(path: Path, hint: str) -> bytes:
    """A record file's bytes (for a caller that also hashes exactly what it validates)."""
    try:
        raw = read_regular(path, MAX_RECORD_BYTES)
    except NotRegularFile:
        raise InvalidInput(f"{path}: not a regular file; {hint}") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror or exc}); {hint}") from None
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidInput(f"{path}: larger than any {path.name} we write; {hint}")
    return raw


def parse_record(raw: bytes, path: Path, kind: type[Record], hint: str) -> Record:
    """``raw`` validated as a ``kind`` of this version's format. The file must say its ``format_version`` itself:
    the model's default would pass a file of an older format (calibration.json 1 said ``format``) as current."""
    from compiler.core.jsonio import UnreadableJson, parse_json

    expected = kind.model_fields["format_version"].default
    readable = getattr(kind, "readable_formats", (expected,))
    try:
        data = parse_json(raw, MAX_RECORD_BYTES)
    except UnreadableJson as exc:
        raise InvalidInput(f"{path}: not JSON of ours ({exc}); {hint}") from None
    version = data.get("format_version") if isinstance(data, dict) else None
    if isinstance(data, dict) and (isinstance(version, bool) or version not in readable):
        raise InvalidInput(
            f"{path}: format_version {version}, this version reads {' or '.join(map(str, readable))}; {hint}"
        )
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        from compiler.core.yaml import describe_validation_error

        raise InvalidInput(
            f"{path}: not a {path.name} this version writes ({describe_validation_error(exc)}); {hint}"
        ) from None
