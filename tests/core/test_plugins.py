"""The plug-in registries (compiler/core/plugins.py) are the one place a store kind or a build backend is described:
these hold the rest of the code to them, so a new entry cannot be half-registered."""

from __future__ import annotations

import importlib
from typing import get_args

import pytest

from compiler.core import plugins
from compiler.core.errors import InvalidInput
from compiler.core.profiles import Backend, load_sku_catalog
from compiler.core.runtimes import FAMILY_NAMES, PLAN_MAGIC, RuntimeFamily, claimed_by_header
from compiler.stores import open_store
from compiler.stores.base import Store

SAMPLE_URIS = {"folder": "{tmp}/store", "s3": "s3://bucket-a/team", "oci": "oci+http://127.0.0.1:9/team"}


@pytest.mark.parametrize("kind", plugins.STORES, ids=lambda k: k.name)
def test_every_store_kind_opens_from_its_uri_as_its_class(kind, tmp_path):
    backend = getattr(importlib.import_module(kind.module), kind.cls)
    assert issubclass(backend, Store)
    store = open_store(SAMPLE_URIS[kind.name].format(tmp=tmp_path), create=True)  # nothing is contacted yet
    assert type(store) is backend
    assert plugins.store_kind(store.uri if kind.name != "folder" else "file://x") is kind


def test_an_unknown_scheme_is_refused_naming_every_kind():
    with pytest.raises(InvalidInput) as refused:
        open_store("ftp://host/x")
    for kind in plugins.STORES:
        assert kind.prefixes[0] in str(refused.value)


def test_store_help_and_errors_name_every_kind():
    from compiler.cli.params import StoreOption

    help_text = StoreOption.__metadata__[0].help
    assert all(kind.form.lower() in help_text.lower() for kind in plugins.STORES)
    assert "oci+http://" in help_text


def test_the_backend_literals_are_the_registry():
    names = set(plugins.backend_names())
    assert set(get_args(RuntimeFamily)) == names == set(get_args(Backend)) == set(FAMILY_NAMES)
    assert {sku.backend for sku in load_sku_catalog().skus.values()} <= names


@pytest.mark.parametrize("kind", plugins.BACKENDS, ids=lambda k: k.name)
def test_every_backend_names_its_class_and_package(kind):
    backend = getattr(importlib.import_module(kind.module), kind.cls)
    assert backend.module_name == kind.package
    if kind.plan_magic:
        assert PLAN_MAGIC[kind.plan_magic] == kind.name
        assert claimed_by_header(kind.plan_magic.encode() + bytes(60)) == kind.name


def test_a_build_prefers_the_gpu_backend_and_a_proof_the_one_that_builds_anywhere():
    assert [k.needs_target_gpu for k in plugins.preferred(gpu=True)] == sorted(
        (k.needs_target_gpu for k in plugins.BACKENDS), reverse=True
    )
    assert not plugins.preferred(gpu=False)[0].needs_target_gpu
