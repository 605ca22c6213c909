"""A warmed process that forks local ranks: the imports a rank needs are paid once per launch, not once per rank.

Starting a CPU rank costs more than its work: a fresh Python imports torch (about 2.4 s of CPU
here) and, for the context-parallel ranks, Megatron-Core (about 2 s more). :class:`RankServer`
starts one process (``python -m seqpack.training.rank_server``) that imports the
``preload`` modules and then waits; each :meth:`RankServer.launch` forks the ranks from it, so
they start with those modules loaded and nothing else done. The server never runs a rank's
work itself: every rank is a fresh fork of the same warmed state, with the environment
``torchrun`` would give it (:func:`~seqpack.training.ranks.launch_ranks` builds it), its
own working directory, ``sys.argv`` and log file. It can be started early, so that its imports
run while the caller does other work (the smoke test starts it before its in-process checks).

The server forks only where ``fork`` is safe for torch (Linux; :func:`fork_available`); it never
touches torch's thread pools before forking (torch runs no operation in it), so its ranks start
them as a fresh process would, with the thread settings torch read from the server's
environment. A launch whose environment differs from the server's (say another
``OMP_NUM_THREADS``, which is read when torch loads) is therefore refused
(:meth:`RankServer.serves`); the caller then starts fresh processes.

Protocol (JSON lines; the parent writes the server's stdin, reads its stdout): the server says
``{"ready": seconds}`` once its imports are done; a request ``{"argv", "env", "cwd", "logs"}``
(per-rank lists for ``env`` and ``logs``) is answered by ``{"pids": [...]}`` and then one
``{"rank": r, "returncode": rc}`` per rank as it ends (a signal ``s`` reads ``-s``, as in
:mod:`subprocess`). End of input stops the server, which kills ranks still running.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["PRELOADS", "VOLATILE", "RankServer", "fork_available"]

#: What a server can import before it forks, by name: ``torch`` (and ``torch.distributed``), and
#: ``megatron_core``: Megatron-Core's parallel state and ``PackedSeqParams`` the way
#: :func:`~seqpack.training.ranks.import_megatron_core` imports them (fused-kernel compile off;
#: only for ranks that import Megatron-Core through that function).
PRELOADS = ("torch", "megatron_core")


#: Variables that change while a process runs and that nothing reads at import time (pytest names the running
#: test in ``PYTEST_CURRENT_TEST``): a launch whose environment differs from the server's only there is served.
VOLATILE = ("PYTEST_CURRENT_TEST",)


def _stable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in VOLATILE}


def fork_available() -> bool:
    """True where ranks may be forked from a warmed server (Linux: ``fork`` without exec is safe for torch there)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _preload(names: Sequence[str]) -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
    for name in names:
        if name == "torch":
            import torch  # noqa: F401
            import torch.distributed  # noqa: F401
        elif name == "megatron_core":
            from seqpack.training.ranks import import_megatron_core

            import_megatron_core()
        else:
            raise ValueError(f"unknown preload {name!r}; known: {', '.join(PRELOADS)}")


