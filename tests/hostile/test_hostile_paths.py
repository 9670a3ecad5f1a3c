"""`compile calibrate --out` never overwrites what it reads: the model, its external data, the data file or the
image folder's files, however they are reached (the same path, a symlink, a hard link, a symlinked folder)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import onnx
import pytest

from calibration import calibrate
from compiler.core.errors import InvalidInput
from compiler.core.paths import check_not_overwriting
from tests.support.cli import assert_clean_error
from tests.support.digits import DIGITS_PROFILES, run_build, run_calibrate


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _copy(source: Path, target: Path) -> Path:
    """A copy of an example file where the test wants it (its folder made): what a refused run must leave intact."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


def _refused(done, *fragments: str) -> str:
    line = assert_clean_error(done, 2, "--out", "would overwrite the input", *fragments)
    assert "internal error" not in line
    return line


def test_out_holding_the_model_itself(tmp_path, digits_model):
    model = _copy(digits_model, tmp_path / "work" / "model.onnx")
    folder = model.parent
    before = _snapshot(folder)
    done = run_calibrate(folder, model=model, timeout=120)
    _refused(done, str(model))
    assert _snapshot(folder) == before


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_an_output_file_that_is_another_name_for_the_model(tmp_path, digits_model, link):
    model = _copy(digits_model, tmp_path / "src" / "digits.onnx")
    out = tmp_path / "out"
    out.mkdir()
    (os.symlink if link == "symlink" else os.link)(model, out / "model.onnx")
    done = run_calibrate(out, model=model, timeout=120)
    _refused(done, "model.onnx", str(model), "another name")
    assert _digest(model) == _digest(digits_model)
    assert sorted(p.name for p in out.iterdir()) == ["model.onnx"]


def test_an_output_file_that_is_the_data(tmp_path, digits_data):
    data = _copy(digits_data, tmp_path / "data.npz")
    out = tmp_path / "out"
    out.mkdir()
    os.link(data, out / "report.json")
    done = run_calibrate(out, data=data, timeout=120)
    _refused(done, "report.json", str(data))
    assert _digest(data) == _digest(digits_data)


def test_out_reached_through_a_symlinked_folder(tmp_path, digits_model):
    model = _copy(digits_model, tmp_path / "work" / "model.onnx")
    folder = model.parent
    (tmp_path / "alias").symlink_to(folder, target_is_directory=True)
    done = run_calibrate(tmp_path / "alias", model=model, timeout=120)
    _refused(done, str(model))
    assert _digest(model) == _digest(digits_model)


def test_out_holding_the_models_external_data(tmp_path, digits_model):
    folder = tmp_path / "work"
    folder.mkdir()
    model = folder / "net.onnx"
    onnx.save_model(
        onnx.load(digits_model), model, save_as_external_data=True, location="model.onnx.data", size_threshold=0
    )
    before = _snapshot(folder)
    done = run_calibrate(folder, model=model, timeout=120)
    _refused(done, "model.onnx.data")
    assert _snapshot(folder) == before


def test_out_holding_the_image_folders_files(tmp_path):
    from PIL import Image

    images = tmp_path / "imgs"
    images.mkdir()
    for i in range(6):
        Image.new("L", (8, 8), i * 40).save(images / f"{i}.png")
    (images / "preprocess.yaml").write_text("color: L\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "calibration.cache").symlink_to(images / "3.png")
    (out / "report.json").symlink_to(images / "preprocess.yaml")
    before = _snapshot(images)
    done = run_calibrate(out, data=images, timeout=120)
    _refused(done, "imgs/")
    assert _snapshot(images) == before


def test_a_staged_out_folder_holding_an_input(tmp_path, digits_model, digits_data):
    """A staged run replaces the whole folder: an input anywhere inside it would go."""
    out = tmp_path / "cal"
    model = _copy(digits_model, out / "inputs" / "digits.onnx")
    with pytest.raises(InvalidInput, match="replaced when the run ends"):
        calibrate(model, digits_data, out, staged=True)
    assert _digest(model) == _digest(digits_model)


def test_out_beside_the_model_under_other_names_works(tmp_path, digits_model):
    model = _copy(digits_model, tmp_path / "work" / "digits.onnx")
    folder = model.parent
    done = run_calibrate(folder, "--samples", "100", model=model, timeout=120)
    assert done.exit_code == 0, done.stderr
    assert _digest(model) == _digest(digits_model) and (folder / "model.onnx").is_file()


def test_check_not_overwriting(tmp_path):
    source = tmp_path / "a.onnx"
    source.write_bytes(b"model")
    check_not_overwriting([tmp_path / "new" / "model.onnx", tmp_path / "dangling"], [source], "--out")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    check_not_overwriting([tmp_path / "dangling", tmp_path / "a.onnx" / "under-a-file"], [source], "--out")
    with pytest.raises(InvalidInput, match=r"^--out .*: writing a\.onnx there would overwrite the input"):
        check_not_overwriting([source], [source], "--out")


def _build(model: Path, out: Path, *extra: str | Path, profiles: Path = DIGITS_PROFILES, precision: str = "fp32"):
    return run_build(out, ("rtx-4090",), (precision,), *extra, model=model, profiles=profiles, timeout=120)


@pytest.mark.parametrize("how", ["inside", "symlink"])
def test_build_out_never_replaces_the_folder_holding_its_model(tmp_path, digits_model, how):
    """OUT/<sku>/<precision>/ is replaced whole when its target is done: a model in there (or reached through a
    link into there) would be deleted by its own build."""
    out = tmp_path / "engines"
    target = out / "rtx-4090" / "fp32"
    target.mkdir(parents=True)
    shutil.copy(digits_model, target / "model.onnx")
    model = target / "model.onnx"
    if how == "symlink":
        model = tmp_path / "model.onnx"
        model.symlink_to(target / "model.onnx")
    before = _snapshot(out)
    line = assert_clean_error(_build(model, out), 2, "--out", "replaced when the run ends", "choose another")
    assert "internal error" not in line
    assert _snapshot(out) == before


def test_build_out_never_overwrites_its_profiles_or_calibration(tmp_path, digits_model):
    out = tmp_path / "engines"
    out.mkdir()
    profiles = out / "build.json"  # a profiles file where the run writes its status file
    shutil.copy(Path(__file__).resolve().parents[2] / "profiles" / "digits.yaml", profiles)
    assert_clean_error(
        _build(digits_model, out, profiles=profiles), 2, "--out", "build.json", "would overwrite the input"
    )
    assert profiles.read_text().startswith("# Shape profiles")
    calibration = out / "rtx-4090" / "int8"  # the calibration folder is the int8 target's own folder
    assert run_calibrate(calibration).exit_code == 0
    before = _snapshot(calibration)
    assert_clean_error(
        _build(digits_model, out, "--calibration", calibration, precision="int8"),
        2,
        "--out",
        "replaced when the run ends",
    )
    assert _snapshot(calibration) == before
