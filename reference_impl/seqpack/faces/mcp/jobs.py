"""The hook for long-running tools: blocking work in its own process, with progress, a time limit and cancellation.

A long-running tool is an ``async`` tool that takes a :class:`~mcp.server.mcpserver.Context` and
hands its blocking work to :func:`run_job`::

    @server.tool(annotations=READ_ONLY)
    async def run_long_check(path: str, ctx: Context, time_limit_s: float = 600.0) -> SomeOut:
        target = roots.resolve(path, field="path")
        report = await run_job(ctx, lambda job: long_check(target, progress=job.progress),
                               time_limit_s=time_limit_s)
        return report.to_dict()

The work function receives a :class:`JobControl` and calls ``job.progress(done, total, message)``
between steps (or ``job.check()`` where it has nothing to report); library code that knows
nothing of jobs stops too, because :func:`seqpack.data.interrupt.checkpoint` (called for
every JSONL row and Parquet row group read) runs the job's check on the worker thread. Each call forwards a progress
notification to the client (when the client asked for progress) and raises :class:`JobStopped` once
the client cancelled the request or the time limit passed, so the work ends at its next step.
:func:`run_job` turns a stop on the time limit into a ``ToolError`` naming the limit, maps
``SeqpackError`` to ``ToolError`` like every other tool, and lets a client cancellation propagate
(a cancelled request gets no response).

Where it can (Linux), the worker thread forks and the work runs in that child process
(:mod:`seqpack.faces.mcp.job_process`): progress and the stop cross pipes, and a job whose process dies
(SIGBUS, SIGSEGV, the out-of-memory killer's SIGKILL) is a tool error naming the signal while the server,
its sessions and its other jobs go on.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from seqpack.data.interrupt import stop_checks
from seqpack.core.limits import MAX_CONCURRENT_JOBS
from seqpack.faces.mcp import job_process
from seqpack.faces.mcp.errors import log, tool_errors

T = TypeVar("T")


class JobStopped(Exception):
    """Raised inside the work function when it must stop (``reason`` is "cancelled" or "time limit")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JobControl:
    """What the work function gets: progress reporting and the stop check (thread-safe)."""

    def __init__(self, report: Callable[[float, float | None, str | None], Any] | None, deadline: float) -> None:
        self._report = report
        self.deadline = deadline
        self._stop = threading.Event()
        self.reason: str | None = None

    def stop(self, reason: str) -> None:
        """Ask the work to stop at its next check (called from the event loop)."""
        if self.reason is None:
            self.reason = reason
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once a stop was requested or the deadline passed."""
        return self._stop.is_set() or time.monotonic() > self.deadline

    def check(self) -> None:
        """Raise :class:`JobStopped` when the work must stop."""
        if self._stop.is_set():
            raise JobStopped(self.reason or "cancelled")
        if time.monotonic() > self.deadline:
            self.stop("time limit")
            raise JobStopped("time limit")

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress to the client, then :meth:`check`."""
        self.check()
        self.report(done, total, message)
        self.check()

    def report(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Send a progress notification to the client (when it asked for progress); never raises."""
        if self._report is not None:
            try:
                anyio.from_thread.run(self._report, done, total, message)
            except Exception as exc:  # noqa: BLE001 - a lost progress note must not fail the work
                log.debug("progress notification not sent: %s", exc)


#: Run every job in its own process where that is available (:mod:`seqpack.faces.mcp.job_process`).
ISOLATE = True

_LIMITERS: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _job_slots() -> anyio.CapacityLimiter:
    """The event loop's :data:`~seqpack.core.limits.MAX_CONCURRENT_JOBS` worker-thread slots, shared by every job."""
    import asyncio

    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(MAX_CONCURRENT_JOBS)
    return limiter


async def run_job(ctx: Context | None, work: Callable[[JobControl], T], *, time_limit_s: float) -> T:
    """Run ``work(job)`` on a worker thread with progress, a time limit and cooperative cancellation.

    At most :data:`~seqpack.core.limits.MAX_CONCURRENT_JOBS` jobs run at once (each bounded in
    memory by the verbs' limits, so the server is too); the others wait for a slot, their time
    limit running.
    """
    if time_limit_s <= 0:
        raise ToolError(f"time_limit_s must be positive, got {time_limit_s}.")
    report = ctx.report_progress if ctx is not None else None
    job = JobControl(report, time.monotonic() + time_limit_s)

    async def watchdog() -> None:
        try:
            await anyio.sleep(time_limit_s)
            job.stop("time limit")
        finally:
            # Cancelled with the request (or after the work ended): either way the work stops.
            job.stop("cancelled")

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            if ISOLATE and job_process.available():  # a job that dies does not take the server with it
                box["value"] = job_process.run_in_child(work, job, job.report, JobStopped)
                return
            with stop_checks(job.check):  # library loops (rows, row groups) stop at their next checkpoint
                box["value"] = work(job)
        except BaseException as exc:  # noqa: BLE001 - handed back to the event loop below
            box["error"] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(watchdog)
        try:
            # Not abandoned on cancel: the thread is told to stop (by the watchdog's cleanup) and
            # is waited for, so no work keeps running after the request ends.
            await anyio.to_thread.run_sync(target, abandon_on_cancel=False, limiter=_job_slots())
        finally:
            tg.cancel_scope.cancel()
    # A cancelled request must end cancelled (no response), not as a tool error: anyio delivers
    # the pending cancellation at this checkpoint.
    await anyio.lowlevel.checkpoint()
    error = box.get("error")
    if isinstance(error, JobStopped):
        if error.reason == "time limit":
            raise ToolError(
                f"stopped after the time limit of {time_limit_s:g} s. Fix: raise time_limit_s or give the job "
                "less work."
            )
        raise ToolError("stopped: the request was cancelled.")
    if error is not None:
        with tool_errors():
            raise error
    return box["value"]


__all__ = ["JobControl", "JobStopped", "run_job"]
