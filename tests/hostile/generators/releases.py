"""Generators of hostile release-side inputs (issue 29): values inside a store's manifests and channels (re-signed,
so only the value's own check can refuse them), pipeline YAML files, and what stands in a Triton model repository.

Each recipe says how the documented rules classify it (a verdict, as the other families do), so the tests can
hold the tool to exit codes computed independently of its code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml
from hypothesis import strategies as st

from tests.hostile.generators.common import HOSTILE_TEXT, INVALID, VALID
from tests.support.cli import REPO

VERSION_RULE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?")
"""docs/store.md: versions are 1-64 of A-Z a-z 0-9 . _ -, starting and ending with a letter or digit, no '..'."""
BACKENDS = ("tensorrt-rtx", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8", "fp8")
MAX_YAML_NODES = 1_000_000
"""docs/pipeline.md: aliases may not expand a file past a million values."""

# --- values a manifest may hold (re-signed) ------------------------------------------------------------------

HUGE_INT = 10**4000
MANIFEST_VALUES: dict[str, tuple[str, object]] = {
    "size-huge": ("engines.0.plan.size_bytes", HUGE_INT),
    "size-2**63": ("engines.0.plan.size_bytes", 2**63),
    "size-negative": ("engines.0.plan.size_bytes", -1),
    "size-float": ("engines.0.plan.size_bytes", 1.5),
    "size-text": ("engines.0.plan.size_bytes", "614292"),
    "size-zero": ("engines.0.plan.size_bytes", 0),
    "sha-traversal": ("engines.0.plan.sha256", "../../../outside/x"),
    "sha-upper": ("engines.0.plan.sha256", "A" * 64),
    "sha-short": ("engines.0.plan.sha256", "0" * 63),
    "sha-other-blob": ("engines.0.plan.sha256", "@other"),
    "sku-path": ("engines.0.sku", "../../../outside/evil"),
    "sku-absolute": ("engines.0.sku", "/tmp/evil"),
    "sku-quote": ("engines.0.sku", 'a" } default_model_filename: "x'),
    "sku-escape": ("engines.0.sku", "rtx\x1b[2J"),
    "cc-text": ("engines.0.compute_capabilities", ["8.9x"]),
    "cc-path": ("engines.0.compute_capabilities", ["../8.9"]),
    "cc-empty": ("engines.0.compute_capabilities", []),
    "cc-number": ("engines.0.compute_capabilities", [8.9]),
    "precision-unknown": ("engines.0.precision", "fp4"),
    "engines-empty": ("engines", []),
    "engines-many": ("engines", "@many"),
    "name-other": ("name", "other"),
    "version-other": ("version", "9.9.9"),
    "inputs-nested": ("inputs", "@nested"),
    "input-dim-huge": ("inputs.0.shape.1", 10**100),
    "input-dim-bool": ("inputs.0.shape.1", True),
    "backend-not-text": ("engines.0.backend", {"name": ["tensorrt-rtx"]}),
}
"""Manifest content edits (a dotted path into ``content``, the value; ``@...`` values are made by the test: another
blob's digest, 20,000 engines, inputs nested 10,000 deep). The manifest is re-signed (content_sha256 recomputed),
so its own digest check passes and only the value's check can refuse it."""

# --- pipeline YAML -------------------------------------------------------------------------------------------

VERSION_TEXTS = (
    '"1.10"',
    "1.10",
    "010",
    "0x1F",
    "12:30",
    "true",
    "yes",
    "null",
    "~",
    "1e3",
    ".inf",
    "[1]",
    "{a: 1}",
    "1.0.0",
    "v2",
    '"a..b"',
    '"-x"',
    '"' + "9" * 65 + '"',
    "'x y'",
    '"\\x1b[2J"',
    "2024-01-01",
    "!!binary aGVsbG8=",
    "&v 1.0.0",
    "!!str 1.10",
    "0o17",
    "+1",
    "1_000",
)


def yaml_scalar_texts() -> st.SearchStrategy[str]:
    """How a version may be written: the tricky YAML scalars, or arbitrary short text quoted or not."""
    made = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=0, max_size=20).map(
        lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
    )
    return st.one_of(st.sampled_from(VERSION_TEXTS), made, st.sampled_from([repr(t) for t in HOSTILE_TEXT[:12]]))


def _version_verdict(text: str) -> str:
    """A version is valid iff YAML reads it as text that the version rule takes (anything else lost the text)."""
    try:
        value = yaml.safe_load(f"v: {text}\n")["v"]
    except (yaml.YAMLError, TypeError):
        return INVALID
    ok = isinstance(value, str) and VERSION_RULE.fullmatch(value) and ".." not in value
    return VALID if ok else INVALID


def bomb_expansion(breadth: int, depth: int) -> int:
    """Values ``depth`` levels of ``breadth`` aliases each expand to (each level a list of the one below)."""
    total = breadth + 1  # the first list and its scalars
    for _ in range(depth):
        total = 1 + breadth * total
    return total


@dataclass(frozen=True)
class PipelineRecipe:
    version: str
    precisions: tuple[str, ...]
    backend: str | None
    bomb: tuple[int, int] | None
    """(breadth, depth) of an alias bomb used as the version, or None."""
    sku: str = "rtx-4090"

    def text(self) -> str:
        lines = []
        version = self.version
        if self.bomb:
            breadth, depth = self.bomb
            lines.append(f"b0: &b0 [{', '.join(['x'] * breadth)}]")
            lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * breadth)}]" for i in range(1, depth + 1)]
            version = f"*b{depth}"
        target = f"[{', '.join(self.precisions)}]"
        if self.backend is not None:
            target = f"{{precisions: {target}, backend: {self.backend}}}"
        lines += [
            f"release: {{name: digits, version: {version}}}",
            f"model: {REPO}/compiler/examples/digits_cnn.onnx",
            f"profiles: {REPO}/profiles/digits.yaml",
            f"targets: {{{self.sku}: {target}}}",
        ]
        return "\n".join(lines) + "\n"

    def verdict(self) -> str:
        if self.bomb:
            return INVALID  # a list is no version, however it expands
        ok = (
            _version_verdict(self.version) == VALID
            and len(set(self.precisions)) == len(self.precisions) > 0
            and all(p in PRECISIONS for p in self.precisions)
            and (self.backend is None or self.backend in BACKENDS)
        )
        return VALID if ok else INVALID


def pipeline_recipes() -> st.SearchStrategy[PipelineRecipe]:
    precision = st.one_of(st.sampled_from(PRECISIONS), st.sampled_from(("FP16", "fp4", "int4", '"fp16 "')))
    backend = st.one_of(
        st.none(), st.sampled_from(BACKENDS), st.sampled_from(("bogus", "TensorRT", '"tensorrt "', "onnxruntime", '""'))
    )
    bomb = st.one_of(st.none(), st.tuples(st.integers(2, 12), st.integers(1, 9)))
    return st.builds(
        PipelineRecipe, yaml_scalar_texts(), st.lists(precision, min_size=1, max_size=4).map(tuple), backend, bomb
    )
