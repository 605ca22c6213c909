"""Running one agent process so that nothing it does can hang, flood or outlive the harness.

* The agent starts in a session and process group of its own. At the timeout the whole group is killed, and then
  every process that still carries the task's marker in its environment (a child that called ``setsid`` to leave
  the group, a daemon reparented to init): the tree is killed even when a child holds stdout open. Inside the
  sandbox (:mod:`seqpack_evals.sandbox`) the agent is also the init of a PID namespace, so everything it started
  dies with it.
* stdout and stderr are read by threads in chunks and kept within a bound: the first :data:`HEAD_BYTES` and the
  last :data:`TAIL_BYTES` of each stream, with the number of bytes dropped between them (recorded in the
  transcript); gigabytes on stdout cost time, not memory.
* When the agent's main process has exited, the harness waits at most :data:`DRAIN_S` for the streams to close,
  then kills what is left and closes its ends of the pipes: a background child holding stdout does not make the
  run wait.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from seqpack.core.errors import UsageError

#: What is kept of each stream: its first and its last bytes.
HEAD_BYTES = 4_000_000
TAIL_BYTES = 1_000_000
#: Seconds to wait for the streams to close after the main process exited, and for a killed group to go.
DRAIN_S = 2.0
KILL_GRACE_S = 3.0
_READ = 1 << 16


class BoundedCapture:
    """The first ``head`` and the last ``tail`` bytes of a stream, and how many bytes came in all."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        """Take one chunk."""
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail and self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail.popleft())

    @property
    def dropped(self) -> int:
        """Bytes that came in and were not kept."""
        return self.total - len(self.head) - min(self.tail_size, self.tail_limit)

    def text(self) -> str:
        """The kept bytes as text, with a marker line where bytes were dropped."""
        tail = b"".join(self.tail)[-self.tail_limit:] if self.tail else b""
        head = bytes(self.head).decode("utf-8", errors="replace")
        if not self.dropped:
            return head + tail.decode("utf-8", errors="replace")
        return (head + f"\n[... {self.dropped} bytes dropped by the harness (it keeps the first {self.head_limit} "
                f"and the last {self.tail_limit}) ...]\n" + tail.decode("utf-8", errors="replace"))


@dataclass
class AgentResult:
    """Raw outcome of one agent process."""

    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    streams: dict[str, dict[str, int]] = field(default_factory=dict)  # per stream: total, kept head/tail, dropped
    leftovers: int = 0  # processes still running after the main one exited (killed by the harness)


def _pump(fd: int, capture: BoundedCapture, stop: threading.Event) -> None:
    """Read ``fd`` into ``capture`` until EOF or ``stop`` (polling, so a pipe held open by a stray child never blocks
    the harness)."""
    while not stop.is_set():
        try:
            ready, _, _ = select.select([fd], [], [], 0.1)
        except (OSError, ValueError):
            return
        if not ready:
            continue
        try:
            chunk = os.read(fd, _READ)
        except OSError:
            return
        if not chunk:
            return
        capture.add(chunk)


def _feed(fd: int, data: bytes, stop: threading.Event) -> None:
    """Write ``data`` to ``fd`` as the agent reads it, then close it (an agent that never reads stdin is fine)."""
    view = memoryview(data)
    try:
        while view and not stop.is_set():
            _, ready, _ = select.select([], [fd], [], 0.1)
            if ready:
                view = view[os.write(fd, view[:_READ]):]
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def marked_processes(marker: bytes, *, exclude: Sequence[int] = ()) -> list[int]:
    """Pids (other than ours and ``exclude``) whose environment contains ``marker`` (``NAME=value``)."""
    out = []
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) in (me, *exclude):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            out.append(int(name))
    return out


def kill_tree(pgid: int, marker: bytes | None) -> int:
    """Kill the process group ``pgid`` and every process carrying ``marker``; returns how many marked ones were
    found still running."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    found = 0
    if marker:
        for _ in range(3):  # a process may fork while it is being killed
            pids = marked_processes(marker)
            if not pids:
                break
            found += len(pids)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
    return found


def run_agent(argv: Sequence[str], prompt: str, cwd: Path, *, timeout: float, env: dict[str, str],
              marker: str | None = None) -> AgentResult:
    """Run ``argv`` with ``prompt`` on stdin in ``cwd`` (see the module docstring); ``marker`` (``NAME=value``, a
    variable of ``env`` unique to this task) finds the processes it leaves behind."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
    except FileNotFoundError:
        raise UsageError(f"agent command not found: {argv[0]}", field="agent_cmd") from None
    except PermissionError:
        raise UsageError(f"agent command is not executable: {argv[0]}", field="agent_cmd") from None
    mark = marker.encode() if marker else None
    captures = {"stdout": BoundedCapture(), "stderr": BoundedCapture()}
    stop = threading.Event()
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), os.dup(proc.stdin.fileno())
    proc.stdin.close()
    os.set_blocking(in_fd, False)
    readers = [threading.Thread(target=_pump, args=(out_fd, captures["stdout"], stop), daemon=True),
               threading.Thread(target=_pump, args=(err_fd, captures["stderr"], stop), daemon=True)]
    feeder = threading.Thread(target=_feed, args=(in_fd, prompt.encode("utf-8"), stop), daemon=True)
    for t in (*readers, feeder):
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    duration = time.monotonic() - started
    deadline = time.monotonic() + DRAIN_S
    for t in readers:
        t.join(max(0.0, deadline - time.monotonic()))
    leftovers = 0
    if timed_out or any(t.is_alive() for t in readers) or (mark and marked_processes(mark, exclude=[proc.pid])):
        leftovers = kill_tree(proc.pid, mark)
        for t in readers:  # what the killed processes still wrote
            t.join(0.5)
    stop.set()  # a child that escaped the kill may still hold a pipe: stop reading it
    for t in (*readers, feeder):
        t.join(1.0)
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    streams = {name: {"bytes": c.total, "kept_head": c.head_limit, "kept_tail": c.tail_limit, "dropped": c.dropped}
               for name, c in captures.items()}
    return AgentResult(list(argv), None if timed_out else proc.returncode, timed_out, duration,
                       captures["stdout"].text(), captures["stderr"].text(), streams, leftovers)


__all__ = ["AgentResult", "BoundedCapture", "DRAIN_S", "HEAD_BYTES", "TAIL_BYTES", "kill_tree", "marked_processes",
           "run_agent"]
