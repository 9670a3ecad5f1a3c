"""``--explain``: for a cache miss, which input of the key changed against the nearest cached entry, in one line.

A key is a hash, so a miss alone says nothing; the entries keep what their keys were made of (engine.json,
calibration.json), and the nearest one (fewest inputs differing, then the newest) names what changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MAX_ENTRIES = 2000
"""Entries compared at most (the newest first): an explanation never reads a whole large cache."""


def nearest(wanted: dict[str, Any], candidates: Iterable[tuple[str, dict[str, Any]]]) -> tuple[str, list[str]] | None:
    """(label of the nearest candidate, the inputs in which it differs from ``wanted``, in ``wanted``'s order)."""
    best: tuple[int, str, list[str]] | None = None
    for label, material in candidates:
        changed = [name for name, value in wanted.items() if _normal(material.get(name)) != _normal(value)]
        if best is None or len(changed) < best[0]:
            best = (len(changed), label, changed)
    return None if best is None else (best[1], best[2])


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def describe(
    kind: str,
    wanted: dict[str, Any],
    candidates: Iterable[tuple[str, dict[str, Any]]],
    details: dict[str, Any] | None = None,
) -> str:
    """The one line: ``profiles changed against the nearest cached engine (…): batch max [64,1,8,8] -> …``."""
    found = nearest(wanted, candidates)
    if found is None:
        return f"no cached {kind} to compare with (the cache is empty)"
    label, changed = found
    if not changed:
        return f"the nearest cached {kind} ({label}) has the same inputs: it was evicted or is being made"
    detail = (details or {}).get(changed[0])
    more = f" (and {', '.join(changed[1:])})" if len(changed) > 1 else ""
    return f"{changed[0]} changed{more} against the nearest cached {kind} ({label})" + (f": {detail}" if detail else "")


def profile_changes(wanted: list[dict[str, Any]], cached: list[dict[str, Any]]) -> str:
    """Which profiles differ: added, dropped, or a shape range of one."""
    old = {p["name"]: p["shapes"] for p in cached if isinstance(p, dict) and "name" in p}
    new = {p["name"]: p["shapes"] for p in wanted}
    parts = [f"profile {name!r} added" for name in new if name not in old]
    parts += [f"profile {name!r} dropped" for name in old if name not in new]
    for name, shapes in new.items():
        before = old.get(name)
        if before is None or before == shapes:
            continue
        for tensor, ranges in shapes.items():
            for bound in ("min", "opt", "max"):
                was = (before.get(tensor) or {}).get(bound)
                if was != ranges.get(bound):
                    parts.append(f"profile {name!r} {tensor} {bound} {was} -> {ranges.get(bound)}")
    return "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")


def engine_material(record: Any) -> dict[str, Any]:
    """What an engine's key was made of (an EngineRecord, or the same fields of a build not yet made), as the
    explanation compares it, in the order it names them."""
    return {
        "model": record.model_sha256,
        "profiles": [_dumped(p) for p in record.profiles],
        "compute capability": list(record.compute_capabilities),
        "precision": str(record.precision),
        "calibration": record.calibration_sha256,
        "builder options": record.builder_options,
        "backend version": record.backend,
        "prepared model": record.built_model_sha256,
    }


def _dumped(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def engine_candidates(cache_root: Path) -> list[tuple[str, dict[str, Any]]]:
    """The engines of the local cache, newest first: (label, what the key was made of)."""
    from compiler.core.records import EngineRecord

    records = sorted((cache_root / "engines").glob("*/*/engine.json"), key=_mtime, reverse=True)[:MAX_ENTRIES]
    found = []
    for path in records:
        try:
            record = EngineRecord.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            continue
        found.append((f"{record.sku}/{record.precision}, key {path.parent.name[:12]}", engine_material(record)))
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def calibration_material(record: dict[str, Any]) -> dict[str, Any]:
    """What a calibration's key was made of (calibration.json's fields), in the order the explanation names them."""
    return {
        "model": record.get("model_sha256"),
        "data": record.get("data_sha256"),
        "precision": record.get("precision"),
        "method": record.get("method"),
        "samples": record.get("samples"),
        "batch size": record.get("batch_size"),
        "seed": record.get("seed"),
        "options": record.get("options"),
        "versions": record.get("versions"),
    }


def calibration_candidates(folders: Iterable[Path]) -> list[tuple[str, dict[str, Any]]]:
    """Calibrations in these folders (an OUT folder, the build cache's calibrations), as candidates."""
    found = []
    for folder in folders:
        try:
            record = json.loads((folder / "calibration.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            found.append((str(folder), calibration_material(record)))
    return found
