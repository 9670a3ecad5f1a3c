"""The Typer app: every command registered in one place, with help that reads like a CLI's.

Commands are plain functions in one module per command or command group (``inspect``, ``calibrate``,
``build``, ``check``, ``publish``, ``pull``, ``ls``, ``promote``, ``yank``, ``export``, ``pipeline``, ...); each
makes its stage's option group, calls the stage and hands the result to :mod:`compiler.cli.render`. Importing this
module imports no stage: each command imports its own when it runs, so ``compile --version`` and ``--help`` start
in a blink.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from compiler.cli import (
    build,
    calibrate,
    check,
    export,
    gc,
    inspect,
    ls,
    pipeline,
    promote,
    publish,
    pull,
    report,
    verify,
    yank,
)
from compiler.cli.params import FLAG


class _PlainHelp:
    """Help that reads like a CLI's: ``compile build [OPTIONS] MODEL``, not Typer's ``{MODEL}``, and ``--help``
    without a ``<bool>`` as if it took a value."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{(.*)\}(\.\.\.)?$", r"\1\2", piece) for piece in super().collect_usage_pieces(ctx)]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = FLAG
        return option


class _Command(_PlainHelp, TyperCommand):
    pass


class _Group(_PlainHelp, TyperGroup):
    pass


app = typer.Typer(
    name="compile",
    cls=_Group,
    help="Turn ONNX models into TensorRT engines: inspect, calibrate, build, check and release them.",
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    context_settings={"help_option_names": ["-h", "--help"]},
)
export_app = typer.Typer(
    name="export", cls=_Group, no_args_is_help=True, help="Write a published release in a serving system's layout."
)
debugging = {"on": False}
"""Whether --debug was given: main shows tracebacks then."""


def _print_version(value: bool) -> None:
    if value:
        from compiler.cli.render import version_line

        sys.stdout.write(version_line() + "\n")  # plain: Rich's import would double the start-up
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _global(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", metavar=FLAG, help="Show Python tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar=FLAG,
            is_eager=True,
            callback=_print_version,
            help="Print compile's version and the TensorRT editions found.",
        ),
    ] = False,
) -> None:
    debugging["on"] = debug
    if ctx.invoked_subcommand is None:  # `compile` alone: the help, and success
        from compiler.cli.render import console

        console.print(ctx.get_help())
        raise typer.Exit()


def _register(group: typer.Typer, command: Callable[..., Any], name: str | None = None) -> None:
    group.command(name=name, cls=_Command, epilog=getattr(command, "examples", None))(command)


for _command in (
    inspect.doctor,
    inspect.skus,
    inspect.inspect,
    build.build,
    calibrate.calibrate,
    check.check,
    publish.publish,
    pull.pull,
):
    _register(app, _command)
_register(app, ls.list_releases, "ls")
_register(app, promote.promote)
_register(app, yank.yank)
_register(app, gc.gc)
_register(app, verify.verify)
_register(app, verify.provenance)
app.add_typer(export_app)
_register(export_app, export.triton)
_register(export_app, export.rtx)
_register(app, pipeline.plan)
_register(app, report.report)
_register(app, report.diff)
_register(app, pipeline.release)
