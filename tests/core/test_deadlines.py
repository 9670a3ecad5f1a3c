"""compiler.core.deadlines: a deadline variable is a positive number of seconds, its default when unset."""

from __future__ import annotations

import pytest

from compiler.core.deadlines import STORE, STORE_DEFAULT, seconds
from compiler.core.errors import ExitCode, InvalidInput


@pytest.mark.parametrize(("value", "expected"), [(None, STORE_DEFAULT), ("", STORE_DEFAULT), (" 2.5 ", 2.5)])
def test_the_variable_or_its_default(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(STORE, raising=False)
    else:
        monkeypatch.setenv(STORE, value)
    assert seconds(STORE, STORE_DEFAULT) == expected


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf", "1e999"])
def test_what_is_no_positive_finite_number_is_exit_2_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(STORE, value)
    with pytest.raises(InvalidInput, match=rf"\${STORE}=") as caught:
        seconds(STORE, STORE_DEFAULT)
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
