"""The zoo's fixtures: each model fetched (verified), its data made and its profiles written once per cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.field.catalogue import BY_KEY, FieldModel
from tests.field.data import write_data
from tests.field.fetch import cache_root, fetch_model, write_profiles


@dataclass(frozen=True)
class Prepared:
    field: FieldModel
    model: Path
    data: Path
    profiles: Path | None

    def profile_args(self) -> list[str | Path]:
        return ["--profiles", self.profiles] if self.profiles else []


@pytest.fixture(scope="session")
def field_cache() -> Path:
    return cache_root()


@pytest.fixture(scope="session")
def prepare(field_cache: Path):
    """``prepare(key)``: the model as its package runs it, its data and its profiles, from the shared cache."""
    made: dict[str, Prepared] = {}

    def prepared(key: str) -> Prepared:
        if key not in made:
            field = BY_KEY[key]
            made[key] = Prepared(
                field,
                fetch_model(field, field_cache),
                write_data(key, field_cache / "data"),
                write_profiles(field, field_cache / "profiles"),
            )
        return made[key]

    return prepared
