"""A job's own process: a job that dies (a signal, a crash in native code, the out-of-memory killer) never takes
the server with it.

:func:`run_in_child` forks the server's worker thread into a child process that runs the job and sends back,
over a pipe, its progress notes and then its value or its error (pickled). The parent thread forwards the
progress to the client, passes a stop (cancellation or time limit) down another pipe, and, if the child does
not stop within :data:`STOP_GRACE_S`, kills it. A child that ends without an answer is a
:class:`~seqpack.core.errors.ResourceError` naming how it ended ("killed by SIGBUS", "by SIGKILL, what the
out-of-memory killer sends"), and the server answers the next request as before.

The child inherits the server's state as it is (the allowed roots, the imported modules), so nothing is
pickled on the way in; it never touches the event loop, writes its log to a fresh copy of stderr (another
thread may have held the old one's lock at the fork), and leaves with ``os._exit``. Forking is used on Linux;
elsewhere :func:`available` is False and jobs run on the worker thread itself.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import sys
import time
import warnings
from typing import Any, Callable

from seqpack.core.errors import ResourceError, SeqpackError

log = logging.getLogger("seqpack.mcp")

__all__ = ["ChildJob", "available", "run_in_child"]

#: Seconds a job's process has to stop by itself after it was told to (then it is killed).
STOP_GRACE_S = 10.0
#: Seconds between two looks at the stop pipe inside the child (a look is a system call; rows are microseconds).
STOP_POLL_S = 0.02
_HEADER = struct.Struct("<Q")


def available() -> bool:
    """True where a job runs in its own process (Linux: ``fork`` without ``exec`` is safe there)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class ChildJob:
    """What the work function gets inside the child: the :class:`~seqpack.faces.mcp.jobs.JobControl` interface
    (``check``, ``progress``, ``stopped``, ``reason``), over the pipes to the server."""

    def __init__(self, out_fd: int, stop_fd: int, deadline: float, stopped_type: type[Exception]) -> None:
        self._out, self._stop_fd, self._deadline, self._stopped_type = out_fd, stop_fd, deadline, stopped_type
        self.reason: str | None = None
        self._looked = 0.0

    def _look(self) -> None:
        now = time.monotonic()
        if self.reason is None and now - self._looked >= STOP_POLL_S:
            self._looked = now
            if select.select([self._stop_fd], [], [], 0)[0]:
                data = os.read(self._stop_fd, 64)
                self.reason = data.decode("ascii", "replace").strip() or "cancelled"
        if self.reason is None and now > self._deadline:
            self.reason = "time limit"

    @property
    def stopped(self) -> bool:
        """True once the server asked the job to stop or the deadline passed."""
        self._look()
        return self.reason is not None

    def stop(self, reason: str) -> None:
        """Stop at the next check (the work's own decision)."""
        if self.reason is None:
            self.reason = reason

    def check(self) -> None:
        """Raise the job's stop when the work must stop."""
        self._look()
        if self.reason is not None:
            raise self._stopped_type(self.reason)

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Send a progress note to the server (it forwards it to the client), then :meth:`check`."""
        self.check()
        send(self._out, ("progress", done, total, message))
        self.check()


def send(fd: int, message: Any) -> None:
    """Write one pickled message to ``fd``."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _portable(exc: BaseException) -> BaseException:
    """``exc`` when it pickles both ways, else an error of the same kind carrying its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        text = f"{type(exc).__name__}: {exc}"
        return SeqpackError(str(exc)) if isinstance(exc, SeqpackError) else RuntimeError(text)


def _fresh_stderr() -> None:
    """In the child: log to a new stream on a copy of fd 2 (the old stream's lock may be held by a thread that
    no longer exists here)."""
    try:
        fresh = open(os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    except OSError:
        return
    old = sys.stderr
    raw = getattr(old, "raw", None)
    sys.stderr = fresh
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and handler.stream in (old, raw, sys.__stderr__):
                handler.stream = fresh  # not setStream: that flushes the old stream


def _child(work: Callable[[Any], Any], out_fd: int, stop_fd: int, deadline: float,
           stopped_type: type[Exception]) -> None:
    """Run ``work`` in the forked child and send its answer; never returns."""
    code = 0
    try:
        _fresh_stderr()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it stops the child through the pipe
        os.setpgid(0, 0)  # its own group: a kill reaches what it started too (pack workers, smoke ranks)
        from seqpack.data.interrupt import stop_checks

        job = ChildJob(out_fd, stop_fd, deadline, stopped_type)
        try:
            with stop_checks(job.check):
                value = work(job)
            answer: tuple[str, Any] = ("value", value)
        except BaseException as exc:  # noqa: BLE001 - every ending goes back to the server
            answer = ("error", _portable(exc))
        try:
            send(out_fd, answer)
        except Exception as exc:  # noqa: BLE001 - a value that does not pickle is a bug: say so
            send(out_fd, ("error", RuntimeError(f"the job's result could not be sent back ({type(exc).__name__}: "
                                                f"{exc})")))
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_in_child(work: Callable[[Any], Any], job: Any, report: Callable[[float, float | None, str | None], None],
                 stopped_type: type[Exception]) -> Any:
    """``work(child_job)`` in a forked child (module docstring); its value, or its error raised here.

    ``job`` is the server's :class:`~seqpack.faces.mcp.jobs.JobControl` (its stop and deadline are watched here);
    ``report`` forwards a progress note to the client.
    """
    results_r, results_w = os.pipe()
    stop_r, stop_w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork of a process with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its coverage is the parent's tests
        os.close(results_r)
        os.close(stop_w)
        _child(work, results_w, stop_r, job.deadline, stopped_type)
    os.close(results_w)
    os.close(stop_r)
    try:
        answer = _collect(results_r, stop_w, pid, job, report, stopped_type)
    finally:
        os.close(results_r)
        os.close(stop_w)
        _reap(pid)
    kind, value = answer
    if kind == "error":
        raise value
    return value


def _collect(results_r: int, stop_w: int, pid: int, job: Any, report: Callable[..., None],
             stopped_type: type[Exception]) -> tuple[str, Any]:
    """Read the child's messages until its answer; tell it to stop when the job must; kill it when it will not."""
    buffer, told_at, answer = b"", None, None
    while answer is None:
        if job.stopped and told_at is None:
            told_at = time.monotonic()
            try:
                os.write(stop_w, _reason(job).encode("ascii", "replace"))
            except OSError:
                pass
        if told_at is not None and time.monotonic() - told_at > STOP_GRACE_S:
            _kill_group(pid)
            log.warning("a job did not stop within %g s of being told to (%s); killed", STOP_GRACE_S, _reason(job))
            return "error", stopped_type(_reason(job))
        if not select.select([results_r], [], [], 0.1)[0]:
            continue
        chunk = os.read(results_r, 1 << 16)
        if not chunk:
            return "error", _ended(pid, job)
        buffer += chunk
        while len(buffer) >= _HEADER.size and len(buffer) >= _HEADER.size + _HEADER.unpack_from(buffer)[0]:
            size = _HEADER.unpack_from(buffer)[0]
            message = pickle.loads(buffer[_HEADER.size: _HEADER.size + size])
            buffer = buffer[_HEADER.size + size:]
            if message[0] == "progress":
                report(*message[1:])
            else:
                answer = message
    return answer


def _reason(job: Any) -> str:
    """Why ``job`` must stop: its stop's reason, else "time limit" once its deadline passed (the server's
    watchdog may not have said so yet), else "cancelled"."""
    if job.reason is not None:
        return str(job.reason)
    return "time limit" if time.monotonic() > job.deadline else "cancelled"


def _ended(pid: int, job: Any) -> BaseException:
    """The error of a child that closed its pipe without an answer: how it ended."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = {signal.SIGKILL: " (what the kernel's out-of-memory killer sends)",
                signal.SIGBUS: " (a file it read was truncated under it, or a crash in native code)",
                signal.SIGSEGV: " (a crash in native code)"}.get(sig, "")
        how = f"was killed by {name}{hint}"
    else:
        how = f"exited with code {os.WEXITSTATUS(status)} without an answer"
    log.error("a job's process %s; the server goes on", how)
    return ResourceError(f"the job's process {how}; nothing else was affected and the server goes on",
                         fix="retry; if it happens again, give the job less work or more memory")


def _kill_group(pid: int) -> None:
    """Kill the child and everything it started (its process group)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _reap(pid: int) -> None:
    """Make sure the child is gone and reaped."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            _kill_group(pid)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass
