"""The transformer fusion rules (issue 33) on small graphs and kernel lists: what each rule counts as fused,
quantized or kept on purpose. The same rules judge real TensorRT-RTX engines in
tests/pipeline/test_encoder_release.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from compiler.check.fusions import Graph, bundled_rules, check_fusions
from compiler.core.records import Kernel, Precision


def _kernel(name: str, precision: str, nodes: list[str]) -> Kernel:
    return Kernel(
        name=name,
        type="kgen",
        precision=precision,
        input_types=[precision],
        constant_types=[],
        output_types=[precision],
        onnx_nodes=nodes,
    )


def _rules(*names: str):
    return [rule for rule in bundled_rules() if rule.name in names]


def _attention(softmax_input=TensorProto.FLOAT16, dequantized: bool = False) -> Graph:
    """q, k -> scores -> scale -> mask -> softmax -> context (with v); optionally Q/DQ before the scores."""
    nodes = []
    q = "q"
    if dequantized:
        nodes += [
            helper.make_node("QuantizeLinear", ["q", "s"], ["q_q"], name="q_Q"),
            helper.make_node("DequantizeLinear", ["q_q", "s"], ["q_dq"], name="q_DQ"),
        ]
        q = "q_dq"
    nodes += [
        helper.make_node("MatMul", [q, "k"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        helper.make_node("Add", ["scaled", "bias"], ["masked"], name="mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax"),
        helper.make_node("MatMul", ["probs", "v"], ["context"], name="context"),
    ]
    value = [helper.make_tensor_value_info("masked", softmax_input, None)]
    graph = helper.make_graph(
        nodes, "attention", [], [], [numpy_helper.from_array(np.float32(1), "s")], value_info=value
    )
    return Graph(helper.make_model(graph))


CHAIN = ["scores", "scale", "mask", "softmax", "context"]


def test_attention_in_one_kernel_is_fused_and_split_attention_is_reported():
    rules = _rules("attention-fused")
    fused = check_fusions(rules, Precision.FP16, [_kernel("mha", "Half", CHAIN)], _attention(), "g")
    assert fused.status == "ok"
    split = check_fusions(
        rules,
        Precision.FP16,
        [
            _kernel("bmm1", "Half", ["scores"]),
            _kernel("softmax", "Half", CHAIN[1:4]),
            _kernel("bmm2", "Half", ["context"]),
        ],
        _attention(),
        "g",
    )
    assert split.status == "ok"  # advisory: TensorRT fuses attention by shapes and head size
    assert "observed, not gated: attention-fused (1x)" in split.summary
    assert "scores -> scale -> mask -> softmax -> context: no one kernel computes it all" in split.evidence[0]
    assert "bmm1 (scores)" in split.evidence[0]
    assert (
        check_fusions(rules, Precision.FP8, [_kernel("bmm1", "FP8", ["scores"])], _attention(), "g").status == "skipped"
    )  # not judged in fp8 builds


def test_a_float_softmax_in_fp16_fails_unless_the_model_keeps_it_in_fp32():
    rules = _rules("no-float-softmax-in-fp16")
    kernels = [_kernel("softmax", "Float", ["softmax"])]
    failed = check_fusions(rules, Precision.FP16, kernels, _attention(TensorProto.FLOAT16), "g")
    assert failed.status == "failed" and "softmax in Float" in failed.evidence[0]
    kept = check_fusions(rules, Precision.FP16, kernels, _attention(TensorProto.FLOAT), "g")
    assert kept.status == "ok"  # the FP16 model reads it in FP32: kept on purpose (calibrate --exclude)


def test_a_matmul_with_q_dq_inputs_must_run_quantized():
    rules = _rules("quantized-matmul")
    graph = _attention(dequantized=True)
    float_only = check_fusions(rules, Precision.INT8, [_kernel("gemm", "Float", ["scores", "q_DQ"])], graph, "g")
    assert float_only.status == "failed"
    assert (
        "scores (MatMul) has Q/DQ inputs but no kernel computes it quantized (its kernels compute in Float)"
        in float_only.evidence[0]
    )
    int8 = [_kernel("gemm", "Int8", ["scores", "q_DQ"]), _kernel("epilogue", "Float", ["scores", "scale"])]
    assert check_fusions(rules, Precision.INT8, int8, graph, "g").status == "ok"
    # 'context' has no Q/DQ input (kept out of int8 with --exclude): a Float kernel for it is no violation
    assert (
        check_fusions(rules, Precision.INT8, [*int8, _kernel("bmm2", "Float", ["context"])], graph, "g").status == "ok"
    )


def _conv_relu() -> Graph:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return Graph(helper.make_model(helper.make_graph(nodes, "cnn", [], [])))


def test_a_rule_with_nothing_to_judge_is_not_applicable_never_holding():
    """Issue 41: attention-fused and layernorm-fused on a CNN say "not applicable"; the chain rule holds."""
    rules = _rules("attention-fused", "layernorm-fused", "conv-bn-relu-fused")
    result = check_fusions(rules, Precision.FP16, [_kernel("conv_relu", "Half", ["conv", "relu"])], _conv_relu(), "g")
    assert result.status == "ok"
    assert result.figures["rules"] == ["conv-bn-relu-fused"]
    assert result.figures["not_applicable"] == ["attention-fused", "layernorm-fused"]
    assert result.summary.startswith("1 rule(s) hold over 1 kernels (conv-bn-relu-fused)")
    assert "not applicable (nothing of theirs in the model): attention-fused, layernorm-fused" in result.summary
    none = check_fusions(_rules("attention-fused"), Precision.FP16, [], _conv_relu(), "g")
    assert none.status == "skipped" and "not applicable: attention-fused" in none.summary


def test_a_missed_conv_fusion_is_a_gate_in_int8_and_an_observation_in_fp32():
    rules = _rules("conv-bn-relu-fused")
    split = [_kernel("conv", "Float", ["conv"]), _kernel("relu", "Float", ["relu"])]
    assert check_fusions(rules, Precision.FP32, split, _conv_relu(), "g").status == "ok"
    int8 = [_kernel("conv", "Int8", ["conv"]), _kernel("relu", "Int8", ["relu"])]
    assert check_fusions(rules, Precision.INT8, int8, _conv_relu(), "g").status == "failed"
