"""What the store families of tests/hostile share: the release they work on and small oracles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.hostile.harness import snapshot, snapshot_changes

NAME, VERSION, OTHER, CHANNEL, SKU = "digits", "1.0.0", "1.0.1", "stable", "rtx-4090"


def verified_pull(out: Path, key: Path | str, *extra: str) -> list[str | Path]:
    """`compile pull` of the release's SKU plan into OUT, verified against KEY (each case adds its --store)."""
    return ["pull", f"{NAME}@{VERSION}", "--sku", SKU, "--out", out, "--verify-key", key, *extra]


def codes(*codes: int) -> frozenset[int]:
    return frozenset(codes)


def json_flag(flag: bool) -> list[str]:
    return ["--json"] if flag else []


def tree_kept(root: Path) -> Callable[[], list[str]]:
    """A check that ``root`` (a store, an --out folder) is exactly as it is now."""
    before = snapshot(root, []) if root.is_dir() else {}

    def kept() -> list[str]:
        changes = snapshot_changes(before, snapshot(root, []) if root.is_dir() else {})
        return [f"{root.name}/ changed: {changes[:6]}"] if changes else []

    return kept
