"""Running the real CLI the way a user does, and asserting on what it says."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "compiler" / "examples"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def run_cli(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900,
    preexec_fn: Callable[[], None] | None = None,
) -> CliResult:
    """Run `compile ARGS...` the way a user does: a separate process, real exit code and streams
    (``preexec_fn`` sets limits in that process)."""
    done = subprocess.run(
        [sys.executable, "-m", "compiler", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def files_of_at_most(kib: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child a real write failure (EFBIG past RLIMIT_FSIZE), as a full disk would."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib << 10, kib << 10))

    return limit


def assert_clean_error(result: CliResult, exit_code: int, *fragments: str) -> str:
    """One `error:` line naming the problem, the documented exit code, and no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line
