"""Reading user YAML safely and turning pydantic's complaints into one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from compiler.errors import InvalidInput

Schema = TypeVar("Schema", bound=BaseModel)


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem, located like ``profiles[0].shapes.image.min``."""
    error = exc.errors()[0]
    location = ""
    for part in error["loc"]:
        location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else str(part))
    message = error["msg"].removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


def load_yaml(path: str | Path, schema: type[Schema]) -> Schema:
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return schema.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise InvalidInput(f"{path}: {describe_validation_error(exc)}") from None
