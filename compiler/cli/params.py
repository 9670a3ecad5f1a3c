"""The options and arguments commands share, and how every option is declared: metavars a CLI reader expects
(``MODEL``, ``SKU``, ``N``), help panels in the order a command's options are read, closed sets shown as choices,
and one example per command. Option help of the option groups is taken from compiler/core/flags.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from compiler.core.errors import InvalidInput

FLAG = ""
"""The metavar of an on/off flag: nothing, where Typer would print ``<bool>`` as if it took a value."""

INPUTS, TARGETS, CALIBRATION, GATES, CACHE, STORE, OUTPUT = (
    "Inputs",
    "Targets",
    "Calibration",
    "Gates",
    "Cache",
    "Store",
    "Output",
)
"""Help panels, in the order a command's options are read."""

PRECISIONS = "[fp32|fp16|int8|fp8]"
CALIBRATE_PRECISIONS = "[int8|fp8|fp16]"
METHODS = "[minmax|entropy|percentile]"
QUANTIZERS = "[onnxruntime|modelopt]"
BACKENDS = "[tensorrt-rtx|tensorrt]"
"""Closed sets as the help shows them (the values are checked by the option groups, with their own message)."""


def option(metavar: str, panel: str, help: str, *flags: str, **settings: Any) -> Any:
    """A ``typer.Option`` as every command declares one."""
    return typer.Option(*flags, metavar=metavar, rich_help_panel=panel, help=help, **settings)


def switch(flag: str, panel: str, help: str) -> Any:
    """An on/off flag, shown without a value."""
    return typer.Option(flag, metavar=FLAG, rich_help_panel=panel, help=help)


JsonOption = Annotated[bool, switch("--json", OUTPUT, "Print one JSON document on stdout and nothing else.")]
ModelArgument = Annotated[Path, typer.Argument(metavar="MODEL", help="The ONNX model (FP32).", show_default=False)]
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
VerifyKeyOption = Annotated[
    str | None,  # not Path: it would turn env://VAR into env:/VAR
    option(
        "PUB.pem",
        INPUTS,
        "Refuse a release not signed by this public key (a PEM file or env://VAR; checked before anything is "
        "written); default $COMPILE_VERIFY_KEY.",
        envvar="COMPILE_VERIFY_KEY",
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
        "A folder, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY "
        "(oci+http:// for a plain-HTTP registry); default $COMPILE_STORE or ./artifacts.",
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

RemoteCacheOption = Annotated[
    str | None,
    option(
        "URI",
        CACHE,
        "Remote cache shared by runners: a folder, "
        "s3://BUCKET/PREFIX or oci://HOST/REPOSITORY; a local miss asks it "
        "first and what is made is sent there (default "
        "$COMPILE_REMOTE_CACHE; '' for none).",
    ),
]
ExplainOption = Annotated[
    bool,
    switch(
        "--explain", CACHE, "For each cache miss, say which input of its key changed against the nearest cached entry."
    ),
]

AllowYankedOption = Annotated[
    bool, switch("--allow-yanked", INPUTS, "Use the version even if it was withdrawn with compile yank.")
]

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
