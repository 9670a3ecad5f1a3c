"""The option groups and the CLI agree because both come from one declaration per option (compiler/core/flags.py):
this holds every command that takes a group to it, so a field added without a declaration, a default written
twice or a help text of its own fails here."""

from __future__ import annotations

import inspect

import pytest

from compiler.cli.params import field_value
from compiler.core import flags
from compiler.core.errors import InvalidInput
from compiler.core.options import BuildOptions, CheckOptions, OptionGroup, PullOptions, TritonOptions

WITH_GROUPS = {"build", "calibrate", "check", "publish", "promote", "pull", "export triton", "export rtx"}
"""The commands that take an option group; the others take a release, a store or a file and a switch or two."""


def _commands() -> dict[str, tuple]:
    """Every registered command: its name as typed, the function the app registered and the click command built
    from it (what --help shows and the parser reads)."""
    import typer

    from compiler.cli.app import app

    built = typer.main.get_command(app)
    found = {}
    for info in app.registered_commands:
        name = info.name or info.callback.__name__
        found[name] = (info.callback, built.commands[name])
    for group in app.registered_groups:
        prefix = group.typer_instance.info.name
        for info in group.typer_instance.registered_commands:
            name = info.name or info.callback.__name__
            found[f"{prefix} {name}"] = (info.callback, built.commands[prefix].commands[name])
    return found


def _group_of(declarations: dict) -> type[OptionGroup]:
    (group,) = [g for g in OptionGroup.__subclasses__() if g.declarations is declarations]
    return group


def test_the_commands_that_take_a_group_are_known_and_every_group_has_its_command():
    commands = _commands()
    with_groups = {name for name, (function, _) in commands.items() if hasattr(function, "declarations")}
    assert with_groups == WITH_GROUPS
    used = {_group_of(commands[name][0].declarations) for name in with_groups}
    assert used == set(OptionGroup.__subclasses__())


@pytest.mark.parametrize("name", sorted(WITH_GROUPS))
def test_every_field_is_declared_once_and_the_cli_gives_its_default_and_help(name):
    command, built = _commands()[name]
    declarations = command.declarations
    group = _group_of(declarations)
    assert set(group.model_fields) == set(declarations)
    defaults = group()
    parameters = inspect.signature(command).parameters
    for field, flag in declarations.items():
        option = next(p for p in built.params if p.name == field)
        assert field_value(field, flag, parameters[field].default) == getattr(defaults, field), field
        assert group.model_fields[field].description == flag.help, field
        assert flag.help in option.help, field  # per-output options add how to name an output
        assert option.opts == [flag.switch or f"--{field.replace('_', '-')}"], field
        assert (option.envvar, option.hidden, option.required) == (flag.envvar, flag.hidden, False), field


def test_a_python_caller_gives_the_group_or_its_keywords():
    assert PullOptions.given(None, {"precision": "fp16"}) == PullOptions(precision="fp16")
    given = TritonOptions(triton_release="25.10")
    assert TritonOptions.given(given, {}) is given
    with pytest.raises(TypeError, match="not both"):
        PullOptions.given(PullOptions(), {"precision": "fp16"})
    with pytest.raises(InvalidInput, match="--precison fp16: Extra inputs are not permitted"):
        PullOptions.given(None, {"precison": "fp16"})


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
