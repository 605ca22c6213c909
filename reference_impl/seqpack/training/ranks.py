"""Local CPU ranks (gloo): starting them without ``torchrun``, and importing Megatron-Core in them.

:func:`launch_ranks` starts ``nproc`` Python processes with the environment ``torchrun`` would
give them (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), so ``torch.distributed.init_process_group("gloo")`` works unchanged, and waits
for them with a time limit; when one fails or the time runs out the others are stopped (a rank
left alone would wait in a collective forever). Compared with ``torchrun`` this saves the agent
process, which imports torch too. Where it can (Linux), it forks the ranks from one warmed process
(:class:`~seqpack.training.rank_server.RankServer`) that imported torch (and, on request,
Megatron-Core) once, instead of starting ``nproc`` interpreters that each import them; a caller
can start that server early, so its imports run while the caller works, and pass it in.

:func:`import_megatron_core` imports Megatron-Core's parallel state and ``PackedSeqParams`` for
ranks that use nothing else of it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqpack.training.rank_server import RankServer, fork_available

__all__ = ["LaunchOutcome", "RANK_VARIABLES", "free_port", "import_megatron_core", "launch_ranks",
           "megatron_core_import_seconds", "rank_environment", "reserved_port"]

#: The variables ``torchrun`` sets per launch or per rank (left out when a server's environment is compared).
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (another program may take it before you bind it:
    prefer :func:`reserved_port`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def reserved_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 held for the block: bound by a socket that listens on nothing.

    The socket is bound without ``SO_REUSEADDR`` and gets the option afterwards, so while the block
    runs no other program's free-port probe (a plain ``bind``, :func:`free_port` in another process,
    another launch) is given the port, while a server that binds it with ``SO_REUSEADDR`` and listens
    (torch's TCPStore, which the ranks' ``MASTER_PORT`` rendezvous starts; uvicorn) can. Concurrent
    launches on one machine (two test workers, two smoke runs) therefore never share a port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        yield int(s.getsockname()[1])


@dataclass
class LaunchOutcome:
    """How a launch ended: ``returncode`` (0 when every rank succeeded, else the first failing rank's),
    ``timed_out``, the last lines of the first failing rank's output, its log, and the wall time."""

    returncode: int
    timed_out: bool
    tail: list[str]
    log: Path | None
    wall_s: float


def rank_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every rank of a launch shares, before the variables of :data:`RANK_VARIABLES`: this
    process's, ``OMP_NUM_THREADS=1``, then ``env``, with the folder seqpack is imported from first on ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[2])
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    base["PYTHONPATH"] = os.pathsep.join([root, base.get("PYTHONPATH", "")])
    return {k: v for k, v in base.items() if k not in RANK_VARIABLES}


def launch_ranks(args: Sequence[str], nproc: int, *, timeout: float, log_dir: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 server: RankServer | None = None, preload: Sequence[str] = ("torch",)) -> LaunchOutcome:
    """Run ``python ARGS`` as ``nproc`` local ranks; rank ``r`` writes its output to ``log_dir/rank{r}.log``.

    The environment is :func:`rank_environment` of ``env`` plus the rank variables. The ranks are forked
    from ``server`` when it serves that environment, else from a server started for this launch that
    imports ``preload`` (names of :data:`~seqpack.training.rank_server.PRELOADS`; empty: none), or,
    where forking is not available, started as fresh interpreters. ``timeout`` counts from the call,
    a server's imports included. ``MASTER_PORT`` is a :func:`reserved_port`, held until the ranks end.
    """
    with reserved_port() as port:  # held until the ranks ended: no concurrent launch gets it
        return _launch(args, nproc, port, timeout=timeout, log_dir=log_dir, env=env, cwd=cwd, server=server,
                       preload=preload)


def _launch(args: Sequence[str], nproc: int, port: int, *, timeout: float, log_dir: Path,
            env: dict[str, str] | None, cwd: Path | None, server: RankServer | None,
            preload: Sequence[str]) -> LaunchOutcome:
    started = time.perf_counter()
    deadline = started + timeout
    base = rank_environment(env)
    shared = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nproc),
              "LOCAL_WORLD_SIZE": str(nproc)}
    envs = [{**base, **shared, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in range(nproc)]
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = [log_dir / f"rank{r}.log" for r in range(nproc)]
    if server is not None and server.serves(base):
        codes, failed, timed_out = server.launch(args, envs, logs, cwd, deadline)
    elif preload and fork_available():
        with RankServer(base, preload, log=log_dir / "server.log") as server:
            codes, failed, timed_out = server.launch(args, envs, logs, cwd, deadline)
    else:
        server = None
        codes, failed, timed_out = _spawn(args, envs, logs, cwd, deadline)
    if failed is None:
        failed = next((r for r, c in enumerate(codes) if c != 0), None)
    if failed is None:
        return LaunchOutcome(0, False, [], None, time.perf_counter() - started)
    log: Path | None = logs[failed]
    code = codes[failed]
    if code is None and server is not None:  # the server ended (its imports failed, say) before the rank did
        code, log = server.returncode, server.log
    text = log.read_text(errors="replace").strip() if log is not None and log.exists() else ""
    return LaunchOutcome(code if code is not None else -9, timed_out, text.splitlines()[-3:], log,
                         time.perf_counter() - started)


def _spawn(args: Sequence[str], envs: Sequence[dict[str, str]], logs: Sequence[Path], cwd: Path | None,
           deadline: float) -> tuple[list[int | None], int | None, bool]:
    """The ranks as fresh interpreters: return codes, the first failing rank seen, whether the deadline passed."""
    procs = []
    for env, path in zip(envs, logs):
        with open(path, "wb") as log:
            procs.append(subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    failed: int | None = None
    timed_out = False
    try:
        while any(p.poll() is None for p in procs):
            failed = next((r for r, p in enumerate(procs) if p.returncode not in (None, 0)), None)
            if failed is not None:
                break
            if time.perf_counter() > deadline:
                timed_out = True
                break
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return [p.returncode for p in procs], failed, timed_out


_MEGATRON_CORE: list[Any] = []  # (parallel_state, PackedSeqParams, seconds the first import took)


def import_megatron_core() -> tuple[Any, Any]:
    """``megatron.core.parallel_state`` and ``PackedSeqParams``, imported without compiling fused kernels.

    Importing ``megatron.core`` decorates its fused kernels with ``torch.compile``, which loads
    TorchDynamo and Inductor (about 1.5 s of CPU per process). Ranks that only use the parallel
    state and ``PackedSeqParams`` never call those kernels, so the decorator is a no-op during the
    import, as Megatron-Core's own ``disable_jit_fuser()`` makes it (``megatron.core.jit.jit_fuser``
    then stays a no-op in the process). Call it before anything else imports Megatron-Core. What
    the first call cost is :func:`megatron_core_import_seconds` (in a rank forked from a server that
    imported it, the server's cost).
    """
    if _MEGATRON_CORE:
        return _MEGATRON_CORE[0], _MEGATRON_CORE[1]
    import torch

    started = time.perf_counter()
    compile_ = torch.compile

    def no_compile(model: Any = None, **_: Any) -> Any:
        return model if model is not None else (lambda fn: fn)

    torch.compile = no_compile  # type: ignore[assignment]
    try:
        from megatron.core import parallel_state
        from megatron.core.packed_seq_params import PackedSeqParams
    finally:
        torch.compile = compile_  # type: ignore[assignment]
    _MEGATRON_CORE[:] = [parallel_state, PackedSeqParams, time.perf_counter() - started]
    return parallel_state, PackedSeqParams


def megatron_core_import_seconds() -> float | None:
    """Wall seconds :func:`import_megatron_core` took in this process (or the server it was forked from);
    None before it ran."""
    return float(_MEGATRON_CORE[2]) if _MEGATRON_CORE else None
