"""The tier calibration is handed (calibration.reuse.CacheTier) is what compiler.cache hands it: calibration may not
import compiler.cache, so its Protocol says what it uses, and this holds the two equal."""

from __future__ import annotations

import inspect

from calibration.reuse import CacheTier as Wanted
from compiler.cache.remote import ENV
from compiler.cache.tier import CacheTier


def test_the_cache_tier_has_every_member_calibration_uses_with_the_same_parameters(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    members = [name for name in vars(Wanted) if not name.startswith("_")]
    assert set(members) == {"remote", "fetch", "refuse", "send", "explain_calibration"}
    for name in members:
        if name == "remote":
            assert "remote" in vars(CacheTier(None))  # an attribute there, None when no remote is configured
            continue
        wanted, given = inspect.signature(getattr(Wanted, name)), inspect.signature(getattr(CacheTier, name))
        assert list(wanted.parameters) == list(given.parameters), name
