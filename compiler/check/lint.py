"""Lint: the ONNX checker (full check, with shape inference) and Polygraphy's lint (the model run node by node in
onnxruntime), each problem with its node name.

Polygraphy's lint runs in a child process started first (:func:`start_lint`), so it works beside the other checks on
a second core, and its log stays off our stdout.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import onnx

from compiler.core.child import Child
from compiler.core.records import CheckResult, Status
from compiler.data.model import OnnxModel, first_line

LINT_TIMEOUT_SECONDS = 600
_CHECKER_NODE = re.compile(r"[Nn]ode \(([^)]*)\)|In Node, \(\"?([^\",)]*)")


@dataclass
class Lint:
    process: Child | None
    report: Path
    checker: list[str]


def start_lint(model: OnnxModel, shapes: dict[str, list[int]], work: Path) -> Lint:
    """Run the ONNX checker here and start Polygraphy's lint in a child (at ``shapes``, the first profile's min)."""
    checker = []
    try:
        onnx.checker.check_model(str(model.path), full_check=True)
    except Exception as exc:  # the checker's ValidationError, or shape inference's InferenceError
        message = first_line(exc)
        match = _CHECKER_NODE.search(str(exc))
        node = next((g for g in match.groups() if g), None) if match else None
        checker.append(f"onnx checker: {'node ' + node + ': ' if node else ''}{message}")
    report = work / "lint.json"
    args = [
        sys.executable,
        "-c",
        "from polygraphy.tools import main; main()",
        "check",
        "lint",
        str(model.path.resolve()),
        "-o",
        str(report),
    ]
    if shapes:
        args += ["--input-shapes", *(f"{name}:{list(dims)}".replace(" ", "") for name, dims in shapes.items())]
    try:
        process = Child(args, LINT_TIMEOUT_SECONDS, cwd=work, keep=0)  # its log is not ours to show
    except OSError:
        process = None
    return Lint(process, report, checker)


def finish_lint(lint: Lint) -> CheckResult:
    """The checker's problems and Polygraphy's: failed when either found an error, warnings as evidence."""
    problems, warnings = list(lint.checker), []
    note = ""
    if lint.process is None:
        note = "; Polygraphy's lint could not be started"
    else:
        if lint.process.finish().timed_out:
            note = f"; Polygraphy's lint did not finish in {LINT_TIMEOUT_SECONDS} s"
        try:
            entries = json.loads(lint.report.read_text()).get("lint_entries", [])
        except (OSError, ValueError, AttributeError):
            entries = []
            note = note or "; Polygraphy's lint wrote no report"
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            nodes = ", ".join(map(str, entry.get("nodes") or [])) or "the graph"
            line = f"polygraphy lint ({entry.get('source', '?')}): {nodes}: {first_line(entry.get('message', ''))}"
            (problems if entry.get("level") in ("exception", "error") else warnings).append(line)
    figures = {"errors": len(problems), "warnings": len(warnings)}
    if problems:
        return CheckResult(
            name="lint",
            status=Status.FAILED,
            evidence=problems + warnings,
            figures=figures,
            summary=f"{len(problems)} problem(s); first: {problems[0]}{note}",
        )
    return CheckResult(
        name="lint",
        status=Status.OK,
        evidence=warnings,
        figures=figures,
        summary=f"ONNX checker (full) and Polygraphy lint: no errors, {len(warnings)} warning(s){note}",
    )
