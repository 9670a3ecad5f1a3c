"""compiler.backends: the registry resolves a backend by name, a build runs in a child process of its own and
leaves a real TensorRT-RTX plan whose header says what it was built for."""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.backends import default_backend, installed_versions, is_installed, load_backend
from compiler.backends.base import BuildSpec
from compiler.backends.isolated import Builders
from compiler.backends.tensorrt_rtx import TensorRTRTXBackend
from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.profiles import ShapeProfile
from compiler.core.records import Status
from tests.support.onnx_files import save_model

RTX = "tensorrt-rtx"


def test_a_backend_resolves_by_its_registered_name():
    assert type(load_backend(RTX)) is TensorRTRTXBackend
    with pytest.raises(InvalidInput, match="unknown backend 'nope'; choose one of: tensorrt-rtx, tensorrt"):
        load_backend("nope")


def test_an_edition_that_is_not_installed_says_how_to_install_it():
    """Datacenter TensorRT cannot be installed here: it resolves, and refuses with its install hint."""
    assert not is_installed("tensorrt") and is_installed(RTX) and not is_installed("nope")
    with pytest.raises(EnvironmentProblem, match=r"backend tensorrt is not installed .*pip install"):
        load_backend("tensorrt")
    assert installed_versions() == {RTX: importlib.metadata.version("tensorrt-rtx"), "tensorrt": None}
    assert default_backend() == RTX  # the one that builds anywhere, where no GPU edition is installed


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """x [N, 8] -> MatMul (8x4) -> Relu: a model TensorRT-RTX builds in a second."""
    weights = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4) / 32, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], "matmul"), helper.make_node("Relu", ["h"], ["y"], "relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    return save_model(tmp_path_factory.mktemp("tiny") / "tiny.onnx", nodes, [x], [y], [weights])


def _spec(model, capabilities=("8.9",), input_name="x") -> BuildSpec:
    profile = ShapeProfile(name="p", shapes={input_name: {"min": [1, 8], "opt": [2, 8], "max": [4, 8]}})
    return BuildSpec(model, (profile,), capabilities, sku="test")


def _build(model, folder, capabilities=("8.9",), input_name="x", cancel=None):
    """The outcome, the progress steps the child reported, and the folder it wrote."""
    folder.mkdir()
    steps = []
    built = Builders().build(RTX, _spec(model, capabilities, input_name), folder, lambda *s: steps.append(s), cancel)
    return built, steps, folder


@pytest.fixture(scope="module")
def built(tiny, tmp_path_factory):
    return _build(tiny, tmp_path_factory.mktemp("built") / "target", capabilities=("8.6", "8.9"))


def test_an_isolated_build_writes_the_plan_it_reports(built):
    outcome, steps, folder = built
    plan = (folder / "engine.plan").read_bytes()
    assert outcome.status == Status.OK and outcome.errors == []
    assert (outcome.sha256, outcome.size_bytes) == (hashlib.sha256(plan).hexdigest(), len(plan))
    assert outcome.backend_version == importlib.metadata.version("tensorrt-rtx")
    assert {node for kernel in outcome.layers for node in kernel.onnx_nodes} >= {"matmul", "relu"}, outcome.layers
    assert steps and (folder / "build.log").read_text().strip()


def test_the_plan_header_names_the_edition_its_version_and_every_target(built):
    outcome, _, _ = built
    header = outcome.plan_header
    assert header["magic"] == "vtrt" and header["version"] == outcome.backend_version
    assert header["compute_capabilities"] == ["8.6", "8.9"] and header["compute_capability_mask"] == 0x4 | 0x8


def test_a_plan_that_disagrees_with_its_request_is_named(built):
    plan = (built[2] / "engine.plan").read_bytes()
    backend = load_backend(RTX)
    assert backend.plan_mismatch(plan, ("8.9", "8.6")) is None
    assert "but ['8.9'] were requested" in backend.plan_mismatch(plan, ("8.9",))
    assert "fewer than its 64-byte header" in backend.plan_mismatch(plan[:10], ("8.9",))
    assert "plan magic 'xtrt'" in backend.plan_mismatch(b"x" + plan[1:], ("8.6", "8.9"))
    assert backend.plan_header(plan[:63]) is None


def test_a_build_that_cannot_start_fails_alone_naming_why(tiny, tmp_path):
    outcome, _, _ = _build(tiny, tmp_path / "target", input_name="image")
    assert outcome.status == Status.FAILED and "input 'image' is not a network input" in outcome.errors[0]
    assert not (tmp_path / "target" / "engine.plan").exists()


def test_a_build_cancelled_before_it_starts_is_cancelled_and_writes_no_plan(tiny, tmp_path):
    cancel = threading.Event()
    cancel.set()
    outcome, _, _ = _build(tiny, tmp_path / "target", cancel=cancel)
    assert outcome.status == Status.CANCELLED and outcome.errors == ["build cancelled"]
    assert not (tmp_path / "target" / "engine.plan").exists()
