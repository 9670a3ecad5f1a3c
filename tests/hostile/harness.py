"""The contract every hostile case is held to, the sandbox it runs in, and the bookkeeping of a run.

Each case is one real CLI run (:func:`tests.support.cli.run_cli`) in a sandbox of its own::

    <case>/in/        the inputs the case made; read only: bytes, mtimes and the file list must not change
    <case>/outside/   files no case may read or change (targets of links and paths leading out)
    <case>/out/       where the command writes (--out)
    <case>/cache/     the build cache (COMPILE_CACHE_DIR)
    <case>/cwd/       the working directory: must stay empty
    <case>/tmp/       TMPDIR: must be empty again when the command ends
    <case>/home/      HOME: must stay empty

The child runs in a session of its own with ``RLIMIT_AS`` = :data:`ADDRESS_SPACE`; the whole session (its build
workers included) is killed at :data:`TIMEOUT_SECONDS` (the slowest valid case takes ~3 s, 10 s on a loaded
machine). A normal build of the digits model ran with
``RLIMIT_AS`` as low as 1 GiB here (768 MiB made TensorRT-RTX fail every target) and peaks at ~220 MB RSS; a
calibration at ~120 MB. The bounds leave 4x margin on the address space and ~7x on RSS. Peak RSS is read from
``getrusage(RUSAGE_CHILDREN)``: its ``ru_maxrss`` is the largest resident set of any finished child (build
workers included, as their parent waits for them), so a case that raises it set the new peak itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.support.cli import REPO, CliResult, run_cli

TIMEOUT_SECONDS = 30
ADDRESS_SPACE = 4 << 30
PEAK_RSS = 1536 << 20

EXAMPLES = {
    "models": 2,
    "profiles": 2,
    "npz": 1,
    "images": 1,
    "calibration": 1,
    "build-options": 1,
    "calibrate-options": 1,
    "inspect-options": 2,
    "check": 1,
    "store-builds": 1,
    "store-contents": 2,
    "store-options": 2,
    "store-values": 2,
    "registry-answers": 3,
    "registry-layouts": 3,
    "pipeline-yaml": 20,
    "export-targets": 4,
    "remote-cache": 8,
    "key-values": 6,
    "bundles": 4,
    "trust-files": 4,
    "channel-signatures": 4,
    "pipeline-fields": 4,
    "metric-modules": 3,
    "modelopt-interpreters": 3,
    "gc-races": 4,
}
"""Generated cases per test (each test is one family x kind, so the totals are these times the kinds), besides
the explicit cases each test always runs (test_hostile.py's MUST tables). A CLI run costs ~0.3 s (a build refusing
its options) to ~2 s (a calibration that runs); these keep the suite near 3 minutes on 2 cores.
``HOSTILE_EXAMPLES=N`` gives every test N generated cases instead (a soak)."""

SOAK = os.environ.get("HOSTILE_EXAMPLES")
LOG = os.environ.get("HOSTILE_LOG")
"""A file that gets one line per case (test, exit code, seconds, the recipe), for a look at what ran."""


def examples(family: str) -> int:
    return int(SOAK) if SOAK else EXAMPLES[family]


# --- the sandbox -----------------------------------------------------------------------------------------------


class Sandbox:
    """One case's folders (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inputs, self.outside = root / "in", root / "outside"
        self.out, self.cache = root / "out", root / "cache"
        self.cwd, self.tmp, self.home = root / "cwd", root / "tmp", root / "home"
        for folder in (self.inputs, self.outside, self.cwd, self.tmp, self.home):
            folder.mkdir()
        self.writable: list[Path] = [self.out, self.cache, *self.known_side_effects()]

    def known_side_effects(self) -> list[Path]:
        """Writes outside out/ and cache/ that every run of onnxruntime makes, checked once by a test of their own
        (test_hostile.py) rather than in every case: its telemetry device id under HOME and its session file in
        TMPDIR."""
        return [self.home / ".cache" / "Microsoft", self.tmp / ".ses"]

    def known_folders(self) -> set[str]:
        """Folders that appear on the way to :meth:`known_side_effects` (their contents are still watched)."""
        return {os.path.relpath(self.home / ".cache", self.root)}

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
        return {
            **os.environ,
            "PYTHONPATH": path,
            "COMPILE_CACHE_DIR": str(self.cache),
            "TMPDIR": str(self.tmp),
            "HOME": str(self.home),
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }


