"""Fusion rules over an engine's final kernels (layers.json): did the fusions we expect happen?

TensorRT-RTX names, for each kernel, the ONNX nodes it covers. A chain such as Conv -> BatchNormalization ->
Relu can span kernels (``correlation [Conv]`` then ``kgen [BatchNormalization, Conv, Relu]``): the kernel that
names the Conv again is that convolution's epilogue, so the chain is fused. When the Conv's output must be
materialized (it is also a graph output), BatchNormalization and Relu land in a kernel that does not name the
Conv: not fused (DESIGN.md).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Literal

import onnx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from compiler.backends.build_proof import unquantized
from compiler.core.errors import InvalidInput
from compiler.core.records import CheckResult, Kernel, Precision, Status
from compiler.core.yaml import load_yaml

QDQ = ("QuantizeLinear", "DequantizeLinear")
_ONNX_TYPES = {"Float": onnx.TensorProto.FLOAT, "Half": onnx.TensorProto.FLOAT16, "BFloat16": onnx.TensorProto.BFLOAT16}
MAX_EVIDENCE = 20
"""Findings listed per check (the count says how many there were in all)."""


class Rule(BaseModel):
    """One fusion rule (docs/check.md, "Rules file")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    kind: Literal["chain", "together", "no-standalone", "precision", "quantized"]
    ops: list[str] = Field(min_length=1)
    """chain: the ops in order (``Op?`` optional), every kernel computing a later one naming the first;
    together: the ops in order, some one kernel computing them all; no-standalone: the ops no kernel may consist
    of alone; precision: the ops whose kernels may not compute in ``forbid``; quantized: the ops that, given Q/DQ
    inputs, some kernel must compute in a quantized precision (Int8, FP8, …)."""
    around: list[str] = []
    """no-standalone: only nodes that feed one of these count (empty: all)."""
    forbid: list[str] = []
    """precision: kernel precisions (TensorRT's names: Float, Half, Int8...) not allowed."""
    precisions: list[Precision] = list(Precision)
    allow: list[str] = []
    """Node names (shell-style patterns) the rule does not apply to."""
    gate: bool | list[Precision] = True
    """False: what the rule finds is reported (evidence, figures) but does not fail the check: for fusions
    TensorRT makes or not by shapes and head sizes, which no model change can promise. A list: a gate in those
    precisions only, an observation in the others (a missed fusion in an engine built exactly from the model: no
    calibration or conversion of ours can have caused it)."""

    def gates(self, precision: Precision) -> bool:
        return self.gate if isinstance(self.gate, bool) else precision in self.gate

    def occurs(self, graph: Graph) -> bool:
        """Whether the model has anything this rule is about: a rule with nothing to judge says so, not "holds"."""
        if self.kind in ("chain", "together"):
            return any(True for _ in graph.chains(self.ops))
        return any(node.op_type in self.ops and not self.allows(node.name) for node in graph.nodes)

    description: str = ""

    @model_validator(mode="after")
    def _complete(self) -> Rule:
        if self.kind in ("chain", "together") and len([op for op in self.ops if not op.endswith("?")]) < 2:
            raise ValueError(f"rule '{self.name}': a chain needs at least two ops that are not optional")
        if self.kind == "precision" and not self.forbid:
            raise ValueError(f"rule '{self.name}': a precision rule needs forbid: [Float, ...]")
        return self

    def allows(self, node: str) -> bool:
        return any(fnmatchcase(node, pattern) for pattern in self.allow)


class RuleSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    replace: bool = False
    """True: these rules instead of the bundled ones; False: added to them (a rule of the same name replaces)."""
    rules: list[Rule]

    @model_validator(mode="after")
    def _unique(self) -> RuleSet:
        names = [r.name for r in self.rules]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(repeated)}")
        return self


def bundled_rules() -> list[Rule]:
    with resources.as_file(resources.files("compiler.check") / "rules.yaml") as path:
        return load_yaml(path, RuleSet).rules


def load_rules(path: Path | None) -> list[Rule]:
    """The bundled rules, extended or replaced by the rules file at ``path``; InvalidInput naming the file."""
    rules = {rule.name: rule for rule in bundled_rules()}
    if path is None:
        return list(rules.values())
    extra = load_yaml(path, RuleSet)
    if extra.replace:
        rules = {}
    rules.update({rule.name: rule for rule in extra.rules})
    if not rules:
        raise InvalidInput(
            f"{path}: replaces the bundled rules with none; list at least one rule or drop replace: true"
        )
    return list(rules.values())