class RankServer:
    """A started rank server (see the module docstring); use it as a context manager or call :meth:`close`."""

    def __init__(self, env: dict[str, str], preload: Sequence[str] = ("torch",), *,
                 log: Path | None = None) -> None:
        """Start the server process with environment ``env`` (the ranks' environment without their
        rank variables) and import ``preload`` (names from :data:`PRELOADS`) in it; ``log``: its stderr."""
        if not fork_available():
            raise OSError("ranks cannot be forked from a server on this platform")
        bad = [p for p in preload if p not in PRELOADS]
        if bad:
            raise ValueError(f"unknown preload {bad[0]!r}; known: {', '.join(PRELOADS)}")
        self.env = dict(env)
        self.preload = tuple(preload)
        self.log = log
        self.import_s: float | None = None
        self._err = open(log, "wb") if log is not None else None  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "seqpack.training.rank_server", *self.preload], env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err or subprocess.DEVNULL,
        )
        self._buffer = b""

    # -- parent side ----------------------------------------------------------------------------

    def serves(self, env: dict[str, str]) -> bool:
        """True when ranks with environment ``env`` (without rank variables) can be forked from this server: it
        runs and was started with the same environment (but for :data:`VOLATILE`)."""
        return self._proc.poll() is None and _stable(env) == _stable(self.env)

    def _message(self, deadline: float) -> dict[str, Any] | None:
        """The server's next message, or None at the deadline or when it ended."""
        out = self._proc.stdout
        assert out is not None
        while b"\n" not in self._buffer:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def ready(self, deadline: float) -> bool:
        """Wait (until ``deadline``, a ``time.perf_counter()`` value) for the server's imports; True when done."""
        if self.import_s is None:
            msg = self._message(deadline)
            if msg is None or "ready" not in msg:
                return False
            self.import_s = float(msg["ready"])
        return True

    def launch(self, argv: Sequence[str], envs: Sequence[dict[str, str]], logs: Sequence[Path],
               cwd: Path | None, deadline: float) -> tuple[list[int | None], int | None, bool]:
        """Fork one rank per entry of ``envs`` running ``python ARGV``; wait until they end, one fails
        (the others are then killed) or ``deadline`` passes. Returns each rank's return code (None: the
        server ended before reporting it), the first rank that failed (None: none did) and whether the
        deadline passed."""
        codes: list[int | None] = [None] * len(envs)
        if not self.ready(deadline):
            return codes, None, time.perf_counter() >= deadline
        request = {"argv": list(argv), "env": [dict(e) for e in envs], "cwd": str(cwd) if cwd else None,
                   "logs": [str(p) for p in logs]}
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write((json.dumps(request) + "\n").encode())
        stdin.flush()
        msg = self._message(deadline)
        if msg is None or "pids" not in msg:
            return codes, None, time.perf_counter() >= deadline
        pids: list[int] = msg["pids"]
        timed_out = False
        failed: int | None = None
        while any(c is None for c in codes):
            msg = self._message(deadline)
            if msg is None:
                if timed_out or time.perf_counter() < deadline or self._proc.poll() is not None:
                    break  # the server ended, or did not report the killed ranks in time
                timed_out = True
                self._kill(pids, codes)
                deadline = time.perf_counter() + 10.0  # the server reaps them and reports
                continue
            rank, code = int(msg["rank"]), int(msg["returncode"])
            codes[rank] = code
            if code != 0 and failed is None and not timed_out:
                failed = rank
                self._kill(pids, codes)
        return codes, failed, timed_out

    @staticmethod
    def _kill(pids: Sequence[int], codes: Sequence[int | None]) -> None:
        for pid, code in zip(pids, codes):
            if code is None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    @property
    def returncode(self) -> int | None:
        """The server's exit code once it ended (None while it runs)."""
        return self._proc.poll()

    def close(self) -> None:
        """Stop the server and wait for it: at the end of its input it kills ranks still running and exits;
        one still importing is killed."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self.import_s is None:
            self._proc.kill()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._err is not None:
            self._err.close()

    def __enter__(self) -> RankServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- server side ------------------------------------------------------------------------------------


def _rank(argv: list[str], env: dict[str, str], cwd: str | None, log: str) -> None:
    """In the forked child: become ``python ARGV`` with ``env`` in ``cwd``, output to ``log``; never returns."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        code = 0
        try:
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]
                sys.path[0] = os.getcwd()
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - reported like an uncaught exception, then the exit code
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve(preload: Sequence[str]) -> None:
    out: IO[bytes] = sys.stdout.buffer

    def say(msg: dict[str, Any]) -> None:
        out.write((json.dumps(msg) + "\n").encode())
        out.flush()

    started = time.perf_counter()
    _preload(preload)
    say({"ready": time.perf_counter() - started})
    running: dict[int, int] = {}  # pid -> rank
    try:
        for line in sys.stdin.buffer:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            running.clear()
            for rank, (env, log) in enumerate(zip(request["env"], request["logs"])):
                pid = os.fork()
                if pid == 0:
                    _rank(request["argv"], env, request["cwd"], log)
                running[pid] = rank
            say({"pids": list(running)})
            while running:
                pid, status = os.wait()
                if pid in running:
                    say({"rank": running.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})
    finally:
        for pid in running:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


if __name__ == "__main__":
    _serve(sys.argv[1:])
