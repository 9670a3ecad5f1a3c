"""The child process a ``--metric`` call runs in (:mod:`compiler.data.metric`): imports the user's module, calls its
function on the arrays the parent saved, and writes the score (or why there is none) to ``answer.json``.

Run as ``python -B -P -m compiler.data.metric_worker FOLDER``; whatever the user's code does here (prints, exits,
raises anything, hangs, kills itself) cannot reach the parent's stdout or stop it: the parent reads only the answer.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

ANSWER = "answer.json"
REQUEST = "request.json"
DATA = "data.npz"


def load_function(spec: str):
    """``module:function`` imported: a ``.py`` path, or a dotted module found from the working directory."""
    module_name, _, function_name = spec.rpartition(":")
    if module_name.endswith(".py"):
        loader = importlib.util.spec_from_file_location(f"compile_metric_{Path(module_name).stem}", module_name)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise NoFunction(f"{module_name} has no function {function_name}")
    return function


class NoFunction(Exception):
    """The module imported, but has no such function."""


class NotAScore(Exception):
    """What the function returned is not a finite number (the message says what it was)."""


def score(value: object) -> float:
    """The function's return as a finite float, or :class:`NotAScore` saying what it was."""
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise NotAScore(f"returned a {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise NotAScore(f"returned an integer too large for a float ({int(value).bit_length()} bits)") from None
    if not math.isfinite(number):
        raise NotAScore(f"returned {number}")
    return number


def arrays(folder: Path, request: dict) -> tuple[dict, dict, dict | None]:
    import numpy as np

    with np.load(folder / DATA, allow_pickle=False) as archive:
        outputs = {name: archive[f"o{i}"] for i, name in enumerate(request["outputs"])}
        reference = {name: archive[f"r{i}"] for i, name in enumerate(request["outputs"])}
        labels = None
        if request["labels"] is not None:
            labels = {name: archive[f"l{i}"] for i, name in enumerate(request["labels"])}
    return outputs, reference, labels


def _first_line(value: object) -> str:
    try:
        text = str(value)
    except BaseException:  # an object whose __str__ raises
        text = ""
    return (text.strip().splitlines() or [""])[0][:200]


def answer(folder: Path) -> dict:
    """What the parent is told: ``{"value": x}``, or ``{"error": why}``."""
    request = json.loads((folder / REQUEST).read_text())
    try:
        function = load_function(request["spec"])
    except NoFunction as exc:
        return {"error": str(exc)[:300]}
    except BaseException as exc:  # SystemExit, KeyboardInterrupt and the rest: the user's code ended, not ours
        return {"error": _raised("import", exc)}
    if request["import_only"]:
        return {"value": 0.0}
    try:
        return {"value": score(function(*arrays(folder, request)))}
    except NotAScore as exc:
        return {"error": f"{exc}; return a finite number"}
    except BaseException as exc:
        return {"error": _raised("call", exc)}


def _raised(stage: str, exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({_first_line(exc.code)[:40]}) {'at import' if stage == 'import' else 'when called'}"
    said = f"{type(exc).__name__}: {_first_line(exc)}"
    return f"cannot import it: {said}" if stage == "import" else f"raised {said}"


def main() -> None:
    folder = Path(sys.argv[1])
    found = answer(folder)
    written = folder / (ANSWER + ".partial")
    written.write_text(json.dumps(found))
    os.replace(written, folder / ANSWER)
    os._exit(0)  # threads the user's module left running do not hold the parent


if __name__ == "__main__":
    main()
