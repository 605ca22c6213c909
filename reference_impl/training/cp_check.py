"""Context-parallel run of saved canonical batches, one process per CP rank (gloo on CPU).

:func:`launch` starts the ranks (``python -m reference_impl.training.cp_check --job JOB.pt --out
RESULT.pt`` with the ``RANK`` / ``WORLD_SIZE`` / ``MASTER_*`` environment ``torchrun`` would set)
and waits for them, with a time limit. One launch serves many jobs: the smoke test of every
packing path puts its batches into one ``JOB.pt``, so the ranks pay for starting Python, torch
and Megatron-Core once per run, not once per path.

``JOB.pt`` (written with ``torch.save``, read with ``weights_only=True``) is
``{"jobs": [job, ...]}``; a job holds canonical batches, the model config and seed, the dtype and
the loss-reduction settings. For every batch each rank builds a real Megatron-Core
``PackedSeqParams`` (:func:`~reference_impl.training.packed_seq_params.to_packed_seq_params`),
takes the boundaries from it, slices its ``2*CP``-chunk share
(:func:`~reference_impl.training.context_parallel.slice_thd_batch_for_cp`) and runs
:func:`~reference_impl.training.cp_step.cp_step` (Megatron-Core parallel state groups, K/V
all-gather). Rank 0 writes ``RESULT.pt``: per job and batch the reduced objective, the global
per-sequence loss sums and the reduced gradients (or the error message of a batch that cannot be
split), plus what importing Megatron-Core cost and which ``PackedSeqParams`` class was used.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

__all__ = ["LaunchOutcome", "launch", "main"]


def _run_job(job: dict[str, Any], cp: int, rank: int, groups: tuple[Any, Any]) -> list[dict[str, Any]]:
    from reference_impl.errors import SeqpackError
    from reference_impl.training.context_parallel import slice_thd_batch_for_cp
    from reference_impl.training.cp_step import cp_step
    from reference_impl.training.model import TinyGPT, TinyGPTConfig
    from reference_impl.training.packed_seq_params import batch_with_params, to_packed_seq_params

    group, grad_group = groups
    model = TinyGPT(TinyGPTConfig(**job["model_config"]), seed=int(job["seed"]))
    if job.get("dtype") == "float32":
        model = model.float()
    results = []
    for batch in job["batches"]:
        try:
            view = batch_with_params(batch, to_packed_seq_params(batch))
            local = slice_thd_batch_for_cp(view, cp, rank)
        except SeqpackError as exc:
            results.append({"error": str(exc)})
            continue
        res = cp_step(
            model, local, cp_size=cp, cp_rank=rank, group=group, grad_group=grad_group,
            calculate_per_token_loss=bool(job["calculate_per_token_loss"]),
            average_in_collective=bool(job["average_in_collective"]),
        )
        results.append({
            "objective": res.reduction.objective,
            "token_mean": res.reduction.token_mean,
            "sequence_sums": [s.loss_sum for s in res.sequences],
            "grads": res.grads,
        })
    return results


def _import_megatron_core() -> tuple[Any, Any]:
    """``parallel_state`` and ``PackedSeqParams`` from Megatron-Core.

    Importing ``megatron.core`` decorates its fused kernels with ``torch.compile``, which loads
    TorchDynamo and Inductor (about 1.5 s of CPU per rank). The ranks never call those kernels, so
    the decorator is a no-op during the import, as Megatron-Core's own ``disable_jit_fuser()``
    makes it (``megatron.core.jit.jit_fuser`` then stays a no-op in these processes).
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


def main(argv: list[str] | None = None) -> None:
    """Worker entry point (one process per CP rank)."""
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description="context-parallel check worker")
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    payload: dict[str, Any] = torch.load(args.job, weights_only=True)
    dist.init_process_group("gloo")
    started = time.perf_counter()
    parallel_state, PackedSeqParams = _import_megatron_core()  # noqa: N806 (a class)
    import_s = time.perf_counter() - started
    cp = dist.get_world_size()
    parallel_state.initialize_model_parallel(context_parallel_size=cp)
    try:
        groups = (parallel_state.get_context_parallel_group(),
                  parallel_state.get_data_parallel_group(with_context_parallel=True))
        rank = parallel_state.get_context_parallel_rank()
        jobs = [_run_job(job, cp, rank, groups) for job in payload["jobs"]]
        if rank == 0:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"cp": cp, "jobs": jobs, "megatron_core_import_s": import_s,
                        "packed_seq_params": f"{PackedSeqParams.__module__}.{PackedSeqParams.__qualname__}"}, args.out)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LaunchOutcome:
    """How a launch ended: ``returncode`` (0 when every rank succeeded), ``timed_out``, the last lines
    of the first failing rank's output and the launch's wall time."""

    returncode: int
    timed_out: bool
    tail: list[str]
    wall_s: float


def launch(job: Path, out: Path, cp: int, timeout: float) -> LaunchOutcome:
    """Run :func:`main` on ``cp`` local processes (gloo) for ``job``; stop every rank when one fails
    or the time runs out (a rank left alone would wait in a collective forever)."""
    root = str(Path(__file__).resolve().parents[2])
    base = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
            "WORLD_SIZE": str(cp), "LOCAL_WORLD_SIZE": str(cp),
            "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    logs = [out.with_name(f"{out.stem}.rank{r}.log") for r in range(cp)]
    procs = []
    for rank in range(cp):
        with open(logs[rank], "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "reference_impl.training.cp_check", "--job", str(job), "--out", str(out)],
                env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            ))
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
    code = 0 if failed is None else procs[failed].returncode
    tail = [] if failed is None else logs[failed].read_text(errors="replace").strip().splitlines()[-3:]
    return LaunchOutcome(code, timed_out, tail, time.perf_counter() - started)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
