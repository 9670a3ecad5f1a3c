"""GitHub Actions played locally, the way its runner would: a job's steps in order, `run:` steps under bash with the
job's and step's environment, expressions evaluated, step outputs passed on, and the composite action of this
repository (`uses: $/.`) played step by step. Steps of GitHub's own actions (checkout, setup-python, cache,
upload-artifact, AWS credentials) stand for what the runner provides and are recorded, not run: the test's
interpreter is the job's Python, and its folder the checkout.

The expression language is the subset our workflows use: context lookups, string literals, ``==``, ``!=``, ``&&``,
``||``, ``fromJSON`` and the status functions; anything else fails the test rather than being guessed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RUNNER_PROVIDED = (
    "actions/checkout@",
    "actions/setup-python@",
    "actions/cache@",
    "actions/upload-artifact@",
    "aws-actions/configure-aws-credentials@",
    "actions/attest-build-provenance@",
)
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||\(|\)|,)|(?P<name>[A-Za-z_][\w.\-]*))")


def evaluate(expression: str, contexts: dict[str, Any]) -> Any:
    """The value of a GitHub expression (the subset above) in ``contexts``."""
    tokens = [m for m in _TOKEN.finditer(expression)]
    assert "".join(m.group(0) for m in tokens).strip() == expression.strip(), f"unsupported: {expression!r}"
    items = [(m.lastgroup, m.group(m.lastgroup)) for m in tokens]
    value, rest = _or(items, contexts)
    assert not rest, f"unsupported: {expression!r}"
    return value


def _or(items, contexts):
    return _chain(items, contexts, "||", _and, lambda left, right: left or right)


def _and(items, contexts):
    return _chain(items, contexts, "&&", _compare, lambda left, right: left and right)


def _chain(items, contexts, op, operand, combine):
    """``operand (op operand)*``, folded left to right with ``combine`` (GitHub's && and || return an operand)."""
    value, items = operand(items, contexts)
    while items and items[0] == ("op", op):
        right, items = operand(items[1:], contexts)
        value = combine(value, right)
    return value, items


def _compare(items, contexts):
    value, items = _atom(items, contexts)
    if items and items[0] in (("op", "=="), ("op", "!=")):
        right, rest = _atom(items[1:], contexts)
        return (value == right) == (items[0][1] == "=="), rest
    return value, items


def _atom(items, contexts):
    kind, text = items[0]
    if kind == "str":
        return text[1:-1].replace("''", "'"), items[1:]
    if (kind, text) == ("op", "("):
        value, rest = _or(items[1:], contexts)
        assert rest[0] == ("op", ")")
        return value, rest[1:]
    assert kind == "name", f"unexpected {text!r}"
    if text == "fromJSON" and items[1] == ("op", "("):
        value, rest = _or(items[2:], contexts)
        return json.loads(value), rest[1:]
    status = {"always": True, "success": True, "failure": False, "cancelled": False}  # every step so far passed
    if text in status and items[1:3] == [("op", "("), ("op", ")")]:
        return status[text], items[3:]
    if text in ("true", "false"):
        return text == "true", items[1:]
    value: Any = contexts
    for part in text.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value, items[1:]


def substitute(value: Any, contexts: dict[str, Any]) -> Any:
    """A YAML value with its ``${{ }}`` expressions evaluated (a whole-expression string keeps the value's type)."""
    if isinstance(value, dict):
        return {k: substitute(v, contexts) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    whole = _EXPRESSION.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), contexts)
    return _EXPRESSION.sub(lambda m: str(evaluate(m.group(1), contexts)), value)


@dataclass
class Job:
    """One job being played: its folder (the checkout), RUNNER_TEMP, contexts and the environment of its steps."""

    folder: Path
    tool: Path  # this repository at the commit the workflow was called at: what `uses: $/.` names
    contexts: dict[str, Any]
    env: dict[str, str]
    provided: list[str] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)

    def run_steps(self, steps: list[dict], action_path: Path | None = None) -> None:
        for step in steps:
            if "if" in step and not substitute("${{ " + step["if"] + " }}", self.contexts):
                continue
            uses = step.get("uses")
            if uses == "$/.":
                self.play_action(step)
            elif uses:
                assert uses.startswith(RUNNER_PROVIDED), f"a step uses {uses}, which the player does not know"
                self.provided.append(uses.split("@")[0])
            else:
                self.run(step, action_path)

    def run(self, step: dict, action_path: Path | None) -> None:
        output = self.folder / "runner-temp" / f"output-{len(self.outputs)}"
        contexts = dict(self.contexts, github={**self.contexts["github"], "action_path": str(action_path or "")})
        env = {**self.env, **{k: str(v) for k, v in substitute(step.get("env", {}), contexts).items()}}
        env["GITHUB_OUTPUT"] = str(output)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=self.folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, (step.get("name"), done.stdout[-3000:], done.stderr[-3000:])
        values = dict(line.split("=", 1) for line in output.read_text().splitlines()) if output.exists() else {}
        self.outputs[step.get("id", f"step{len(self.outputs)}")] = values
        self.contexts["steps"] = {k: {"outputs": v} for k, v in self.outputs.items()}
        path_file = Path(self.env["GITHUB_PATH"])
        if path_file.exists():
            self.env["PATH"] = os.pathsep.join([*path_file.read_text().split(), os.environ["PATH"]])

    def play_action(self, step: dict) -> None:
        """The composite action of this repository, with the step's inputs over its defaults."""
        action = yaml.safe_load((self.tool / "action.yml").read_text())
        given = substitute(step.get("with", {}), self.contexts)
        inputs = {name: str(given.get(name, spec.get("default", ""))) for name, spec in action["inputs"].items()}
        outer = self.contexts
        self.contexts = dict(outer, inputs=inputs)
        try:
            self.run_steps(action["runs"]["steps"], self.tool)
        finally:
            self.contexts = dict(outer, steps=self.contexts.get("steps", {}))


def new_job(
    folder: Path, tool: Path, contexts: dict[str, Any], workflow_env: dict, job_env: dict, base: dict[str, str]
) -> Job:
    """A job in ``folder`` (already holding the checkout) with RUNNER_TEMP, GITHUB_PATH and GITHUB_STEP_SUMMARY."""
    temp = folder / "runner-temp"
    temp.mkdir(parents=True, exist_ok=True)
    env = dict(base)
    env.update(RUNNER_TEMP=str(temp), GITHUB_PATH=str(temp / "path"), GITHUB_STEP_SUMMARY=str(temp / "summary.md"))
    env.update({k: str(v) for k, v in substitute(workflow_env, contexts).items()})
    env.update({k: str(v) for k, v in substitute(job_env, contexts).items()})
    return Job(folder=folder, tool=tool, contexts=contexts, env=env)
