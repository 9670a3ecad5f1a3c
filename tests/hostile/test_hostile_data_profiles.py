"""`compile check --data` with samples the engines cannot take (issue 33): shapes outside every profile, and inputs
that disagree on a symbolic dim, are refused with exit 2 naming the input, the shape and the profile's range, before
onnxruntime runs anything and before check.json is written."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.make_encoder import MODEL, PROFILES, make_data
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_build


@pytest.fixture(scope="module")
def encoder_build(tmp_path_factory):
    """An fp16 engine of the encoder, profile 'online': sequence 8 to 64."""
    out = tmp_path_factory.mktemp("encoder-fp16")
    built = run_build(out, model=MODEL, profiles=PROFILES)
    assert built.exit_code == 0, built.stderr
    return out


def _data(path, sequence: int, mask_sequence: int | None = None):
    make_data(path, samples=8, sequence=sequence)
    if mask_sequence is not None:
        with np.load(path) as data:
            ids = data["input_ids"]
        mask = np.ones((len(ids), mask_sequence), np.int64)
        np.savez(path, input_ids=ids, attention_mask=mask)
    return path


@pytest.mark.parametrize(("sequence", "side"), [(128, "longer"), (4, "shorter")])
def test_samples_outside_every_profile_are_refused(tmp_path, encoder_build, sequence, side):
    result = run_cli("check", encoder_build, "--data", _data(tmp_path / f"{side}.npz", sequence))
    assert_clean_error(
        result,
        2,
        f"{side}.npz",
        "input 'input_ids'",
        f"[N, {sequence}]",
        "rtx-4090/fp16",
        "profile 'online' takes dim 1 from 8 to 64",
        f"the samples have {sequence}",
    )
    assert not (encoder_build / "check.json").exists()


def test_inputs_that_disagree_on_a_shared_dim_never_reach_onnxruntime(tmp_path, encoder_build):
    result = run_cli("check", encoder_build, "--data", _data(tmp_path / "mixed.npz", 64, mask_sequence=128))
    line = assert_clean_error(
        result,
        2,
        "mixed.npz",
        "input 'input_ids' has shape [N, 64]",
        "input 'attention_mask' [N, 128]",
        "symbolic dim 'sequence'",
    )
    assert "onnxruntime" not in result.stderr.lower() and "broadcast" not in line.lower()


def test_samples_inside_a_profile_are_checked(tmp_path, encoder_build):
    result = run_cli("check", encoder_build, "--data", _data(tmp_path / "fits.npz", 64))
    assert result.exit_code == 0, result.stderr
    assert (encoder_build / "check.json").exists()
