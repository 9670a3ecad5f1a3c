"""The options and arguments commands share, and how every option is declared: metavars a CLI reader expects
(``MODEL``, ``SKU``, ``N``), help panels in the order a command's options are read, closed sets shown as choices,
and one example per command. Option help of the option groups is taken from compiler/core/flags.py."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from compiler.core.errors import InvalidInput
from compiler.core.flags import (
    CACHE,
    CALIBRATION,
    CONST,
    DIM,
    EXPLAIN,
    GATES,
    INPUTS,
    OUTPUT,
    REMOTE_CACHE,
    STORE,
    TARGETS,
    Flag,
)
from compiler.core.plugins import store_forms, store_notes

FLAG = ""
"""The metavar of an on/off flag: nothing, where Typer would print ``<bool>`` as if it took a value."""
PANELS = (INPUTS, TARGETS, CALIBRATION, GATES, CACHE, STORE, OUTPUT)


def complete_sku(incomplete: str) -> list[str]:
    """Shell completion of a SKU: the catalog's names that start with what was typed (any case)."""
    from compiler.core.profiles import load_sku_catalog

    return [name for name in load_sku_catalog().skus if name.startswith(incomplete.lower())]


def option(metavar: str, panel: str, help: str, *flags: str, **settings: Any) -> Any:
    """A ``typer.Option`` as every command declares one; a SKU completes from the catalog in the shell."""
    if metavar == "SKU":
        settings.setdefault("autocompletion", complete_sku)
    return typer.Option(*flags, metavar=metavar, rich_help_panel=panel, help=help, **settings)


def switch(flag: str, panel: str, help: str) -> Any:
    """An on/off flag, shown without a value."""
    return typer.Option(flag, metavar=FLAG, rich_help_panel=panel, help=help)


JsonOption = Annotated[bool, switch("--json", OUTPUT, "Print one JSON document on stdout and nothing else.")]
ModelArgument = Annotated[Path, typer.Argument(metavar="MODEL", help="The ONNX model (FP32).", show_default=False)]
DimOption = Annotated[list[str] | None, option(DIM.metavar, DIM.panel, DIM.help, show_default=False)]
SignKeyOption = Annotated[
    str | None,
    option(
        "KEY",
        INPUTS,
        "Sign the release with this private key (EC P-256 or "
        "Ed25519 PEM, a file or env://VAR), an HSM or KMS key URI (hsm:, awskms:, gcpkms:, azurekms:) "
        "or sigstore: for keyless CI signing; default $COMPILE_SIGN_KEY.",
        envvar="COMPILE_SIGN_KEY",
        show_default=False,
    ),
]
BuildDirArgument = Annotated[
    Path, typer.Argument(metavar="BUILD_DIR", show_default=False, help="The --out folder of compile build.")
]
StoreOption = Annotated[
    str,
    option(
        "URI",
        STORE,
        f"{store_forms()[0].upper()}{store_forms()[1:]} ({store_notes()}); default $COMPILE_STORE or ./artifacts.",
        envvar="COMPILE_STORE",
    ),
]
ReleaseArgument = Annotated[
    str,
    typer.Argument(
        metavar="NAME@VERSION|NAME@CHANNEL", show_default=False, help="The release, by version or by channel."
    ),
]
PipelineArgument = Annotated[
    Path, typer.Argument(metavar="PIPELINE", show_default=False, help="The pipeline YAML (docs/pipeline.md).")
]


def parameter(name: str, flag: Flag) -> tuple[Any, Any]:
    """The annotation and default of the Typer parameter that a declaration (compiler/core/flags.py) makes."""
    if flag.kind == "off":
        return Annotated[bool, switch(flag.switch, flag.panel, flag.help)], False
    if flag.kind == "per_output":
        return Annotated[list[str] | None, threshold(flag.help)], None
    if flag.type is bool:
        return Annotated[bool, switch(f"--{name.replace('_', '-')}", flag.panel, flag.help)], flag.default
    if flag.kind == "many":
        return Annotated[list[flag.type] | None, option(flag.metavar, flag.panel, flag.help)], None
    kind = flag.type if flag.default is not None else flag.type | None
    return Annotated[
        kind, option(flag.metavar, flag.panel, flag.help, envvar=flag.envvar, hidden=flag.hidden)
    ], flag.default


