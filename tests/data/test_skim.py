"""The build's fast reading of model inputs: it must agree with the full safe load wherever it answers,
and leave to the full load every model that may reference external data or that it cannot vouch for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.core.errors import InvalidInput
from compiler.core.profiles import load_profiles
from compiler.data.model import STUB_BYTES, load_model
from compiler.data.protobuf_inputs import skim_inputs, skim_weightless
from compiler.data.shape_limits import STUB_LOCATION, profile_limit_errors, weightless_model
from tests.support import synthetic
from tests.support.cli import assert_clean_error
from tests.support.digits import run_build
from tests.support.onnx_files import ONNX_LIGHT, external_model, point_external_data, save_model

SHIPPED_MODELS = sorted(
    [
        *(Path(onnx.__file__).parent / "backend" / "test" / "data").rglob("*.onnx"),
        *(Path(onnxruntime.__file__).parent / "datasets").glob("*.onnx"),
    ]
)
"""The models the onnx and onnxruntime wheels ship: real networks, PyTorch-converted operators, string ops."""


def full_load_inputs(path: Path):
    return load_model(path, infer_shapes=False, check=False, digest=False).input_dims()


def test_real_models_agree_with_the_full_load(tmp_path, digits_model):
    models = [
        digits_model,
        *sorted(ONNX_LIGHT.glob("*.onnx")),
        synthetic.resnet(tmp_path / "resnet18.onnx", depth=18, image_size=64),
        synthetic.bert_base(tmp_path / "bert.onnx", layers=2, hidden=64, heads=2, vocab=500),
    ]
    assert len(models) > 10
    for path in models:
        skimmed = skim_inputs(path)
        assert skimmed is not None, path
        assert skimmed == full_load_inputs(path), path


def test_models_onnx_and_onnxruntime_ship_agree_or_are_left_to_the_full_load():
    answered = 0
    for path in SHIPPED_MODELS:
        skimmed = skim_inputs(path)
        if skimmed is not None:
            answered += 1
            assert skimmed == full_load_inputs(path), path
    assert answered > 0.9 * len(SHIPPED_MODELS) > 100


def _without_big_values(model: onnx.ModelProto, stub_bytes: int = STUB_BYTES) -> onnx.ModelProto:
    """What skim_weightless promises of the full load: each initializer whose values are one raw, float or double
    field over ``stub_bytes`` without them, marked as external data at the stub's location; everything else as it
    was."""
    for tensor in model.graph.initializer:
        sizes = {"raw_data": len(tensor.raw_data), "float_data": 4 * len(tensor.float_data)}
        sizes["double_data"] = 8 * len(tensor.double_data)
        others = any(len(getattr(tensor, f)) for f in ("int32_data", "string_data", "int64_data", "uint64_data"))
        present = [size for size in sizes.values() if size]
        if not others and len(present) == 1 and present[0] > stub_bytes:
            for field in (*sizes, "int32_data", "string_data", "int64_data", "uint64_data"):
                tensor.ClearField(field)
            tensor.external_data.add(key="location", value=STUB_LOCATION)
            tensor.data_location = TensorProto.EXTERNAL
    return model


def test_weightless_reading_is_the_full_load_without_the_big_values(tmp_path, digits_model):
    models = [
        digits_model,
        synthetic.resnet(tmp_path / "resnet18.onnx", depth=18, image_size=64),
        synthetic.bert_base(tmp_path / "bert.onnx", layers=2, hidden=64, heads=2, vocab=500),
        *SHIPPED_MODELS,
    ]
    answered = 0
    for path in models:
        if skim_weightless(path, STUB_BYTES) is not None:
            answered += 1
            assert weightless_model(path) == _without_big_values(onnx.load(path)), path
    assert answered > 0.9 * len(models)
    bert = tmp_path / "bert.onnx"
    rest, graph_parts = skim_weightless(bert, STUB_BYTES)
    assert len(rest) + sum(len(part) for _, part in graph_parts) < bert.stat().st_size / 20  # no weight's bytes


def _with_initializer_bytes(model: onnx.ModelProto, name: str, tensor_bytes: bytes) -> bytes:
    """``model`` serialized with initializer ``name`` written as ``tensor_bytes``: an encoding protobuf accepts but
    would not write itself."""
    from google.protobuf.internal.encoder import _VarintBytes

    def field(number: int, payload: bytes) -> bytes:
        return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload

    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    [tensor] = [t for t in graph.initializer if t.name == name]
    graph_bytes = graph.SerializeToString().replace(field(5, tensor.SerializeToString()), field(5, tensor_bytes))
    rest = onnx.ModelProto()
    rest.CopyFrom(model)
    rest.ClearField("graph")
    return rest.SerializeToString() + field(7, graph_bytes)


def _reshape_to_heads() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4, 16])],
        [numpy_helper.from_array(np.array([-1, 4, 16], np.int64), "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("encoding", ["raw-data-twice", "unpacked-int64", "packed-int64"])
def test_values_protobuf_would_write_shorter_stay_in_the_weightless_read(tmp_path, encoding):
    """Whether a tensor's values are left out is decided by what protobuf holds, not by their length in the file:
    a field written twice (the last wins), int64 values unpacked or packed (varints may be written longer than
    protobuf writes them) keep the tensor whole, so the limit check reads the same values as after a full load."""
    from google.protobuf.internal.encoder import _VarintBytes

    model = _reshape_to_heads()
    target = model.graph.initializer[0]
    if encoding == "raw-data-twice":  # 5000 ignored bytes before the real raw_data
        written = b"\x4a" + _VarintBytes(5000) + bytes(5000) + target.SerializeToString()
    else:  # 2,000 int64 values: 3.9 KB as protobuf writes them, over 5 KB as written here
        values = list(range(2000))
        target = helper.make_tensor("table", TensorProto.INT64, [len(values)], values)
        model.graph.initializer.append(target)
        bare = onnx.TensorProto()
        bare.CopyFrom(target)
        bare.ClearField("int64_data")
        if encoding == "unpacked-int64":
            payload = b"".join(b"\x38" + _VarintBytes(v) for v in values)
        else:  # each varint one byte longer than it need be
            packed = b"".join(_VarintBytes(v)[:-1] + bytes([_VarintBytes(v)[-1] | 0x80, 0]) for v in values)
            payload = b"\x3a" + _VarintBytes(len(packed)) + packed
        written = bare.SerializeToString() + payload
    path = tmp_path / "model.onnx"
    path.write_bytes(_with_initializer_bytes(model, target.name, written))
    full = onnx.load(path)
    assert len(written) > STUB_BYTES >= full.graph.initializer[-1].ByteSize()
    assert skim_weightless(path, STUB_BYTES) is not None
    assert weightless_model(path) == full  # nothing left out: no single raw, float or double field to leave
    (tmp_path / "p.yaml").write_text(
        "profiles:\n  - name: p\n    shapes:\n      x: {min: [1, 64], opt: [1, 64], max: [2, 64]}\n"
    )
    profiles = load_profiles(tmp_path / "p.yaml")
    assert profile_limit_errors(weightless_model(path), profiles) == profile_limit_errors(full, profiles) == []


def test_float_and_double_values_are_left_out_like_raw_bytes(tmp_path):
    """Values in float_data or double_data (as helper.make_tensor writes them) are left out like raw_data."""
    model = _reshape_to_heads()
    model.graph.initializer.extend(
        [
            helper.make_tensor("floats", TensorProto.FLOAT, [2000], [0.5] * 2000),
            helper.make_tensor("doubles", TensorProto.DOUBLE, [1000], [0.25] * 1000),
        ]
    )
    path = tmp_path / "model.onnx"
    onnx.save_model(model, path)
    weightless = weightless_model(path)
    assert skim_weightless(path, STUB_BYTES) is not None
    assert [t.data_location for t in weightless.graph.initializer] == [0, TensorProto.EXTERNAL, TensorProto.EXTERNAL]
    assert weightless == _without_big_values(onnx.load(path))


def test_every_kind_of_input_shape(tmp_path):
    weight = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    inputs = [
        helper.make_tensor_value_info("fixed", TensorProto.FLOAT, [1, 3, 224, 224]),
        helper.make_tensor_value_info("named", TensorProto.FLOAT, ["batch", 128]),
        helper.make_tensor_value_info("unknown_dim", TensorProto.FLOAT, [None, 4]),
        helper.make_tensor_value_info("unknown_rank", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("scalar", TensorProto.INT64, []),
        helper.make_tensor_value_info("huge", TensorProto.FLOAT, [2**40, -1]),
        helper.make_tensor_sequence_value_info("sequence", TensorProto.FLOAT, [3]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 2]),  # an initializer listed as an input
    ]
    path = save_model(
        tmp_path / "shapes.onnx", [helper.make_node("Identity", ["fixed"], ["y"])], inputs, [Y], [weight], check=False
    )
    assert (
        skim_inputs(path)
        == full_load_inputs(path)
        == {
            "fixed": [1, 3, 224, 224],
            "named": ["batch", 128],
            "unknown_dim": [None, 4],
            "unknown_rank": None,
            "scalar": [],
            "huge": [2**40, None],  # -1: dynamic, as Paddle2ONNX writes it
            "sequence": None,
        }
    )


def _external(tensor: TensorProto, location: str = "../outside.bin") -> TensorProto:
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def _weights(name: str = "w") -> TensorProto:
    return numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), name)


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])


def _initializer(tmp_path):
    return save_model(
        tmp_path / "m.onnx",
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [X],
        [Y],
        [_external(_weights())],
        check=False,
    )


def _constant_node(tmp_path):
    return save_model(
        tmp_path / "m.onnx",
        [helper.make_node("Constant", [], ["y"], value=_external(_weights()))],
        [X],
        [Y],
        check=False,
    )


def _subgraph_initializer(tmp_path):
    branch = helper.make_graph([helper.make_node("Identity", ["w"], ["z"])], "b", [], [Y], [_external(_weights())])
    branch.output[0].name = "z"
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    return save_model(tmp_path / "m.onnx", [node], [cond], [Y], check=False)


def _sparse_initializer(tmp_path):
    values = _external(numpy_helper.from_array(np.ones(2, np.float32), "s"))
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "s_indices")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [X], [Y])
    graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [2, 2]))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _function_constant(tmp_path):
    body = [
        helper.make_node("Constant", [], ["k"], value=_external(_weights())),
        helper.make_node("Add", ["a", "k"], ["b"]),
    ]
    function = helper.make_function("local", "add_k", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    node = helper.make_node("add_k", ["x"], ["y"], domain="local")
    return save_model(
        tmp_path / "m.onnx", [node], [X], [Y], opsets=(("", 17), ("local", 1)), check=False, functions=[function]
    )


def _location_key_missing(tmp_path):
    tensor = _weights()
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    return save_model(
        tmp_path / "m.onnx", [helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [tensor], check=False
    )


@pytest.mark.parametrize(
    "make",
    [
        _initializer,
        _constant_node,
        _subgraph_initializer,
        _sparse_initializer,
        _function_constant,
        _location_key_missing,
    ],
)
def test_external_data_anywhere_is_left_to_the_full_load(tmp_path, make):
    path = make(tmp_path)
    assert skim_inputs(path) is None
    assert skim_weightless(path, 0) is None
    assert skim_weightless(path, STUB_BYTES) is None  # a small tensor's external data too
    with pytest.raises(InvalidInput, match=r"relative to the model's folder|outside the model's folder"):
        load_model(path, infer_shapes=False, check=False, digest=False)


def test_the_word_location_anywhere_else_only_costs_the_fast_path(tmp_path):
    node = helper.make_node("Identity", ["x"], ["y"], doc_string="moved to a new location in v2")
    path = save_model(tmp_path / "m.onnx", [node], [X], [Y], check=False)
    assert skim_inputs(path) is None
    assert full_load_inputs(path) == {"x": [2, 2]}


def test_never_vouches_for_a_truncated_or_foreign_file(tmp_path, digits_model):
    """Truncation (an interrupted copy) and files that are not models are left to the full load, which refuses
    them. Damage inside a node definition is not looked for here: TensorRT's parser reads the nodes."""
    data = digits_model.read_bytes()
    candidates = [data[:size] for size in range(1, len(data), 97)]
    candidates += [b"", b"\0" * 100, b"name: resnet\nlayers: 50\n", b"\x08\x08" + b"\xff" * 20, data[:-1] + b"\x80"]
    path = tmp_path / "candidate.onnx"
    vouched = 0
    for content in candidates:
        path.write_bytes(content)
        skimmed = skim_inputs(path)
        if skimmed is not None:
            vouched += 1
            assert skimmed == full_load_inputs(path)  # raises if the full load refuses what the skim accepted
        if skim_weightless(path, 64) is not None:
            assert weightless_model(path, 64) == _without_big_values(onnx.load(path), 64)
    assert vouched < len(candidates) // 50  # a prefix can end exactly between two whole fields


def test_build_refuses_external_data_outside_the_folder_before_any_build(tmp_path, digits_model):
    path = external_model(tmp_path / "model", digits_model)
    point_external_data(path, "../../secret.bin")
    result = run_build(tmp_path / "out", ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", model=path)
    assert_clean_error(result, 2, str(path), "outside the model's folder")
    assert not (tmp_path / "out").exists()


def test_build_with_external_data_inside_the_folder(tmp_path, digits_model):
    inline = run_build(tmp_path / "inline", ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", "--json")
    path = external_model(tmp_path / "model", digits_model)
    external = run_build(
        tmp_path / "out", ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", "--json", model=path
    )
    assert inline.exit_code == 0 and external.exit_code == 0, external.stderr
    [target] = json.loads(external.stdout)["targets"]
    assert target["status"] == "ok" and not target["cache_hit"]  # another model file: not the inline engine
    record = json.loads((tmp_path / "out" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert record["model_sha256"] == load_model(path).sha256  # the weights file is part of the digest
