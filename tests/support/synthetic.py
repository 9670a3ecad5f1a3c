"""Random-weight ONNX models the size of real ones, built with onnx.helper and numpy (no torch, no hub).

- ``bert_base(path)``: a BERT-base encoder (~110M parameters, ~440 MB): inputs ``input_ids`` and
  ``attention_mask`` (int64 [B, S]), output ``last_hidden_state`` (float [B, S, 768]).
- ``resnet(path, depth=18|50)``: a ResNet-18/50 CNN (~11.7M / ~25.6M parameters): input ``image``
  (float [B, 3, 224, 224]), output ``logits`` (float [B, 1000]).

Both are opset 17, pass ``onnx.checker`` and are fully supported by TensorRT-RTX's parser. The weights
are random (fixed seed, so the same call gives the same file), scaled so activations stay finite:
good enough for build, calibration and inspection benchmarks, not for accuracy.

Benchmarks import this file with ``sys.path.insert(0, "<repo>/tests"); import synthetic``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
"""Opset 17 (LayerNormalization) with the IR version every onnxruntime and TensorRT release reads."""


class _Graph:
    """A small graph-building helper: unique names, initializers, nodes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: dict[str, int] = {}

    def name(self, prefix: str) -> str:
        count = self._names.get(prefix, 0)
        self._names[prefix] = count + 1
        return f"{prefix}_{count}" if count else prefix

    def const(self, prefix: str, array: np.ndarray) -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def normal(self, prefix: str, shape: tuple[int, ...], std: float) -> str:
        array = self.rng.standard_normal(shape, dtype=np.float32)
        array *= np.float32(std)
        return self.const(prefix, array)

    def op(self, op_type: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        """Add a node; returns its output name."""
        node_name = self.name(prefix or op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [f"{node_name}_out"], name=node_name, **attrs))
        return f"{node_name}_out"

    def save(
        self,
        path: str | os.PathLike[str],
        graph_name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
    ) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="compile-tests-synthetic",
            producer_version="1",
        )
        model.ir_version = IR_VERSION
        onnx.save_model(model, path)
        return path


def _layer_norm(g: _Graph, value: str, prefix: str, hidden: int) -> str:
    return g.op(
        "LayerNormalization",
        [
            value,
            g.const(f"{prefix}.weight", np.ones(hidden, np.float32)),
            g.const(f"{prefix}.bias", np.zeros(hidden, np.float32)),
        ],
        prefix,
        axis=-1,
        epsilon=1e-12,
    )


def _dense(g: _Graph, value: str, prefix: str, fan_in: int, fan_out: int, std: float) -> str:
    product = g.op("MatMul", [value, g.normal(f"{prefix}.weight", (fan_in, fan_out), std)], f"{prefix}.matmul")
    return g.op("Add", [product, g.const(f"{prefix}.bias", np.zeros(fan_out, np.float32))], f"{prefix}.add")


def _bert_embeddings(g: _Graph, vocab: int, hidden: int, max_positions: int, std: float) -> str:
    """Word + position (first S rows of the table) + token type 0, layer-normed."""
    word = g.op("Gather", [g.normal("embeddings.word", (vocab, hidden), std), "input_ids"], "embeddings.word_gather")
    ids_shape = g.op("Shape", ["input_ids"], "embeddings.ids_shape")
    seq_len = g.op(
        "Slice",
        [ids_shape, g.const("const.one_1d", np.array([1], np.int64)), g.const("const.two_1d", np.array([2], np.int64))],
        "embeddings.seq_len",
    )
    positions = g.op(
        "Slice",
        [
            g.normal("embeddings.position", (max_positions, hidden), std),
            g.const("const.zero_1d", np.array([0], np.int64)),
            seq_len,
            g.const("const.axis0", np.array([0], np.int64)),
        ],
        "embeddings.position_slice",
    )
    token_type = g.op(
        "Gather",
        [g.normal("embeddings.token_type", (2, hidden), std), g.const("const.zero_scalar", np.array(0, np.int64))],
        "embeddings.token_type_gather",
    )
    x = g.op("Add", [word, positions], "embeddings.add_position")
    x = g.op("Add", [x, token_type], "embeddings.add_token_type")
    return _layer_norm(g, x, "embeddings.layer_norm", hidden)


