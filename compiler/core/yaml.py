"""Reading user YAML safely and turning pydantic's complaints into one-line errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from compiler.core.errors import InvalidInput
from compiler.core.text import and_more

Schema = TypeVar("Schema", bound=BaseModel)


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """yaml.safe_load, except that a key given twice in one mapping is an error instead of a silent overwrite.

    The same safe constructor (no Python tags) over libyaml's parser where PyYAML has it: the pure-Python
    parser took ~10 ms for the SKU catalog, on the way to every build's first engine.
    """


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the default constructor reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key '{key}'", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: the problem and where (line/column are 1-based)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(filter(None, [exc.context, exc.problem])) or "syntax error"
        return f"{problem}{where}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


MAX_YAML_BYTES = 16 << 20
"""Our YAML files (profiles, SKU catalogs, preprocessing) are a few KB; reading stops past this, so a wrong path
such as a device that never ends (/dev/zero) is an error, not a hang, while a pipe (``<(…)``) still works."""


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file with the safe loader (no Python tags) and no duplicate keys; InvalidInput otherwise."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: file not found")
    if path.is_dir():
        raise InvalidInput(f"{path}: is not a file (a directory)")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
        if len(raw) > MAX_YAML_BYTES:
            raise InvalidInput(
                f"{path}: larger than {MAX_YAML_BYTES >> 20} MiB, which no YAML file of ours is; check the path"
            )
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not valid YAML (not UTF-8 text)") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        return _load_bounded(text, path)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits; nesting thousands deep
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInput(f"{path}: not a YAML file of ours ({why})") from None


MAX_YAML_NODES = 1_000_000
"""Values a document may expand to, aliases counted at every use: a 500-byte "billion laughs" of nested anchors
expands to 10**8 and more; our largest files are a few thousand."""


def _load_bounded(text: str, path: Path) -> Any:
    """The document, constructed only once its expansion is known to stay under :data:`MAX_YAML_NODES` (the
    composed graph shares each anchored node among its aliases, so counting costs what reading did)."""
    loader = _UniqueKeyLoader(text)  # a safe loader: no Python tags
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_NODES:
            raise InvalidInput(
                f"{path}: its aliases expand to more than {MAX_YAML_NODES:,} values, which no YAML "
                "file of ours has (an alias bomb?); write the values out"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` stands for once every alias is expanded (each node counted once per use); a node
    that contains itself (``&a [*a]``) counts as endless."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else node.value
            if isinstance(node, yaml.SequenceNode)
            else []
        )
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(1 + sum(sizes[id(child)] for child in children), MAX_YAML_NODES + 1)
        elif id(node) in open_nodes:
            return MAX_YAML_NODES + 1
        elif id(node) not in sizes:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children)
    return sizes[id(root)]


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem, located like ``profiles[0].shapes.image.min``."""
    return describe_error(exc.errors()[0]) + and_more(len(exc.errors()) - 1)


def describe_error(error: Any) -> str:
    """One of pydantic's problems (an item of ``ValidationError.errors()``), located like ``targets.rtx-4090``."""
    location = ""
    for part in error["loc"]:
        location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else str(part))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key; remove it or check its spelling"
    return f"{location}: {message}" if location else message


Describe = Callable[[ValidationError, Any], str]


def load_yaml(path: str | Path, schema: type[Schema], describe: Describe | None = None) -> Schema:
    """Read and validate a YAML file; ``describe(error, data)`` words schema errors (default: located by path)."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a YAML mapping at the top level, got {_kind(data)}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        message = describe(exc, data) if describe else describe_validation_error(exc)
        raise InvalidInput(f"{path}: {message}") from None


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
