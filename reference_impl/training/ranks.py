"""Local CPU ranks (gloo): starting them without ``torchrun``, and importing Megatron-Core in them.

:func:`launch_ranks` starts ``nproc`` Python processes with the environment ``torchrun`` would
give them (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), so ``torch.distributed.init_process_group("gloo")`` works unchanged, and waits
for them with a time limit; when one fails or the time runs out the others are stopped (a rank
left alone would wait in a collective forever). Compared with ``torchrun`` this saves the agent
process, which imports torch too.

:func:`import_megatron_core` imports Megatron-Core's parallel state and ``PackedSeqParams`` for
ranks that use nothing else of it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LaunchOutcome", "free_port", "import_megatron_core", "launch_ranks"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LaunchOutcome:
    """How a launch ended: ``returncode`` (0 when every rank succeeded, else the first failing rank's),
    ``timed_out``, the last lines of the first failing rank's output, its log, and the wall time."""

    returncode: int
    timed_out: bool
    tail: list[str]
    log: Path | None
    wall_s: float


def launch_ranks(args: Sequence[str], nproc: int, *, timeout: float, log_dir: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> LaunchOutcome:
    """Run ``python ARGS`` as ``nproc`` local ranks; rank ``r`` writes its output to ``log_dir/rank{r}.log``.

    The repository root joins ``PYTHONPATH`` and ``OMP_NUM_THREADS`` is 1 unless ``env`` says otherwise.
    """
    root = str(Path(__file__).resolve().parents[2])
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(nproc),
                 "LOCAL_WORLD_SIZE": str(nproc),
                 "PYTHONPATH": os.pathsep.join([root, base.get("PYTHONPATH", "")])})
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = [log_dir / f"rank{r}.log" for r in range(nproc)]
    started = time.perf_counter()
    procs = []
    for rank in range(nproc):
        with open(logs[rank], "wb") as log:
            procs.append(subprocess.Popen([sys.executable, *args], env={**base, "RANK": str(rank),
                                          "LOCAL_RANK": str(rank)}, cwd=cwd, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    deadline = started + timeout
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
    if failed is None:
        failed = next((r for r, p in enumerate(procs) if p.returncode != 0), None)
    if failed is None:
        return LaunchOutcome(0, False, [], None, time.perf_counter() - started)
    tail = logs[failed].read_text(errors="replace").strip().splitlines()[-3:]
    return LaunchOutcome(procs[failed].returncode, timed_out, tail, logs[failed], time.perf_counter() - started)


def import_megatron_core() -> tuple[Any, Any]:
    """``megatron.core.parallel_state`` and ``PackedSeqParams``, imported without compiling fused kernels.

    Importing ``megatron.core`` decorates its fused kernels with ``torch.compile``, which loads
    TorchDynamo and Inductor (about 1.5 s of CPU per process). Ranks that only use the parallel
    state and ``PackedSeqParams`` never call those kernels, so the decorator is a no-op during the
    import, as Megatron-Core's own ``disable_jit_fuser()`` makes it (``megatron.core.jit.jit_fuser``
    then stays a no-op in the process). Call it before anything else imports Megatron-Core.
    """
    import torch

    compile_ = torch.compile

    def no_compile(model: Any = None, **_: Any) -> Any:
        return model if model is not None else (lambda fn: fn)

    torch.compile = no_compile  # type: ignore[assignment]
    try:
        from megatron.core import parallel_state
        from megatron.core.packed_seq_params import PackedSeqParams
    finally:
        torch.compile = compile_  # type: ignore[assignment]
    return parallel_state, PackedSeqParams
