"""What both TensorRT editions share: parsing, capability analysis and the engine build.

TensorRT-RTX mirrors TensorRT's Python API, so one implementation serves both;
the subclasses only say which module to import and how to aim the build at a GPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.core.errors import EnvironmentProblem, InvalidInput
from compiler.core.profiles import ShapeProfile
from compiler.core.records import Progress


@dataclass(frozen=True)
class ParserError:
    node_index: int
    node_name: str
    op: str
    reason: str


@dataclass(frozen=True)
class ParserCapability:
    """TensorRT's own verdict on a model: supported partitions (node index lists) and parser errors."""

    supported: bool
    subgraphs: list[list[int]]
    errors: list[ParserError]


@dataclass(frozen=True)
class BuildSpec:
    """Everything that determines an engine, besides the backend itself."""

    model_path: Path
    profiles: tuple[ShapeProfile, ...]
    compute_capabilities: tuple[str, ...]
    workspace_mb: int | None = None
    optimization_level: int | None = None
    sku: str = ""
    """Names per-SKU state such as the datacenter timing cache; not part of the engine's identity."""
    state_dir: Path | None = None
    """Where that state lives (the build cache's folder); None: the default cache folder."""

    def options(self) -> dict[str, Any]:
        return {
            "network": "strongly typed",
            "profiling_verbosity": "detailed",
            "workspace_mb": self.workspace_mb,
            "optimization_level": self.optimization_level,
        }


@dataclass
class BuildOutcome:
    plan: bytes | memoryview | None
    seconds: float
    errors: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False
    warnings: list[str] = field(default_factory=list)
    """The builder's warnings: none in a clean build (a profile TensorRT finds inconsistent, say)."""


