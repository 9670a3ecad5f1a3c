"""Profile dims beyond what TensorRT takes are refused by the profile schema, before any build."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from compiler.core.errors import InvalidInput
from compiler.core.profiles import MAX_DIM, MAX_VOLUME, ShapeRange, load_profiles
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build


def _profiles(tmp_path, max_shape, name="online"):
    path = tmp_path / "profiles.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {"name": name, "shapes": {"image": {"min": [1, 1, 8, 8], "opt": [1, 1, 8, 8], "max": max_shape}}}
                ]
            }
        )
    )
    return path


@pytest.mark.parametrize("batch", [2**31, 2**32, 2**63 - 1, 2**63, 10**20])
def test_a_dim_beyond_int32_is_refused_by_inspect_and_build(tmp_path, digits_model, batch):
    profiles = _profiles(tmp_path, [batch, 1, 8, 8])
    with pytest.raises(InvalidInput, match=r"profile 'online' input 'image' max\[0\]: .*2147483647"):
        load_profiles(profiles)
    inspected = run_cli("inspect", digits_model, "--profiles", profiles)
    assert_clean_error(inspected, 2, "profiles.yaml", "profile 'online' input 'image' max[0]", str(batch), "2147483647")
    built = run_build(tmp_path / "out", ("rtx-4090",), ("fp32",), profiles=profiles)
    assert_clean_error(built, 2, "profiles.yaml", "max[0]", "2147483647")
    assert "internal error" not in built.stderr
    assert not (tmp_path / "out").exists()


def test_a_shape_of_more_than_2_40_elements_is_refused(tmp_path, digits_model):
    profiles = _profiles(tmp_path, [2**31 - 1, 2**9 + 1, 1, 1])
    done = run_cli("inspect", digits_model, "--profiles", profiles)
    assert_clean_error(done, 2, "profile 'online' input 'image'", "max", str(MAX_VOLUME))


def test_the_largest_dim_is_accepted_by_the_schema(tmp_path):
    assert ShapeRange(min=[1, 1], opt=[1, 1], max=[MAX_DIM, 1]).max == [MAX_DIM, 1]
    with pytest.raises(ValidationError):
        ShapeRange(min=[1, 1], opt=[1, 1], max=[MAX_DIM + 1, 1])


_dims = st.integers(min_value=1, max_value=MAX_DIM)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_dims, _dims, _dims), min_size=1, max_size=4))
def test_every_shape_the_schema_accepts_tensorrt_accepts(axes):
    """The schema's bound is TensorRT's: whatever passes it, ``IOptimizationProfile.set_shape`` takes."""
    trt = pytest.importorskip("tensorrt_rtx")
    ordered = [sorted(axis) for axis in axes]
    low, mid, high = ([axis[i] for axis in ordered] for i in range(3))
    try:
        ShapeRange(min=low, opt=mid, max=high)
    except ValidationError:
        return  # too many elements: refused, with a message
    builder = _builder(trt)
    network = builder.create_network(0)
    network.add_input("x", trt.float32, [-1] * len(axes))
    builder.create_optimization_profile().set_shape("x", low, mid, high)


_BUILDER = []


def _builder(trt):
    if not _BUILDER:
        _BUILDER.append(trt.Builder(trt.Logger(trt.Logger.ERROR)))
    return _BUILDER[0]


def test_the_largest_dim_on_a_model_with_a_position_table_is_refused_quickly_naming_the_limit(tmp_path):
    """A sequence of 2**31-1 on the encoder: the Range of positions is not evaluated (its bounds are), the largest
    size the model takes is found by bisection in ~31 inferences, and nothing is built."""
    import time

    from tests.fixtures.make_encoder import MODEL

    shape = {"min": [1, 1], "opt": [1, 1], "max": [1, 2**31 - 1]}
    profiles = tmp_path / "huge.yaml"
    profiles.write_text(
        yaml.safe_dump({"profiles": [{"name": "huge", "shapes": {"input_ids": shape, "attention_mask": shape}}]})
    )
    started = time.monotonic()
    result = run_build(tmp_path / "out", ("rtx-4090",), ("fp32",), model=MODEL, profiles=profiles)
    assert_clean_error(
        result, 2, "profile 'huge'", "max 2147483647", "index 2147483646 of the 128", "lower the max to 128"
    )
    assert time.monotonic() - started < 60 and not (tmp_path / "out").exists()
