"""Errors that map to the command-line contract's exit codes.

Every failure a user can cause or fix is one of these; the CLI turns it into a
single ``error:`` line and the matching exit code. Anything else is a bug.
"""

from __future__ import annotations

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    INVALID_INPUT = 2
    ENVIRONMENT = 3
    CONFLICT = 4


class CompileError(Exception):
    """Base of all expected failures; ``exit_code`` is what the CLI returns."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED


class CheckFailed(CompileError):
    """A check, gate or build failed (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED


class InvalidInput(CompileError):
    """The user gave a bad file, option or value (exit 2)."""

    exit_code = ExitCode.INVALID_INPUT


class EnvironmentProblem(CompileError):
    """A backend, GPU or store is missing or unreachable (exit 3)."""

    exit_code = ExitCode.ENVIRONMENT


class Conflict(CompileError):
    """A published version already exists with other content (exit 4)."""

    exit_code = ExitCode.CONFLICT


class Interrupted(CompileError):
    """Stopped by a signal: Ctrl-C (SIGINT) or SIGTERM (a cancelled CI job, a stopping container). The exit
    code is the shell's 128 + signal number, as if the signal had ended the process."""

    def __init__(self, signum: int) -> None:
        super().__init__("interrupted" if signum == signal.SIGINT else "terminated")
        self.exit_code = 128 + signum