Entry = tuple
"""What a snapshot holds per path: ("file", size, mtime_ns, sha256), ("link", target), ("dir",), ("special", mode)."""


def snapshot(root: Path, skip: list[Path]) -> dict[str, Entry]:
    """Every path under ``root`` but ``skip``, without following links or opening anything but regular files."""
    entries: dict[str, Entry] = {}
    skipped = {str(p) for p in skip}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skipped]
        for name in dirs + files:
            path = os.path.join(folder, name)
            if path in skipped:
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                entry: Entry = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
                entry = ("file", info.st_size, info.st_mtime_ns, digest)
            elif stat.S_ISDIR(info.st_mode):
                entry = ("dir",)
            else:
                entry = ("special", stat.S_IFMT(info.st_mode))
            entries[os.path.relpath(path, root)] = entry
    return entries


def snapshot_changes(before: dict[str, Entry], after: dict[str, Entry], folders: set[str] = frozenset()) -> list[str]:
    changes = []
    for path in sorted(set(before) | set(after)):
        if path in folders and after.get(path) == ("dir",) and path not in before:
            continue
        if path not in after:
            changes.append(f"{path} removed")
        elif path not in before:
            changes.append(f"{path} appeared")
        elif before[path] != after[path]:
            changes.append(f"{path} changed")
    return changes


# --- running one case ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What the contract allows for one case: exit codes (with why), and the names its error line may give."""

    codes: frozenset[int]
    why: str
    names: tuple[str, ...] = ()


@dataclass
class Run:
    args: list[str]
    result: CliResult | None
    seconds: float
    timed_out: bool
    peak_rss: int | None
    """Bytes, when this case set a new high-water mark of the children's peak RSS; else None (below an earlier
    case's peak)."""
    problems: list[str] = field(default_factory=list)