def _bert_mask(g: _Graph) -> str:
    """The additive mask [B, 1, 1, S]: 0 where attended, -10000 where masked."""
    mask = g.op("Cast", ["attention_mask"], "mask.cast", to=TensorProto.FLOAT)
    mask = g.op("Sub", [g.const("const.one_f", np.array(1.0, np.float32)), mask], "mask.invert")
    mask = g.op("Mul", [mask, g.const("const.mask_value", np.array(-10000.0, np.float32))], "mask.scale")
    return g.op("Unsqueeze", [mask, g.const("const.mask_axes", np.array([1, 2], np.int64))], "mask.unsqueeze")


def _bert_layer(
    g: _Graph, x: str, mask: str, p: str, shared: dict[str, str], sizes: tuple[int, int], std: float
) -> str:
    """One encoder layer named ``p``: self-attention and a GELU feed-forward block, each with a post-LayerNorm
    residual; ``shared`` holds the constants every layer reads, ``sizes`` is (hidden, intermediate)."""
    hidden, intermediate = sizes
    heads_of = {}
    for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        projected = _dense(g, x, f"{p}.attention.{part}", hidden, hidden, std)
        split = g.op("Reshape", [projected, shared["split"]], f"{p}.attention.{part}.split_heads")
        heads_of[part] = g.op("Transpose", [split], f"{p}.attention.{part}.transpose", perm=perm)
    scores = g.op("MatMul", [heads_of["query"], heads_of["key"]], f"{p}.attention.scores")
    scores = g.op("Mul", [scores, shared["scale"]], f"{p}.attention.scale")
    scores = g.op("Add", [scores, mask], f"{p}.attention.mask")
    probs = g.op("Softmax", [scores], f"{p}.attention.softmax", axis=-1)
    context = g.op("MatMul", [probs, heads_of["value"]], f"{p}.attention.context")
    context = g.op("Transpose", [context], f"{p}.attention.context.transpose", perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, shared["merge"]], f"{p}.attention.context.merge_heads")
    attention = _dense(g, context, f"{p}.attention.output", hidden, hidden, std)
    x = _layer_norm(g, g.op("Add", [attention, x], f"{p}.attention.residual"), f"{p}.attention.layer_norm", hidden)
    h = _dense(g, x, f"{p}.intermediate", hidden, intermediate, std)
    erf = g.op("Erf", [g.op("Div", [h, shared["sqrt2"]], f"{p}.gelu.div")], f"{p}.gelu.erf")
    scaled = g.op("Mul", [h, g.op("Add", [erf, shared["one"]], f"{p}.gelu.add")], f"{p}.gelu.mul")
    gelu = g.op("Mul", [scaled, shared["half"]], f"{p}.gelu.half")
    out = _dense(g, gelu, f"{p}.output", intermediate, hidden, std)
    return _layer_norm(g, g.op("Add", [out, x], f"{p}.output.residual"), f"{p}.output.layer_norm", hidden)


def bert_base(
    path: str | os.PathLike[str],
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    seq: int | str = "S",
    batch: int | str = "B",
    *,
    vocab: int = 30522,
    max_positions: int = 512,
    intermediate: int | None = None,
    seed: int = 0,
) -> Path:
    """A BERT-base-sized encoder with random weights; returns ``path``.

    Embeddings (word Gather + position Slice + token-type row) -> LayerNormalization, then ``layers``
    encoder layers of MatMul/Add self-attention (Softmax, additive attention mask), GELU (Erf) feed-forward
    and post-LayerNorm residuals. With the defaults: ~109M parameters, ~437 MB.
    """
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}")
    intermediate = intermediate or 4 * hidden
    head_dim = hidden // heads
    g = _Graph(seed)
    std = 0.02
    x = _bert_embeddings(g, vocab, hidden, max_positions, std)
    mask = _bert_mask(g)
    shared = {
        "split": g.const("const.split_heads", np.array([0, 0, heads, head_dim], np.int64)),
        "merge": g.const("const.merge_heads", np.array([0, 0, hidden], np.int64)),
        "scale": g.const("const.attention_scale", np.array(1.0 / math.sqrt(head_dim), np.float32)),
        "sqrt2": g.const("const.sqrt2", np.array(math.sqrt(2.0), np.float32)),
        "one": g.const("const.one_gelu", np.array(1.0, np.float32)),
        "half": g.const("const.half", np.array(0.5, np.float32)),
    }
    for index in range(layers):
        x = _bert_layer(g, x, mask, f"encoder.layer.{index}", shared, (hidden, intermediate), std)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, [batch, seq]) for name in ("input_ids", "attention_mask")
    ]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])]
    return g.save(path, "bert_base", inputs, outputs)


