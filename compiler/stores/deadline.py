"""Every operation on a store over the network ends within a deadline (``$COMPILE_STORE_DEADLINE``, seconds): a
registry or S3 endpoint that accepts connections and never answers, or trickles its answer a byte at a time, costs
a command one deadline, not the libraries' read timeouts times their retries.

The libraries bound each read of a socket, never a whole request, so the bound is kept here: each public
:class:`~compiler.stores.base.Store` operation runs in a thread of its own, which the caller waits for no longer
than the deadline (a blob transfer gets one more second per MiB it carries). When it passes, the caller gets one
:class:`EnvironmentProblem` naming the store, the deadline and the variable, and the store is not asked again in
this command: every later operation on it fails at once with the same line. The abandoned thread is a daemon that
holds only its socket; what it was writing is the caller's to remove, as after any failed operation.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from typing import Any

from compiler.core import deadlines
from compiler.core.errors import EnvironmentProblem
from compiler.stores.base import Store

MIB = 1 << 20
_local = threading.local()
OPERATIONS = tuple(name for name, member in vars(Store).items() if inspect.isfunction(member) and name[0] != "_")
"""The store interface's operations: what callers above the stores call."""


def store_deadline() -> float:
    return deadlines.seconds(deadlines.STORE, deadlines.STORE_DEFAULT)


def socket_timeouts(connect: float, read: float) -> tuple[float, float]:
    """The libraries' own per-socket timeouts, never above the deadline (an abandoned thread ends by then too)."""
    limit = store_deadline()
    return min(connect, limit), min(read, limit)


class Deadlined:
    """A network store's mixin: wraps every operation of the store interface the class has (see the module)."""

    gave_up: str | None = None
    """The error line of the operation that passed the deadline, once one has."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in OPERATIONS:
            method = getattr(cls, name, None)
            if method is not None and not getattr(method, "deadlined", False):
                setattr(cls, name, _bounded(name, method))


def _carried(name: str, args: tuple, kwargs: dict) -> int:
    """Bytes an operation carries (a blob put or got), for its allowance beyond the deadline."""
    if name == "put_blob":
        return int(getattr(args[2] if len(args) > 2 else kwargs.get("source"), "size", 0) or 0)
    if name == "get_blob":
        return int((args[3] if len(args) > 3 else kwargs.get("size")) or 0)
    return 0


class _Outcome:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


def _bounded(name: str, method):
    what = name.replace("_", " ")

    @functools.wraps(method)
    def bounded(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "inside", False):  # an operation calling another: one deadline for the whole
            return method(self, *args, **kwargs)
        if self.gave_up is not None:
            raise EnvironmentProblem(self.gave_up)
        seconds = store_deadline() + _carried(name, args, kwargs) / MIB
        outcome = _Outcome()

        def work() -> None:
            _local.inside = True
            try:
                outcome.value = method(self, *args, **kwargs)
            except BaseException as exc:  # handed to the caller as it is
                outcome.error = exc
            finally:
                outcome.done.set()

        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(work,), daemon=True, name=f"compile-store-{name}").start()
        if not outcome.done.wait(seconds):
            self.gave_up = (
                f"store {self.uri}: the {what} request did not finish within the {seconds:g} s deadline, so the "
                f"store is not asked again in this command; if it is only slow, raise ${deadlines.STORE} (seconds, "
                f"default {deadlines.STORE_DEFAULT:g})"
            )
            raise EnvironmentProblem(self.gave_up)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    bounded.deadlined = True  # type: ignore[attr-defined]
    return bounded