class Graph:
    """What the rules need of the model an engine was built from: each node's op type and who consumes what."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        graph = proto.graph
        nodes = graph.node
        self.op = {n.name: n.op_type for n in nodes if n.name}
        self.nodes = [n for n in nodes if n.name]
        self.by_name = {n.name: n for n in self.nodes}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.producer = {out: n.op_type for n in nodes for out in n.output}
        self.types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)}
        self.types.update({t.name: t.data_type for t in graph.initializer})

    def dequantized(self, node: onnx.NodeProto) -> bool:
        """Whether an input of ``node`` comes out of a DequantizeLinear: calibration quantized it."""
        return any(self.producer.get(name) == "DequantizeLinear" for name in node.input)

    def computes_in(self, name: str, precisions: list[str]) -> bool:
        """Whether the model itself gives node ``name`` float inputs of one of ``precisions`` (TensorRT's names),
        not through Q/DQ: kept so on purpose (``--exclude``), which a strongly typed build honours."""
        node = self.by_name.get(name)
        if node is None or self.dequantized(node):
            return False
        wanted = {_ONNX_TYPES[p] for p in precisions if p in _ONNX_TYPES}
        return any(self.types.get(i) in wanted for i in node.input if i)

    def next_through_qdq(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The nodes that consume ``node``'s first output, looking through Quantize/DequantizeLinear pairs."""
        found, pending = [], [c for c in self.consumers.get(node.output[0], [])] if node.output else []
        while pending:
            consumer = pending.pop()
            if consumer.op_type in QDQ and consumer.output:
                pending.extend(self.consumers.get(consumer.output[0], []))
            else:
                found.append(consumer)
        return found

    def chains(self, ops: list[str]) -> list[list[str]]:
        """Every run of nodes matching ``ops`` in order (``Op?`` may be absent), each feeding the next."""
        runs = []
        for node in self.nodes:
            runs.extend(self._extend([node.name], node, ops))
        return runs

    def _extend(self, run: list[str], node: onnx.NodeProto, ops: list[str]) -> list[list[str]]:
        want = ops[0].rstrip("?")
        if node.op_type != want:
            return self._extend(run, node, ops[1:]) if ops[0].endswith("?") and len(ops) > 1 else []
        rest = ops[1:]
        if not rest or all(op.endswith("?") for op in rest):
            return [run]
        results = []
        for consumer in self.next_through_qdq(node):
            results.extend(self._extend([*run, consumer.name], consumer, rest))
        if not results and rest and all(op.endswith("?") for op in rest):
            return [run]
        return results


def check_fusions(
    rules: list[Rule], precision: Precision, kernels: list[Kernel], graph: Graph, graph_note: str
) -> CheckResult:
    """Every rule that applies to ``precision``, over every kernel of every profile."""
    relevant = [rule for rule in rules if precision in rule.precisions]
    applied = [rule for rule in relevant if rule.occurs(graph)]
    not_applicable = [rule.name for rule in relevant if rule not in applied]
    violations: list[str] = []
    advisory: list[str] = []
    per_rule: dict[str, int] = {}
    for rule in applied:
        found = {
            "chain": _chain,
            "together": _together,
            "no-standalone": _standalone,
            "precision": _precision,
            "quantized": _quantized,
        }[rule.kind](rule, kernels, graph)
        per_rule[rule.name] = len(found)
        (violations if rule.gates(precision) else advisory).extend(f"{rule.name}: {line}" for line in found)
    figures = {
        "rules": [r.name for r in applied],
        "violations": per_rule,
        "kernels": len(kernels),
        "graph": graph_note,
        "advisory": [r.name for r in applied if not r.gates(precision)],
        "not_applicable": not_applicable,
    }
    if violations:
        return CheckResult(
            name="fusions",
            status=Status.FAILED,
            evidence=violations[:MAX_EVIDENCE],
            figures=figures,
            summary=f"{len(violations)} violation(s) of {', '.join(n for n, c in per_rule.items() if c)}"
            f"; first: {violations[0]}",
        )
    if not applied:
        why = f"not applicable: {', '.join(not_applicable)}" if not_applicable else f"no rule for {precision} builds"
        return CheckResult(name="fusions", status=Status.SKIPPED, figures=figures, summary=f"no rule applies ({why})")
    held = [r.name for r in applied if not per_rule[r.name]]
    noted = (
        "; observed, not gated: " + ", ".join(f"{name} ({count}x)" for name, count in per_rule.items() if count)
        if advisory
        else ""
    )
    noted += f"; not applicable (nothing of theirs in the model): {', '.join(not_applicable)}" if not_applicable else ""
    return CheckResult(
        name="fusions",
        status=Status.OK,
        figures=figures,
        evidence=advisory[:MAX_EVIDENCE],
        summary=f"{len(held)} rule(s) hold over {len(kernels)} kernels ({', '.join(held)}){noted}",
    )


def _chain(rule: Rule, kernels: list[Kernel], graph: Graph) -> list[str]:
    found = []
    for chain in graph.chains(rule.ops):
        head, tail = chain[0], chain[1:]
        if rule.allows(head) or any(rule.allows(n) for n in tail):
            continue
        for kernel in kernels:
            unfused = [n for n in tail if n in kernel.onnx_nodes]
            if unfused and head not in kernel.onnx_nodes:
                found.append(
                    f"{' -> '.join(chain)} not fused: kernel {kernel.name} computes {', '.join(unfused)} "
                    f"without {head}{_profile(kernel)}"
                )
                break
    return found


def _together(rule: Rule, kernels: list[Kernel], graph: Graph) -> list[str]:
    found = []
    for chain in graph.chains(rule.ops):
        if any(rule.allows(n) for n in chain):
            continue
        if not any(set(chain) <= set(kernel.onnx_nodes) for kernel in kernels):
            split = [
                f"{kernel.name} ({', '.join(n for n in chain if n in kernel.onnx_nodes)})"
                for kernel in kernels
                if any(n in kernel.onnx_nodes for n in chain)
            ]
            found.append(
                f"{' -> '.join(chain)}: no one kernel computes it all; {'; '.join(split[:4]) or 'no kernel names it'}"
            )
    return found


def _quantized(rule: Rule, kernels: list[Kernel], graph: Graph) -> list[str]:
    return [
        f"{name} ({graph.op[name]}) has Q/DQ inputs but no kernel computes it quantized (its kernels compute in "
        f"{', '.join(precisions)}); keep it out of int8/fp8 with calibrate --exclude {name} (calibration.exclude "
        f"in a pipeline)"
        for name, precisions in unquantized(kernels, graph.nodes, tuple(rule.ops)).items()
        if not rule.allows(name)
    ]


def _standalone(rule: Rule, kernels: list[Kernel], graph: Graph) -> list[str]:
    found = []
    for kernel in kernels:
        nodes = [n for n in kernel.onnx_nodes if not rule.allows(n)]
        if not nodes or not all(graph.op.get(n) in rule.ops for n in nodes):
            continue
        feeding = [n for n in nodes if not rule.around or _feeds(graph, n, rule.around)]
        if feeding:
            found.append(
                f"kernel {kernel.name} computes only {', '.join(feeding)} ({kernel.precision}){_profile(kernel)}"
            )
    return found


def _feeds(graph: Graph, name: str, ops: list[str]) -> bool:
    node = graph.by_name.get(name)
    return node is not None and any(c.op_type in ops for c in graph.next_through_qdq(node))


def _precision(rule: Rule, kernels: list[Kernel], graph: Graph) -> list[str]:
    found = []
    for kernel in kernels:
        # a kernel that only converts (Float in, Half out: the cast before the first Conv) computes nothing in Float
        computes = kernel.precision in rule.forbid and all(t in rule.forbid for t in kernel.output_types)
        if not computes:
            continue
        nodes = [
            n
            for n in kernel.onnx_nodes
            if graph.op.get(n) in rule.ops and not rule.allows(n) and not graph.computes_in(n, rule.forbid)
        ]
        if nodes:
            found.append(f"kernel {kernel.name} runs {', '.join(nodes)} in {kernel.precision}{_profile(kernel)}")
    return found


def _profile(kernel: Kernel) -> str:
    return f" (profile {kernel.profile})" if kernel.profile else ""