def _limits(pid_file: Path) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec
        os.setsid()  # a session of its own: the timeout kills its build workers too
        pid_file.write_text(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run(box: Sandbox, args: list[str], env: dict[str, str] | None = None) -> Run:
    """Run ``compile ARGS`` in the sandbox, with the limits, and the whole session killed at the timeout (``env``:
    variables added to the sandbox's environment)."""
    pid_file = box.root.with_name(box.root.name + ".pid")
    killed = threading.Event()

    def kill() -> None:
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            killed.set()
        except (OSError, ValueError):
            pass

    timer = threading.Timer(TIMEOUT_SECONDS, kill)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    timer.start()
    problems = []
    try:
        result: CliResult | None = run_cli(
            *args, cwd=box.cwd, env={**box.env(), **(env or {})}, timeout=None, preexec_fn=_limits(pid_file)
        )
    except UnicodeDecodeError as exc:
        result, problems = None, [f"output that is not UTF-8 ({exc})"]
    finally:
        timer.cancel()
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if not killed.is_set() and _left_running(pid_file):
        problems.append("processes of the command still running after it exited")
    with suppress(OSError, ValueError):
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return Run(args, result, seconds, killed.is_set(), after << 10 if after > before else None, problems)


def _left_running(pid_file: Path, grace: float = 2.0) -> bool:
    """Whether the command's session still has live processes ``grace`` seconds after it exited."""
    deadline = time.monotonic() + grace
    while True:
        try:
            os.killpg(int(pid_file.read_text()), 0)
        except (OSError, ValueError):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Characters that must not reach a terminal from untrusted text (docs/errors-and-signals.md: printed escaped):
C0 controls but newline (tab included), DEL, C1 controls, bidirectional overrides and isolates, lone
surrogates. Within one error or warning line a newline cannot be seen: it already made two lines."""


PYTHON_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: .*$", re.MULTILINE)
"""What ``warnings.warn`` prints: a library's warning that reached the user's terminal unworded."""


def check(
    run_: Run, expect: Expect, *, json_output: bool, prints_report_on_error: bool = False, reports_failures: bool = True
) -> list[str]:
    """Every clause of the contract (docs/errors-and-signals.md) this run breaks; empty when it keeps them all."""
    problems = list(run_.problems)
    if run_.timed_out:
        problems.append(f"no answer in {TIMEOUT_SECONDS} s: killed")
    if run_.peak_rss is not None and run_.peak_rss > PEAK_RSS:
        problems.append(f"peak RSS {run_.peak_rss >> 20} MiB, above the {PEAK_RSS >> 20} MiB bound")
    result = run_.result
    if result is None:
        return problems
    code = result.exit_code
    if code < 0:
        problems.append(f"killed by signal {signal.Signals(-code).name}")
    elif code not in expect.codes:
        problems.append(f"exit {code}, expected {'/'.join(map(str, sorted(expect.codes)))} ({expect.why})")
    if "Traceback" in result.stderr:
        problems.append("a Python traceback on stderr")
    if "internal error" in result.stderr:
        problems.append("an internal error")
    errors = result.error_lines
    if code == 0 and errors:
        problems.append(f"exit 0 with {len(errors)} error: line(s)")
    if code > 0 and len(errors) != 1:
        problems.append(f"{len(errors)} error: lines, not exactly one")
    for line in result.stderr.splitlines():
        if line.startswith(("error:", "warning:")) and UNSAFE.search(line):
            problems.append(f"control characters in an error or warning line: {line!r}")
    python_warnings = PYTHON_WARNING.findall(result.stderr)
    if python_warnings:
        problems.append(f"Python warnings on stderr, not warning: lines: {python_warnings[:2]!r}")
    if code >= 2:
        stray = [line for line in result.stderr.splitlines() if line and not line.startswith(("error:", "warning:"))]
        if stray:
            problems.append(f"stderr lines besides the error line: {stray[:3]!r}")
    if (
        code == 2
        and 2 in expect.codes
        and expect.names
        and errors
        and not any(n in errors[0] or n.encode("unicode_escape").decode("ascii") in errors[0] for n in expect.names)
    ):
        problems.append(f"the error line names none of {list(expect.names)}")
    if json_output:
        text = result.stdout
        if text.strip():
            try:
                document = json.loads(text)
            except ValueError as exc:
                problems.append(f"stdout is not one JSON document ({exc}): {text[:200]!r}")
            else:
                if not isinstance(document, dict):
                    problems.append("the JSON document is not an object")
                if code not in (0, 1) and not prints_report_on_error:
                    problems.append(f"a JSON document on stdout with exit {code}")
        elif code == 0 or (code == 1 and reports_failures and "internal error" not in result.stderr):
            problems.append(f"exit {code} with --json but no JSON document on stdout")
    elif UNSAFE.search(result.stdout):
        problems.append(f"control characters on stdout: {UNSAFE.findall(result.stdout)[:5]!r}")
    return problems


# --- a test's cases and the session's summary ------------------------------------------------------------------


@dataclass
class Break:
    """One case that broke the contract, as the report shows it."""

    test: str
    case: str
    root: str
    args: list[str]
    exit_code: int | None
    stderr: str
    problems: list[str]

    def command(self) -> str:
        words = []
        for arg in self.args:
            arg = arg.replace(self.root, "<case>")
            words.append(arg if arg and all(c.isprintable() and not c.isspace() for c in arg) else repr(arg))
        return "compile " + " ".join(words)

    def describe(self) -> str:
        tail = self.stderr.replace(self.root, "<case>").strip().splitlines()[-3:]
        return (
            f"{self.test}: {self.case[:300]}\n    $ {self.command()[:400]}\n    exit {self.exit_code}; "
            f"stderr: {' | '.join(tail)[:500]!r}\n    broke: {'; '.join(self.problems)}"
        )


@dataclass
class Tally:
    """Cases run and contract breaks found, per test, for the session's summary."""

    cases: dict[str, int] = field(default_factory=dict)
    breaks: list[Break] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


TALLY = Tally()


def hostile_settings(family: str) -> settings:
    """Example counts from :data:`EXAMPLES`; deterministic unless soaking; no database written into the tree; no
    shrinking phase (a case never raises: breaks are collected and reported together)."""
    return settings(
        max_examples=examples(family),
        deadline=None,
        derandomize=not SOAK,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


Setup = Callable[[object, Sandbox], "Case"]


@dataclass(frozen=True)
class Case:
    """What a test makes of one generated recipe: the command line and what the contract allows."""

    args: list[str]
    expect: Expect
    json_output: bool
    prints_report_on_error: bool = False
    reports_failures: bool = True
    """Whether exit 1 with --json prints a report (build, check); the store commands print none when they refuse."""
    env: dict[str, str] | None = None
    """Variables added to the sandbox's environment (an S3 endpoint, credentials)."""
    after: Callable[[CliResult], list[str]] | None = None
    """Clauses of the case's own, checked once the command ended (a store left as it was, nothing in --out): the
    problems found."""


def partial_files(folder: Path) -> set[str]:
    """Temporary files of interrupted writes (``*.partial``) under ``folder``."""
    return {str(path.relative_to(folder)) for path in folder.rglob("*.partial")} if folder.is_dir() else set()


def run_cases(
    test: str, family: str, strategy: st.SearchStrategy, setup: Setup, base: Path, must: Sequence[object] = ()
) -> None:
    """Run every generated case of one test, then fail with every contract break found (not only the first).

    ``must`` are cases that run every time (hypothesis explicit examples) besides the generated ones: the hostile
    inputs a short default run must not leave to chance."""
    found: list[Break] = []
    count = 0
    started = time.monotonic()

    def one(recipe: object) -> None:
        nonlocal count
        box = Sandbox(Path(tempfile.mkdtemp(prefix="case-", dir=base)))
        case = setup(recipe, box)
        before = snapshot(box.root, box.writable)
        partials = partial_files(box.out)
        done = run(box, [str(a) for a in case.args], case.env)
        count += 1
        problems = check(
            done,
            case.expect,
            json_output=case.json_output,
            prints_report_on_error=case.prints_report_on_error,
            reports_failures=case.reports_failures,
        )
        left = sorted(partial_files(box.out) - partials)
        if left:
            problems.append(f"temporary files left in out/: {left[:4]}")
        if case.after is not None and done.result is not None:
            problems += case.after(done.result)
        after = snapshot(box.root, box.writable)
        changes = snapshot_changes(before, after, box.known_folders())
        if changes:
            problems.append(f"files changed outside out/ and cache/: {changes[:6]}")
        if LOG:
            with open(LOG, "a", encoding="utf-8") as log:
                code = done.result.exit_code if done.result else None
                log.write(
                    f"{test}\texit {code}\t{done.seconds:.2f} s\t{'BROKE' if problems else 'ok'}\t{recipe!r:.300}\n"
                )
        if problems:
            found.append(
                Break(
                    test,
                    repr(recipe),
                    str(box.root),
                    [str(a) for a in case.args],
                    done.result.exit_code if done.result else None,
                    done.result.stderr if done.result else "",
                    problems,
                )
            )
        else:
            shutil.rmtree(box.root, ignore_errors=True)

    run_all = given(strategy)(one)
    for recipe in reversed(must):
        run_all = example(recipe)(run_all)
    try:
        hostile_settings(family)(run_all)()
    finally:
        TALLY.cases[test] = count
        TALLY.seconds[test] = time.monotonic() - started
        TALLY.breaks.extend(found)
    assert not found, f"{len(found)} of {count} generated cases broke the contract:\n" + "\n".join(
        b.describe() for b in found
    )
