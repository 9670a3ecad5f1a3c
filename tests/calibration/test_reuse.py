"""The tier every cached stage is handed (compiler.core.reuse.RemoteTier, calibration's too: it may not import
compiler.cache) is what compiler.cache.reuse.open_tier hands out: every member the Protocol declares, with the same
parameters."""

from __future__ import annotations

import inspect

from compiler.cache.remote import ENV
from compiler.cache.reuse import open_tier
from compiler.core.reuse import RemoteTier


def test_the_store_tier_has_every_member_of_the_protocol_with_the_same_parameters(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    tier = open_tier(None)
    declared = [name for name in vars(RemoteTier) if not name.startswith("_")]
    attributes = list(RemoteTier.__annotations__)
    assert set(declared) | set(attributes) >= {"uri", "explain_misses", "fetch", "refuse", "send"}
    for name in attributes:
        assert hasattr(tier, name), name
    for name in declared:
        if callable(getattr(RemoteTier, name)):
            wanted = inspect.signature(getattr(RemoteTier, name))
            given = inspect.signature(getattr(type(tier), name))
            assert list(wanted.parameters) == list(given.parameters), name
