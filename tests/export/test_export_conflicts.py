"""What an export refuses names what conflicts (issue 42): a release with several precisions per compute capability
is not a conflict between SKUs (``export rtx`` said ``rtx-3090 and rtx-3090 both have a int8 engine``): it asks for
``--precision``; two SKUs of one compute capability with different plans are named with their precisions."""

from __future__ import annotations

import json

import pytest

from compiler.core.errors import InvalidInput
from compiler.core.records import BlobRef
from compiler.export import engine_per_capability
from compiler.releases import resolve
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import TINY_MODEL, TINY_PROFILES


@pytest.fixture(scope="module")
def store(tmp_path_factory, built_digits) -> str:
    """digits@1.0.0: rtx-3090 fp16 and fp32 engines of the tiny fixture model, in a folder store."""
    build = built_digits(("rtx-3090",), ("fp16", "fp32"), model=TINY_MODEL, profiles=TINY_PROFILES)
    store = str(tmp_path_factory.mktemp("export-conflicts") / "store")
    published = run_cli("publish", build, "--store", store, "--name", "digits", "--version", "1.0.0")
    assert published.exit_code == 0, published.stderr
    return store


def test_export_rtx_of_several_precisions_asks_for_one(store, tmp_path):
    refused = run_cli("export", "rtx", "digits@1.0.0", "--store", store, "--out", tmp_path)
    assert_clean_error(refused, 2, "digits@1.0.0 has engines of fp16, fp32", "--precision fp16 or fp32")
    assert list(tmp_path.iterdir()) == []
    exported = run_cli("export", "rtx", "digits@1.0.0", "--store", store, "--out", tmp_path, "--precision", "fp32",
                       "--json")  # fmt: skip
    assert exported.exit_code == 0, exported.stderr
    assert [t["precision"] for t in json.loads(exported.stdout)["targets"]] == ["fp32"]


def test_two_skus_with_other_plans_for_one_compute_capability_are_named_with_their_precisions(store):
    engine = resolve(store, "digits@1.0.0").manifest.content.engines[0]
    other = engine.model_copy(update={"sku": "rtx-a6000", "plan": BlobRef(sha256="0" * 64, size_bytes=1)})
    with pytest.raises(InvalidInput) as raised:
        engine_per_capability([engine, other], "publish one of them per compute capability")
    assert str(raised.value).startswith(
        f"rtx-3090/{engine.precision} and rtx-a6000/{engine.precision} are different plans for compute capability 8.6"
    )


def test_pull_and_export_rtx_create_their_output_folders(store, tmp_path):
    """Issue 43, footgun 2: `pull --out` and `export rtx --out` make the folder they write (parents too), as
    build and calibrate do; a refused one makes nothing."""
    refused = run_cli("pull", "digits@9.9.9", "--store", store, "--out", tmp_path / "r" / "model.plan")
    assert refused.exit_code == 2 and not (tmp_path / "r").exists()
    plan = tmp_path / "a" / "b" / "model.plan"
    pulled = run_cli(
        "pull", "digits@1.0.0", "--store", store, "--sku", "rtx-3090", "--precision", "fp32", "--out", plan
    )
    assert pulled.exit_code == 0, pulled.stderr
    assert plan.is_file()
    out = tmp_path / "c" / "d"
    exported = run_cli("export", "rtx", "digits@1.0.0", "--store", store, "--out", out, "--precision", "fp32")
    assert exported.exit_code == 0, exported.stderr
    assert (out / "digits").is_dir()
    blocked = run_cli("pull", "digits@1.0.0", "--store", store, "--sku", "rtx-3090", "--precision", "fp32",
                      "--out", plan / "x")  # fmt: skip
    assert_clean_error(blocked, 2, "cannot write there")
