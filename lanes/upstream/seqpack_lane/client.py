"""Talk to the upstream worker from seqpack's side: start it once, send requests, read answers.

seqpack never imports the upstream packages; it starts ``worker.py`` in the lane's interpreter and
exchanges JSON lines with it, with bulk data in files under :attr:`UpstreamLane.workdir`. One
worker serves a whole test session (its imports take 10-15 s). A request that fails upstream comes
back as :class:`UpstreamError` carrying the upstream exception's type and message; a worker that
dies or does not answer in time is stopped and restarted on the next call.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from seqpack_lane import build, pins

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"
OPS = HERE / "ops"


def lane_environment(workdir: Path) -> dict[str, str]:
    """The environment a process in the lane's interpreter runs with: this process's, less its Python
    and venv variables, one thread per library, offline Hugging Face with its home in ``workdir``,
    no CUDA, a large ``WORLD_SIZE`` (``$SEQPACK_LANE_WORLD_SIZE``) and a fixed hash seed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", HF_HOME=str(Path(workdir) / "hf-home"),
               WORLD_SIZE=env.get("SEQPACK_LANE_WORLD_SIZE", "100000"), PYTHONDONTWRITEBYTECODE="1",
               CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    return env


class UpstreamError(RuntimeError):
    """An op raised in the upstream worker: ``type`` and ``message`` are the upstream exception's."""

    def __init__(self, op: str, error: dict[str, Any]) -> None:
        self.op = op
        self.type = str(error.get("type", ""))
        self.message = str(error.get("message", ""))
        self.traceback = str(error.get("traceback", ""))
        super().__init__(f"{op}: {self.type}: {self.message}")


class UpstreamLane:
    """A running upstream worker (started on first use)."""

    def __init__(self, venv: Path | None = None, *, workdir: Path | None = None, start_timeout: float = 300.0) -> None:
        self.status = build.status(venv)
        if not self.status.ready:
            raise build.LaneError(self.status.reason)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="seqpack-lane-"))
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._next_id = 0
        self._lock = threading.Lock()
        self.ops: list[str] = []
        self.calls = 0

    @property
    def log_path(self) -> Path:
        """Where the worker's stderr goes."""
        return self.workdir / "worker.log"

    def _env(self) -> dict[str, str]:
        return lane_environment(self.workdir)

    def _start(self) -> None:
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen([str(self.status.python), "-u", str(WORKER), str(OPS)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=self._env(), cwd=self.workdir)
        hello = self._read(0, self.start_timeout, "start")
        self.ops = hello["ops"]

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def _read(self, want_id: int, timeout: float, op: str) -> Any:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._stop()
                    raise build.LaneError(f"upstream worker: no answer to {op} within {timeout:g} s; "
                                          f"log: {self._log_tail()}")
                line = self._proc.stdout.readline()
                if not line:
                    code = self._proc.wait()
                    self._stop()
                    raise build.LaneError(f"upstream worker exited ({code}) during {op}; log: {self._log_tail()}")
                answer = json.loads(line)
                if answer.get("id") != want_id:
                    continue
                if not answer.get("ok"):
                    raise UpstreamError(op, answer.get("error") or {})
                return answer.get("result")

    def call(self, op: str, *, timeout: float = 600.0, **args: Any) -> Any:
        """Run ``op`` (``module.name``) in the worker with JSON-able ``args``; its result, or :class:`UpstreamError`."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._start()
            self._next_id += 1
            request = {"id": self._next_id, "op": op, "args": args}
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            self.calls += 1
            return self._read(self._next_id, timeout, op)

    def path(self, name: str) -> Path:
        """A fresh path under the exchange directory (its parent exists)."""
        target = self.workdir / "exchange" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def close(self) -> None:
        """Stop the worker and remove the exchange directory this object created."""
        self._stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "UpstreamLane":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["UpstreamLane", "UpstreamError", "pins"]