_RESNET_BLOCKS = {18: ("basic", [2, 2, 2, 2]), 34: ("basic", [3, 4, 6, 3]), 50: ("bottleneck", [3, 4, 6, 3])}


def resnet(
    path: str | os.PathLike[str],
    depth: int = 18,
    batch: int | str = "B",
    *,
    classes: int = 1000,
    image_size: int = 224,
    seed: int = 0,
) -> Path:
    """A ResNet-18/34/50 with random (He-initialized) weights; returns ``path``.

    Conv + BatchNormalization + Relu blocks with residual Add, MaxPool stem, GlobalAveragePool, Flatten, Gemm.
    The last BatchNormalization of each residual branch has a small scale so activations stay bounded.
    """
    if depth not in _RESNET_BLOCKS:
        raise ValueError(f"depth must be one of {sorted(_RESNET_BLOCKS)}, got {depth}")
    kind, counts = _RESNET_BLOCKS[depth]
    expansion = 4 if kind == "bottleneck" else 1
    g = _Graph(seed)

    def conv_bn(
        value: str, prefix: str, cin: int, cout: int, kernel: int, stride: int, relu: bool, gamma: float = 1.0
    ) -> str:
        weight = g.normal(f"{prefix}.conv.weight", (cout, cin, kernel, kernel), math.sqrt(2.0 / (cin * kernel**2)))
        pad = kernel // 2
        y = g.op(
            "Conv",
            [value, weight],
            f"{prefix}.conv",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        )
        bn = [
            g.const(f"{prefix}.bn.weight", (gamma * (1.0 + 0.1 * g.rng.standard_normal(cout))).astype(np.float32)),
            g.const(f"{prefix}.bn.bias", (0.1 * g.rng.standard_normal(cout)).astype(np.float32)),
            g.const(f"{prefix}.bn.running_mean", (0.1 * g.rng.standard_normal(cout)).astype(np.float32)),
            g.const(f"{prefix}.bn.running_var", g.rng.uniform(0.5, 1.5, cout).astype(np.float32)),
        ]
        y = g.op("BatchNormalization", [y, *bn], f"{prefix}.bn", epsilon=1e-5)
        return g.op("Relu", [y], f"{prefix}.relu") if relu else y

    x = conv_bn("image", "stem", 3, 64, 7, 2, relu=True)
    x = g.op("MaxPool", [x], "stem.maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, count in enumerate(counts):
        width = 64 * 2**stage
        for block in range(count):
            p = f"layer{stage + 1}.{block}"
            stride = 2 if block == 0 and stage > 0 else 1
            out_channels = width * expansion
            if kind == "basic":
                y = conv_bn(x, f"{p}.conv1", channels, width, 3, stride, relu=True)
                y = conv_bn(y, f"{p}.conv2", width, width, 3, 1, relu=False, gamma=0.3)
            else:
                y = conv_bn(x, f"{p}.conv1", channels, width, 1, 1, relu=True)
                y = conv_bn(y, f"{p}.conv2", width, width, 3, stride, relu=True)
                y = conv_bn(y, f"{p}.conv3", width, out_channels, 1, 1, relu=False, gamma=0.3)
            shortcut = x
            if stride != 1 or channels != out_channels:
                shortcut = conv_bn(x, f"{p}.downsample", channels, out_channels, 1, stride, relu=False)
            x = g.op("Relu", [g.op("Add", [y, shortcut], f"{p}.residual")], f"{p}.relu")
            channels = out_channels

    x = g.op("GlobalAveragePool", [x], "avgpool")
    x = g.op("Flatten", [x], "flatten", axis=1)
    fc_weight = g.normal("fc.weight", (classes, channels), 1.0 / math.sqrt(channels))
    fc_bias = g.const("fc.bias", np.zeros(classes, np.float32))
    g.nodes.append(helper.make_node("Gemm", [x, fc_weight, fc_bias], ["logits"], name="fc", transB=1))
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, image_size, image_size])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])]
    return g.save(path, f"resnet{depth}", inputs, outputs)


__all__ = ["bert_base", "resnet"]