class TensorRTBackend:
    """One TensorRT edition. Subclasses set the module and how compute capabilities are targeted."""

    name: str = ""
    module_name: str = ""
    install_hint: str = ""
    plan_magic: str = ""
    plan_header_bytes: int = 0
    """The length of the plan header :meth:`plan_header` reads; 0 where its layout is not known."""

    def __init__(self) -> None:
        if importlib.util.find_spec(self.module_name) is None:
            raise EnvironmentProblem(
                f"backend {self.name} is not installed (no module named '{self.module_name}'); run {self.install_hint}"
            )

    # Plain attributes, not functools.cached_property: before Python 3.12 that holds a lock shared by every
    # instance, and a builder forked while another thread held it would wait on it forever.

    @property
    def trt(self) -> Any:
        """The TensorRT module, imported on first use: a build that is a cache hit never loads TensorRT."""
        if "_trt" not in self.__dict__:
            try:
                self.__dict__["_trt"] = importlib.import_module(self.module_name)
            except ImportError as exc:
                raise EnvironmentProblem(
                    f"backend {self.name} is not installed ({exc}); run {self.install_hint}"
                ) from None
        return self.__dict__["_trt"]

    @property
    def version(self) -> str:
        """The installed edition's version, from its package metadata where that names it (no import)."""
        if "_version" not in self.__dict__:
            import importlib.metadata

            try:
                self.__dict__["_version"] = importlib.metadata.version(self.module_name.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:  # installed under another distribution name
                self.__dict__["_version"] = self.trt.__version__
        return self.__dict__["_version"]

    def _network(self, builder: Any) -> Any:
        """A strongly typed network: precision comes from the model (FP16 conversion, Q/DQ). TensorRT-RTX is
        strongly typed anyway; datacenter TensorRT 10 would otherwise choose layer precisions itself."""
        return builder.create_network(1 << int(self.trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))

    def capability(self, model_path: Path) -> ParserCapability:
        """Partition the model the way TensorRT would (the same partitions ONNX Runtime's TensorRT EP takes)."""
        logger = _CapturingLogger(self.trt)
        builder = self.trt.Builder(logger)
        network = self._network(builder)
        parser = self.trt.OnnxParser(network, logger)
        data = model_path.read_bytes()
        if hasattr(parser, "supports_model_v2"):
            supported = parser.supports_model_v2(data, str(model_path))
            subgraphs = [list(parser.get_subgraph_nodes(i)) for i in range(parser.num_subgraphs)]
        else:  # TensorRT < 10.1
            supported, nodelists = parser.supports_model(data, str(model_path))
            subgraphs = [list(nodes) for nodes, _ in nodelists]
        errors = [
            ParserError(err.node(), err.node_name(), err.node_operator(), _describe_parser_error(err))
            for err in (parser.get_error(i) for i in range(parser.num_errors))
        ]
        del parser, network  # the network must outlive its parser
        return ParserCapability(bool(supported), subgraphs, errors)

    def check_targets(self, compute_capabilities: tuple[str, ...]) -> None:
        """Raise before any build when this edition cannot build for these compute capabilities here."""
        raise NotImplementedError

    def target(self, config: Any, spec: BuildSpec) -> None:
        """Aim the build at the spec's compute capabilities (edition-specific)."""
        raise NotImplementedError

    def after_build(self, config: Any, spec: BuildSpec) -> None:
        """Hook for edition-specific state to keep after a build (the datacenter timing cache)."""

    def plan_header(self, plan: bytes | memoryview) -> dict[str, Any] | None:
        """What the plan's header says about itself, where this edition's layout is known."""
        return None

    def plan_mismatch(self, plan: bytes | memoryview, compute_capabilities: tuple[str, ...]) -> str | None:
        """Why the plan's header disagrees with what was asked for, or None when it agrees (or is opaque)."""
        if len(plan) < self.plan_header_bytes:
            return f"plan has {len(plan)} bytes, fewer than its {self.plan_header_bytes}-byte header"
        header = self.plan_header(plan)
        if header is None:
            return None
        if header["magic"] != self.plan_magic:
            return f"plan magic {header['magic']!r} is not {self.plan_magic!r}"
        if header["version"] != self.version:
            return f"plan says version {header['version']} but the backend is {self.version}"
        if sorted(header["compute_capabilities"]) != sorted(compute_capabilities):
            return (
                f"plan targets compute capabilities {header['compute_capabilities']} "
                f"but {list(compute_capabilities)} were requested"
            )
        return None

    def build(
        self,
        spec: BuildSpec,
        progress: Progress | None = None,
        cancel: Any | None = None,
    ) -> BuildOutcome:
        """Build one engine with every profile of the spec; never raises for a failed build."""
        trt = self.trt
        started = time.perf_counter()
        logger = _CapturingLogger(trt, verbose=True)
        builder = trt.Builder(logger)
        network = self._network(builder)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(spec.model_path)):
            errors = [_at_node(parser.get_error(i)) for i in range(parser.num_errors)]
            return BuildOutcome(None, time.perf_counter() - started, errors or logger.errors, logger.lines)
        config = builder.create_builder_config()
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        if spec.workspace_mb is not None:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, spec.workspace_mb << 20)
        if spec.optimization_level is not None:
            config.builder_optimization_level = spec.optimization_level
        inputs = {network.get_input(i).name for i in range(network.num_inputs)}
        for profile in spec.profiles:
            optimization_profile = builder.create_optimization_profile()
            for name, shape in profile.shapes.items():
                if name not in inputs:
                    raise InvalidInput(f"profile '{profile.name}': input '{name}' is not a network input")
                optimization_profile.set_shape(name, shape.min, shape.opt, shape.max)
            config.add_optimization_profile(optimization_profile)
        self.check_targets(spec.compute_capabilities)
        self.target(config, spec)
        monitor = _ProgressMonitor(trt, progress, cancel)
        config.progress_monitor = monitor
        serialized = builder.build_serialized_network(network, config)
        seconds = time.perf_counter() - started
        if serialized is None:
            cancelled = cancel is not None and cancel.is_set()
            errors = (
                ["build cancelled"]
                if cancelled
                else ([_no_kernel(error, network) for error in logger.errors] or ["the builder returned no engine"])
            )
            if not cancelled:
                errors[0] += _control_flow_hint(trt, network)
            return BuildOutcome(None, seconds, errors, logger.lines, cancelled=cancelled)
        self.after_build(config, spec)
        plan = memoryview(serialized).cast("B")  # no copy: plans can be GBs
        return BuildOutcome(
            plan,
            seconds,
            [],
            logger.lines,
            parse_layers(logger.layers_message, len(spec.profiles)),
            warnings=logger.warnings,
        )


def _describe_parser_error(err: Any) -> str:
    desc = str(err.desc()).strip()
    code = str(err.code()).rsplit(".", 1)[-1]
    return f"{code}: {desc}" if desc else code


