"""The option groups and the CLI agree because both come from one declaration per option (compiler/core/flags.py):
this holds every command that takes a group to it, so a field added without a declaration, a default written
twice or a help text of its own fails here."""

from __future__ import annotations

import inspect

import pytest

from compiler.cli.build import build
from compiler.cli.calibrate import calibrate
from compiler.cli.check import check
from compiler.cli.params import field_value
from compiler.core import flags
from compiler.core.errors import InvalidInput
from compiler.core.options import BuildOptions, CalibrationOptions, CheckOptions

GROUPS = [
    (build, BuildOptions, flags.BUILD),
    (calibrate, CalibrationOptions, flags.CALIBRATE),
    (check, CheckOptions, flags.CHECK),
]


def _cli_option(command, name: str):
    """The command's parameter and the option the app builds from it (what --help shows and the parser reads)."""
    import typer

    from compiler.cli.app import app

    built = typer.main.get_command(app).commands[command.__name__]
    return inspect.signature(command).parameters[name], next(p for p in built.params if p.name == name)


@pytest.mark.parametrize(("command", "group", "declarations"), GROUPS, ids=lambda g: getattr(g, "__name__", ""))
def test_every_field_is_declared_once_and_the_cli_gives_its_default(command, group, declarations):
    assert set(group.model_fields) == set(declarations)
    assert group.declarations is declarations
    defaults = group()
    for name, flag in declarations.items():
        parameter, built = _cli_option(command, name)
        assert field_value(name, flag, parameter.default) == getattr(defaults, name), name
        assert group.model_fields[name].description == flag.help, name
        assert flag.help in built.help, name  # per-output options add how to name an output
        assert built.opts == [flag.switch or f"--{name.replace('_', '-')}"], name


def test_a_value_from_the_cli_reaches_the_group_as_the_field_takes_it():
    assert field_value("lint", flags.CHECK["lint"], True) is False  # --no-lint
    assert field_value("min_cosine", flags.CHECK["min_cosine"], ["0.9", "logits=0.99"]) == {"": 0.9, "logits": 0.99}
    assert field_value("error_stat", flags.CHECK["error_stat"], ["max"]) == {"": "max"}
    assert field_value("calibration", flags.BUILD["calibration"], None) == ()
    with pytest.raises(InvalidInput, match="--atol x: give a number"):
        field_value("atol", flags.CHECK["atol"], ["x"])


def test_the_reuse_key_is_every_keyed_option_and_nothing_else():
    options = CheckOptions(samples=8, data="d.npz", min_cosine={"": 0.5}, lint=False)
    keyed = options.keyed_values()
    assert set(keyed) == {n for n, f in flags.CHECK.items() if f.keyed}
    assert keyed["samples"] == 8 and keyed["min_cosine"] == {"": 0.5} and keyed["lint"] is False
    assert "data" not in keyed and "reuse" not in keyed  # the data is keyed by its digest; --no-reuse is no result


def test_a_bad_value_names_its_flag():
    with pytest.raises(InvalidInput, match=r"--samples 0: give 1 to 65536"):
        CheckOptions(samples=0)
    with pytest.raises(InvalidInput, match=r"--jobs 65: give 1 to 64"):
        BuildOptions(jobs=65)