def field_value(name: str, flag: Flag, value: Any) -> Any:
    """What the command line gave, as the option group's field takes it."""
    if flag.kind == "off":
        return not value
    if flag.kind == "per_output":
        return per_output(f"--{name.replace('_', '-')}", value, number=flag.type is not str)
    if flag.kind == "many":
        return tuple(value or ())
    return value


Command = TypeVar("Command", bound=Callable[..., Any])


def examples(*commands: str) -> Callable[[Command], Command]:
    """How a command is typically run: its help's epilog (read when the app registers it)."""

    def attach(command: Command) -> Command:
        command.examples = "Examples:\n\n" + "\n\n".join(f"  {line}" for line in commands)  # type: ignore[attr-defined]
        return command

    return attach


def threshold(what: str) -> Any:
    """A per-output gate: ``--atol 0.1`` for every output, ``--atol logits=0.5`` for one, repeated."""
    return option("[OUTPUT=]X", GATES, f"{what}; X for every output or OUTPUT=X for one, repeated.", show_default=False)


def per_output(flag: str, values: list[str] | None, number: bool = True) -> dict[str, Any]:
    """``--atol 0.1`` (every output) and ``--atol logits=0.5`` (one output), repeated: output name -> value."""
    chosen: dict[str, Any] = {}
    for value in values or []:
        name, _, given = value.rpartition("=")
        if number:
            try:
                chosen[name] = float(given)
            except ValueError:
                raise InvalidInput(f"{flag} {value}: give a number, or OUTPUT=NUMBER for one output") from None
        else:
            chosen[name] = given
    return chosen


RemoteCacheOption = parameter("remote_cache", REMOTE_CACHE)[0]
ConstOption = parameter("const", CONST)[0]
ExplainOption = parameter("explain", EXPLAIN)[0]


def with_options(declarations: dict[str, Flag], panels: tuple[str, ...] = PANELS) -> Callable[[Command], Command]:
    """Give a command the parameters of an option group, generated from its declarations: the command declares a
    parameter ``options`` and receives the group's field values there (its other parameters are its own). In the
    help, options are grouped by panel in ``panels`` order (a command that writes somewhere shows Output first);
    within a panel the command's own parameters before ``options`` come first, then the group's in declaration
    order, then the command's own after it."""

    def attach(command: Command) -> Command:
        hints = typing.get_type_hints(command, include_extras=True)
        own = list(inspect.signature(command).parameters.values())
        at = [p.name for p in own].index("options")
        generated = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, (annotation, default) in ((n, parameter(n, f)) for n, f in declarations.items())
        ]
        resolved = [p.replace(annotation=hints[p.name]) for p in own]
        ordered = resolved[:at] + generated + resolved[at + 1 :]
        ordered.sort(key=functools.partial(_panel_rank, panels))

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            given = {name: field_value(name, f, values.pop(name)) for name, f in declarations.items()}
            return command(**values, options=given)

        run.__signature__ = inspect.Signature(ordered)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in ordered}
        run.declarations = declarations  # type: ignore[attr-defined]  # what tests/core/test_options.py holds it to
        return run  # type: ignore[return-value]

    return attach


def _panel_rank(panels: tuple[str, ...], parameter: inspect.Parameter) -> int:
    """Arguments first, then options by panel (a stable sort keeps the order within each)."""
    info = next((a for a in getattr(parameter.annotation, "__metadata__", ()) if hasattr(a, "rich_help_panel")), None)
    panel = getattr(info, "rich_help_panel", None)
    if isinstance(info, typer.models.ArgumentInfo) or panel is None:
        return -1
    return panels.index(panel)
