"""A cooperative stop for long work: the MCP server's jobs stop at the next row when the client gives up.

Library loops that can run long on big inputs (reading JSONL rows, reading Parquet row groups)
call :func:`checkpoint`. It does nothing unless the calling thread runs under :func:`stop_checks`,
which the MCP server's job runner sets with the job's stop check: once the client cancels the
request or the time limit passes, that check raises and the work unwinds through its ``finally``
blocks (temporary directories are removed, nothing half-written stays). Costs one thread-local
lookup per call when no check is set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["checkpoint", "stop_checks", "with_stop_check"]

T = TypeVar("T")

_local = threading.local()


def checkpoint() -> None:
    """Run the calling thread's stop check, if any (it raises to stop the work)."""
    check = getattr(_local, "check", None)
    if check is not None:
        check()


@contextmanager
def stop_checks(check: Callable[[], None]) -> Iterator[None]:
    """Make :func:`checkpoint` call ``check`` in this thread while the block runs."""
    previous = getattr(_local, "check", None)
    _local.check = check
    try:
        yield
    finally:
        _local.check = previous


def with_stop_check(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` made to run under the calling thread's stop check (if any) in whichever thread calls it: for
    work a function hands to worker threads."""
    check = getattr(_local, "check", None)
    if check is None:
        return fn

    def run(*args: Any, **kwargs: Any) -> T:
        with stop_checks(check):
            return fn(*args, **kwargs)

    return run
