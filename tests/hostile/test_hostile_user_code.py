"""Code that is not ours, run by calibrate: a ``--metric`` module and a ``$COMPILE_MODELOPT_PYTHON`` interpreter
(issue 39, classes 9 and 10). Whatever they do (exit, print without end, return what is no number, raise anything,
hang, write garbage), the contract holds: one error line with the documented exit code (2 for a metric, 3 for an
interpreter that is not a working ModelOpt, 1 for a quantizer that fails), stdout one JSON document or nothing,
no traceback, and time and memory within the harness's bounds."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from compiler.core import deadlines
from compiler.core.modelopt import ENV
from tests.hostile.harness import Case, Expect, Sandbox, run_cases
from tests.support.digits import calibrate_args

DEADLINE = "3"
"""Seconds for $COMPILE_METRIC_DEADLINE and $COMPILE_MODELOPT_DEADLINE here: a hang is cut well inside the
harness's 30 s."""

SCORE = "float((outputs[next(iter(outputs))].argmax(1) == reference[next(iter(reference))].argmax(1)).mean())"
METRIC_BODIES = {
    # kind: (module text, with {n} for the generated number; what the function returns or does)
    "valid": ("", f"return {SCORE}"),
    "exit at import": ("import sys\nsys.exit({n})\n", f"return {SCORE}"),
    "exit in call": ("import sys\n", "sys.exit({n})"),
    "os._exit at import": ("import os\nos._exit({n})\n", f"return {SCORE}"),
    "os._exit in call": ("import os\n", "os._exit({n})"),
    "prints at import": ("print('x' * {n})\nimport sys\nprint('e' * {n}, file=sys.stderr)\n", f"return {SCORE}"),
    "prints in call": ("import os\n", f"os.write(1, b'{{{{\\n' * {{n}}); print('not json'); return {SCORE}"),
    "huge int": ("", "return 10 ** (400 + {n})"),
    "nan": ("", "return float('nan')"),
    "inf": ("", "return -float('inf') if {n} % 2 else float('inf')"),
    "str": ("", "return '0.{n}'"),
    "none": ("", "return None"),
    "bool": ("", "return True"),
    "array": ("import numpy as np\n", "return np.ones({n} % 5 + 2)"),
    "raises": ("", "raise ValueError('boom ' * {n})"),
    "keyboard interrupt": ("", "raise KeyboardInterrupt"),
    "interrupt at import": ("raise KeyboardInterrupt\n", f"return {SCORE}"),
    "base exception": (
        "class Odd(BaseException):\n    def __str__(self):\n        raise RuntimeError\n",
        "raise Odd()",
    ),
    "escapes": ("", "raise ValueError('\\x1b[2J\\nerror: forged {n}')"),
    "slow at import": ("import time\ntime.sleep(60 + {n})\n", f"return {SCORE}"),
    "slow in call": ("import time\n", "time.sleep(60 + {n})"),
    "thread left running": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n",
        f"return {SCORE}",
    ),
}
METRIC_OK = {"valid", "prints at import", "prints in call", "thread left running"}
"""What the module prints is kept from our streams; a thread it leaves is not waited for."""


@dataclass(frozen=True)
class MetricRecipe:
    kind: str
    number: int
    dotted: bool
    """Imported as a dotted module from the working directory, else by its file path."""


def test_hostile_metric_modules(request, hostile_base):
    def setup(recipe: MetricRecipe, box: Sandbox) -> Case:
        head, body = METRIC_BODIES[recipe.kind]
        text = head.format(n=recipe.number) + "\n\ndef score(outputs, reference, labels):\n    "
        text += body.format(n=recipe.number) + "\n"
        if recipe.dotted:
            (box.cwd / "hostile_metric.py").write_text(text)
            box.writable.append(box.cwd / "hostile_metric.py")
            spec = "hostile_metric:score"
        else:
            (box.inputs / "metric.py").write_text(text)
            spec = f"{box.inputs / 'metric.py'}:score"
        codes = frozenset({0} if recipe.kind in METRIC_OK else {2})
        args = calibrate_args(box.out, "--metric", spec, "--json")
        return Case(args, Expect(codes, recipe.kind, ("--metric",)), json_output=True, env={deadlines.METRIC: DEADLINE})

    must = [MetricRecipe(kind, 3, i % 2 == 0) for i, kind in enumerate(METRIC_BODIES)]
    generated = st.builds(MetricRecipe, st.sampled_from(sorted(METRIC_BODIES)), st.integers(0, 1 << 16), st.booleans())
    run_cases(request.node.name, "metric-modules", generated, setup, hostile_base, must)


