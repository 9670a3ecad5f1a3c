"""The bundled digits example and its build folders: one `compile build` per set of arguments in a session, so the
many tests that only read a build folder share it instead of each building their own."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tests.support.cli import EXAMPLES, REPO, CliResult, run_cli

DIGITS_MODEL = EXAMPLES / "digits_cnn.onnx"
DIGITS_DATA = EXAMPLES / "digits.npz"
DIGITS_PROFILES = REPO / "profiles" / "digits.yaml"
OLD = REPO / "tests" / "fixtures" / "old_release"
"""The old-release fixture: a tiny model (~10 KB plans, quick builds), its profiles and data."""
TINY_MODEL, TINY_PROFILES, TINY_DATA = OLD / "model.onnx", OLD / "profiles.yaml", OLD / "data.npz"


def repeated(flag: str, values: Iterable[str]) -> list[str]:
    """`--sku a --sku b`: the form of every option a command takes more than once."""
    return [item for value in values for item in (flag, value)]


def build_args(
    out: Path,
    skus: Iterable[str] = ("rtx-4090",),
    precisions: Iterable[str] = ("fp16",),
    *extra: str | Path,
    model: Path = DIGITS_MODEL,
    profiles: Path = DIGITS_PROFILES,
) -> list[str | Path]:
    """The arguments of `compile build` of the digits example (or another model) into OUT."""
    targets = [*repeated("--sku", skus), *repeated("--precision", precisions)]
    return ["build", model, "--profiles", profiles, *targets, "--out", out, *extra]


def run_build(*args, model: Path = DIGITS_MODEL, profiles: Path = DIGITS_PROFILES, **run) -> CliResult:
    """`compile build` as a user runs it, of ``build_args(*args)`` (``run`` goes to run_cli: env, cwd, timeout)."""
    return run_cli(*build_args(*args, model=model, profiles=profiles), **run)


class BuiltDigits:
    """The factory behind the ``built_digits`` fixture: a build folder per set of arguments, made on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple, Path] = {}

    def __call__(
        self,
        skus: Iterable[str] = ("rtx-4090",),
        precisions: Iterable[str] = ("fp16",),
        *,
        checked: bool = False,
        data: Path | None = None,
        model: Path = DIGITS_MODEL,
        profiles: Path = DIGITS_PROFILES,
    ) -> Path:
        """The build folder of SKUS x PRECISIONS, with check.json when ``checked`` or ``data`` (checked with that
        data, which also keeps golden inputs). Shared by every test asking the same: copy it before changing it."""
        key = (tuple(skus), tuple(precisions), checked or data is not None, data, model, profiles)
        if key not in self.made:
            out = self.root / f"build-{len(self.made)}"
            built = run_build(out, key[0], key[1], model=model, profiles=profiles)
            assert built.exit_code == 0, built.stderr
            if key[2]:
                checked_run = run_cli("check", out, *(["--data", data] if data is not None else []))
                assert checked_run.exit_code == 0 and (out / "check.json").is_file(), checked_run.stderr
            self.made[key] = out
        return self.made[key]


def first_digits(path: Path, count: int) -> Path:
    """The bundled digits' first ``count`` samples as an .npz at ``path``: a data file with few held-out samples."""
    import numpy as np

    np.savez(path, image=np.load(DIGITS_DATA)["image"][:count])
    return path


def calibrate_args(out: Path, *extra: str | Path, model: Path = DIGITS_MODEL, data: Path = DIGITS_DATA) -> list:
    """The arguments of `compile calibrate` of the digits example (or another model) into OUT."""
    return ["calibrate", model, "--data", data, "--out", out, *extra]


def run_calibrate(*args, model: Path = DIGITS_MODEL, data: Path = DIGITS_DATA, **run) -> CliResult:
    """`compile calibrate` as a user runs it, of ``calibrate_args(*args)`` (``run`` goes to run_cli)."""
    return run_cli(*calibrate_args(*args, model=model, data=data), **run)
