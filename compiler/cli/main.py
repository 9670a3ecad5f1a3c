"""The process around the app: stop signals, exit codes, and the one ``error:`` line.

Every expected failure becomes one ``error:`` line on stderr and the contract's exit code (tracebacks only with
``--debug``); anything else is an internal error, ours to fix.
"""

import os
import signal
import sys
import threading
import traceback
from contextlib import suppress

from compiler.cli.render import version_line
from compiler.core.errors import STOP_SIGNALS, CompileError, ExitCode, Interrupted, note_stop, stop_received
from compiler.core.text import printable

INTERRUPTED = 130
"""The shell's exit code for Ctrl-C (128 + SIGINT)."""
READER_GONE = 128 + signal.SIGPIPE
"""What `yes | head -1` gives: output whose reader went away ends the run quietly, as SIGPIPE would."""


def _stop(signum: int, frame: object) -> None:
    """Ctrl-C and SIGTERM (a cancelled CI job, a stopping container) stop any command the same way: noted, then
    a KeyboardInterrupt, which no ``except Exception`` catches, so cleanup runs and nothing half-done stays.
    `compile build` lets its builders stop through their progress monitors instead (compiler/engines/workers.py)."""
    note_stop(signum)
    raise KeyboardInterrupt


def main() -> None:
    """Entry point: run the app and map failures to the contract's exit codes."""
    if sys.argv[1:] == ["--version"]:  # what scripts probe most, answered without building the app
        sys.stdout.write(version_line() + "\n")
        _exit(ExitCode.OK)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    code, problem = _run_app()
    stopped = stop_received()
    if stopped is not None and code not in (ExitCode.OK, READER_GONE):  # whatever error the stop became
        code, problem = 128 + stopped, Interrupted(stopped).args[0]
    if problem:
        sys.stderr.write(f"error: {printable(problem)}\n")
    _exit(int(code))


def _run_app() -> tuple[int, str | None]:
    """The app's exit code and its error line, if any."""
    import typer
    from typer.exceptions import TyperException

    from compiler.cli.app import app

    try:
        code = app(standalone_mode=False, prog_name="compile")  # also under python -m compiler
        # Typer turns Ctrl-C inside a command into a silent exit 130
        return (INTERRUPTED, "interrupted") if code == INTERRUPTED else (int(code or 0), None)
    except (typer.Abort, KeyboardInterrupt):
        return INTERRUPTED, "interrupted"
    except SystemExit as exc:  # Typer ends a run whose stdout reader went away (| head) with a bare exit 1
        reader_gone = isinstance(exc.__context__, BrokenPipeError)
        return READER_GONE if reader_gone else exc.code if isinstance(exc.code, int) else ExitCode.CHECK_FAILED, None
    except TyperException as exc:
        return ExitCode.INVALID_INPUT, f"{exc.format_message()} (see compile --help)"
    except CompileError as exc:
        _traceback_if_debugging()
        return exc.exit_code, str(exc)
    except OSError as exc:  # the machine's doing (a full disk, a lost mount), not a bug to report
        _traceback_if_debugging()
        where = f"{exc.filename}: " if exc.filename else ""
        return ExitCode.ENVIRONMENT, (
            f"{where}{exc.strerror or exc}; check the free space and permissions of the "
            f"files and folders this command reads and writes (--debug shows which)"
        )
    except ModuleNotFoundError as exc:
        _traceback_if_debugging()
        from compiler.core.plugins import missing_build_module

        needed = missing_build_module(exc.name)
        if needed is None:
            return ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}; rerun with --debug and report it"
        return ExitCode.ENVIRONMENT, needed
    except Exception as exc:
        _traceback_if_debugging()
        return ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}; rerun with --debug and report it"


def _traceback_if_debugging() -> None:
    from compiler.cli.app import debugging

    if debugging["on"]:
        traceback.print_exc()


def _exit(code: int) -> None:
    """Leave without the interpreter's teardown, as mypy does: collecting every module and unloading
    TensorRT's libraries takes ~0.05 s of each run. Threads still working (a model digest being
    remembered for the next run) finish first, and the output is flushed."""
    for signum in STOP_SIGNALS:  # from here on, a stop signal just ends the process
        signal.signal(signum, signal.SIG_DFL)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    processes = sys.modules.get("multiprocessing.util")
    if processes is not None:  # what its atexit hook does: the builders' fork server leaves a folder in $TMPDIR
        processes._exit_function()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader that went away (| head) or a closed stream
            stream.flush()
    os._exit(code)