VERSIONS = (
    '{"modelopt": "0.47.0", "modelopt_onnxruntime": "1.24.4", "modelopt_onnx": "1.21.0", "modelopt_torch": "2.13.0"}'
)
ACTIONS = {
    # kind: (shell that misbehaves, the exit codes it may give)
    "huge output": ("head -c 400000000 /dev/zero | tr '\\0' x; echo; exit {n}", {3}),
    "huge stderr": ("head -c 400000000 /dev/zero | tr '\\0' y >&2; exit 1", {3}),
    "hangs": ("exec sleep 600", {3}),
    "hangs holding the pipe": ("sleep 600 & sleep 600", {3}),
    "non-zero exit": ("echo 'Traceback (most recent call last):' >&2; echo 'boom {n}' >&2; exit {n}", {3}),
    "garbage": ("head -c {n} /dev/urandom; exit 0", {3}),
    "other json": ("echo '{{\"modelopt\": 1}}'; echo '[[[[[[[[[[[['", {3}),
    "partial json": ('echo \'{{"modelopt": "1"}}\'', {3}),
    "killed": ("kill -KILL $$", {3}),
}
QUANTIZER = {
    # what the quantizer run does once the version probe answered well
    "huge output": ("head -c 400000000 /dev/zero | tr '\\0' x; exit 1", {1}),
    "hangs": ("exec sleep 600", {3}),
    "non-zero exit": ("echo 'RuntimeError: quantization failed {n}' >&2; exit 2", {1}),
    "import error": ("echo \"ModuleNotFoundError: No module named 'cupy'\" >&2; exit 1", {3}),
    "garbage model": ('head -c {n} /dev/urandom > "$out"; exit 0', {1}),
    "no model": ("exit 0", {1}),
}


@dataclass(frozen=True)
class InterpreterRecipe:
    stage: str
    """``probe``: the version check misbehaves; ``quantizer``: it answers well and the quantizer misbehaves."""
    kind: str
    number: int


def _interpreter(recipe: InterpreterRecipe) -> tuple[str, set[int]]:
    n = recipe.number % 250 + 1
    if recipe.stage == "probe":
        action, codes = ACTIONS[recipe.kind]
        return f"#!/bin/sh\n{action.format(n=n)}\n", codes
    action, codes = QUANTIZER[recipe.kind]
    return (
        "#!/bin/sh\n"
        f"if [ \"$1\" = -c ]; then echo '{VERSIONS}'; exit 0; fi\n"
        'while [ $# -gt 0 ]; do [ "$1" = --output_path ] && out=$2; shift; done\n'
        f"{action.format(n=n)}\n",
        codes,
    )


def test_hostile_modelopt_interpreters(request, hostile_base):
    def setup(recipe: InterpreterRecipe, box: Sandbox) -> Case:
        text, codes = _interpreter(recipe)
        python = box.inputs / "python"
        python.write_text(text)
        python.chmod(0o755)
        args = calibrate_args(box.out, "--quantizer", "modelopt")
        return Case(
            [*args, "--json"],
            Expect(frozenset(codes), f"{recipe.stage}: {recipe.kind}"),
            json_output=True,
            reports_failures=False,  # a quantizer that fails leaves no report to print
            env={ENV: str(python), deadlines.MODELOPT: DEADLINE},
        )

    must = [InterpreterRecipe("probe", kind, 7) for kind in ACTIONS]
    must += [InterpreterRecipe("quantizer", kind, 7) for kind in QUANTIZER]
    generated = st.one_of(
        st.builds(InterpreterRecipe, st.just("probe"), st.sampled_from(sorted(ACTIONS)), st.integers(0, 1 << 16)),
        st.builds(InterpreterRecipe, st.just("quantizer"), st.sampled_from(sorted(QUANTIZER)), st.integers(0, 1 << 16)),
    )
    run_cases(request.node.name, "modelopt-interpreters", generated, setup, hostile_base, must)