_NO_RUNNERS = re.compile(r"(?P<layer>\S+) has no runners that implement it")


def _no_kernel(error: str, network: Any) -> str:
    """``nms_201 has no runners that implement it`` names a TensorRT layer: say which ONNX node it is, and that
    this edition has no kernel for it here (the parser accepted it; only a build tells)."""
    found = _NO_RUNNERS.search(error)
    if found is None:
        return error
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.name == found["layer"]:
            node = str(getattr(layer, "metadata", "") or "").removeprefix("[ONNX Layer: ").removesuffix("]")
            kind = str(layer.type).rsplit(".", 1)[-1]
            return (
                f"node '{node or layer.name}' ({kind} layer {layer.name}): this TensorRT edition has no kernel "
                f"for it in this build, although its parser accepts it; run that part outside the engine (cut "
                f"the model before it) or build with another TensorRT edition. TensorRT says: {error}"
            )
    return error


CONTROL_FLOW_LAYERS = ("CONDITION", "CONDITIONAL_INPUT", "CONDITIONAL_OUTPUT", "ITERATOR", "LOOP_OUTPUT", "RECURRENCE",
                       "TRIP_LIMIT")  # fmt: skip
"""The layers an ONNX If, Loop or Scan becomes: what TensorRT-RTX 1.7's builder asserts on (``graphScope.cpp …
Assertion tScope.getType() != ScopeType::kUNDEFINED failed`` on an LSTM inside an If)."""


def _control_flow_hint(trt: Any, network: Any) -> str:
    """For a failed build of a network with control flow: what usually helps (its builder's messages do not say)."""
    kinds = {getattr(trt.LayerType, name, None) for name in CONTROL_FLOW_LAYERS} - {None}
    if not any(network.get_layer(i).type in kinds for i in range(network.num_layers)):
        return ""
    return (
        "; the model has If/Loop/Scan, which this builder may refuse even where its parser accepts them: make "
        "the input the condition reads a constant of the model and fold the branch away (onnx's constant folding, "
        "onnxsim), or export the model without control flow"
    )


def _at_node(err: Any) -> str:
    """A parse error with the node it is about, where the parser names one."""
    name = err.node_name() if err.node() >= 0 else ""
    return (
        f"node '{name}' ({err.node_operator()}): {_describe_parser_error(err)}" if name else _describe_parser_error(err)
    )


class _CapturingLogger:
    """A TensorRT logger that keeps messages instead of printing them."""

    def __new__(cls, trt: Any, verbose: bool = False):
        class Logger(trt.ILogger):
            def __init__(self) -> None:
                super().__init__()
                self.lines: list[str] = []
                self.errors: list[str] = []
                self.warnings: list[str] = []
                self.layers_message = ""

            def log(self, severity: Any, message: str) -> None:
                if message.startswith("Layers:"):
                    self.layers_message = message
                    return
                if severity == trt.Logger.VERBOSE:  # thousands per build: keep this path short
                    return
                if severity in (trt.Logger.ERROR, trt.Logger.INTERNAL_ERROR):
                    self.errors.append(message.strip())
                elif severity == trt.Logger.WARNING:
                    self.warnings.append(message.strip())
                self.lines.append(f"[{str(severity).rsplit('.', 1)[-1]}] {message.strip()}")

        logger = Logger()
        logger.min_severity = trt.Logger.VERBOSE if verbose else trt.Logger.WARNING
        return logger


class _ProgressMonitor:
    """Reports (innermost phase, top-level steps done, top-level steps) and cancels when asked.

    TensorRT nests phases; the top-level phase gives a steady bar, the innermost one
    tells the user what the builder is doing now.
    """

    def __new__(cls, trt: Any, progress: Progress | None, cancel: Any | None):
        class Monitor(trt.IProgressMonitor):
            def __init__(self) -> None:
                super().__init__()
                self.stack: list[str] = []
                self.top_total = 0
                self.top_done = 0

            def _report(self) -> None:
                if progress and self.stack:
                    progress(self.stack[-1], self.top_done, self.top_total)

            def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
                if parent_phase is None:
                    self.top_total, self.top_done = num_steps, 0
                self.stack.append(phase_name)
                self._report()

            def step_complete(self, phase_name: str, step: int) -> bool:
                if len(self.stack) == 1:
                    self.top_done = step + 1
                self._report()
                return not (cancel is not None and cancel.is_set())

            def phase_finish(self, phase_name: str) -> None:
                if phase_name in self.stack:
                    del self.stack[self.stack.index(phase_name) :]

        return Monitor()


_LAYER_LINE = re.compile(r"^Name: (?P<name>.*?), LayerType: (?P<type>[^,]*),")
_DATATYPE = re.compile(r"Datatype: (\w+)")
_ONNX_LAYER = "[ONNX Layer: "


def parse_layers(message: str, profiles: int = 1) -> list[dict[str, Any]]:
    """The final kernels from the builder's DETAILED ``Layers:`` message.

    Each kernel: its name, type, precision (:func:`kernel_precision`), the data types of its inputs
    (activations), constants (weights) and outputs, the ONNX nodes it covers, and the shape profile
    (:func:`kernel_profile`) it belongs to. A line reads ``Name: …, LayerType: …, Inputs: […], Constants: […],
    Outputs: […], TacticName: …, StreamId: …, Metadata: [ONNX Layer: a][ONNX Layer: b]``.
    """
    layers = []
    for line in message.splitlines()[1:]:
        match = _LAYER_LINE.match(line.strip())
        if not match:
            continue
        # "[ONNX Layer: a]" entries, separated by nothing or by a \x1f; a name may itself hold brackets
        metadata = line.rpartition(", Metadata: ")[2]
        nodes = [entry.rstrip("\x1f \t").removesuffix("]") for entry in metadata.split(_ONNX_LAYER)[1:]]
        types = {
            "input_types": _types(line, "Inputs: [", ("], Constants: [", "], Outputs: [")),
            "constant_types": _types(line, "], Constants: [", ("], Outputs: [",)),
            "output_types": _types(line, "], Outputs: [", ("], TacticName: ",)),
        }
        layers.append(
            {
                "name": match["name"],
                "type": match["type"],
                "precision": kernel_precision(**types),
                **types,
                "onnx_nodes": nodes,
            }
        )
    graphs = {m[1] for m in map(_MYELIN_GRAPH.search, (layer["name"] for layer in layers)) if m}
    for layer in layers:
        layer["profile"] = kernel_profile(layer["name"], profiles, len(graphs))
    return layers


_PROFILE_MARK = re.compile(r" \[profile (\d+)\]")
_MYELIN_GRAPH = re.compile(r"_myl(\d+)_\d+$")


def kernel_profile(name: str, profiles: int, graphs: int) -> int | None:
    """The shape profile a kernel belongs to. TensorRT builds every profile's kernels apart: profile N > 0 marks
    some names ``[profile N]``, and a Myelin-compiled engine suffixes each kernel ``_myl<N>_<i>`` with one graph
    N per profile. Where neither says (a graph count that is not the profile count), None."""
    if profiles == 1:
        return 0
    mark = _PROFILE_MARK.search(name)
    if mark:
        return int(mark[1])
    graph = _MYELIN_GRAPH.search(name)
    return int(graph[1]) if graph and graphs == profiles else None


_NARROWEST_FIRST = ("FP4", "Int4", "FP8", "Int8", "Half", "BFloat16", "Float")
"""The data types a kernel computes in, narrowest first; index and boolean types (Int32, Int64, Bool) are not."""


def kernel_precision(input_types: list[str], constant_types: list[str], output_types: list[str]) -> str | None:
    """The precision a kernel computes in: the narrowest type among its activations and weights, so an INT8
    convolution (Int8 activations and weights, Float scales) is Int8 and a quantizing kernel (Float in, Int8 out)
    is Float; a kernel that reads neither takes its outputs' type, and one with no typed tensors (shape
    arithmetic) has none."""
    for types in (input_types + constant_types, output_types):
        if types:
            return next((t for t in _NARROWEST_FIRST if t in types), min(types))
    return None


def _types(line: str, start: str, ends: tuple[str, ...]) -> list[str]:
    """The data types named in one field of a Layers line, from ``start`` to the first of ``ends`` after it."""
    _, found, rest = line.partition(start)
    for end in ends:
        if end in rest:
            rest = rest.partition(end)[0]
            break
    return sorted(set(_DATATYPE.findall(rest))) if found else []
