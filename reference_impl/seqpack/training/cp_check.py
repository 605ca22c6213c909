"""Context-parallel run of saved canonical batches, one process per CP rank (gloo on CPU).

:func:`launch` starts the ranks (``python -m seqpack.training.cp_check --job JOB.pt --out
RESULT.pt`` with the environment ``torchrun`` would set, :mod:`seqpack.training.ranks`)
and waits for them, with a time limit. One launch serves many jobs: the smoke test of every
packing path puts its batches into one ``JOB.pt``, so the ranks pay for starting Python, torch
and Megatron-Core once per run, not once per path; and the ranks are forked from one process
that imported torch and Megatron-Core (:func:`rank_server`, started by the smoke test before its
in-process checks, so the imports run meanwhile), so they are paid once, not once per rank.

``JOB.pt`` (written with ``torch.save``, read with ``weights_only=True``) is
``{"jobs": [job, ...]}``; a job holds canonical batches, the model config and seed, the dtype and
the loss-reduction settings. For every batch each rank builds a real Megatron-Core
``PackedSeqParams`` (:func:`~seqpack.training.packed_seq_params.to_packed_seq_params`),
takes the boundaries from it, slices its ``2*CP``-chunk share
(:func:`~seqpack.training.context_parallel.slice_thd_batch_for_cp`) and runs
:func:`~seqpack.training.cp_step.cp_step` (Megatron-Core parallel state groups, K/V
all-gather). Rank 0 writes ``RESULT.pt``: per job and batch the reduced objective, the global
per-sequence loss sums and the reduced gradients (or the error message of a batch that cannot be
split), plus what importing Megatron-Core cost and which ``PackedSeqParams`` class was used.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

from seqpack.training.rank_server import RankServer, fork_available
from seqpack.training.ranks import LaunchOutcome, launch_ranks, rank_environment

warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

__all__ = ["LaunchOutcome", "PRELOAD", "launch", "main", "rank_server"]

#: What the ranks import before their job: torch and Megatron-Core (:func:`~seqpack.training.ranks.import_megatron_core`).
PRELOAD = ("torch", "megatron_core")


def _run_job(job: dict[str, Any], cp: int, rank: int, groups: tuple[Any, Any]) -> list[dict[str, Any]]:
    from seqpack.core.errors import SeqpackError
    from seqpack.packing.visual_keys import VISUAL_KEYS
    from seqpack.training.context_parallel import slice_thd_batch_for_cp
    from seqpack.training.cp_step import cp_step
    from seqpack.training.model import TinyGPT, TinyGPTConfig
    from seqpack.training.packed_seq_params import batch_with_params, to_packed_seq_params

    group, grad_group = groups
    model = TinyGPT(TinyGPTConfig(**job["model_config"]), seed=int(job["seed"]))
    if job.get("dtype") == "float32":
        model = model.float()
    results = []
    for batch in job["batches"]:
        try:
            visual = tuple(k for k in VISUAL_KEYS if k in batch)  # a VLM row's images and M-RoPE ids
            view = batch_with_params(batch, to_packed_seq_params(batch), visual)
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


def main(argv: list[str] | None = None) -> None:
    """Worker entry point (one process per CP rank)."""
    import torch
    import torch.distributed as dist

    from seqpack.training.ranks import import_megatron_core, megatron_core_import_seconds

    parser = argparse.ArgumentParser(description="context-parallel check worker")
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    payload: dict[str, Any] = torch.load(args.job, weights_only=True)
    dist.init_process_group("gloo")
    parallel_state, PackedSeqParams = import_megatron_core()  # noqa: N806 (a class)
    import_s = megatron_core_import_seconds()  # paid once by the server the ranks were forked from
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


def launch(job: Path, out: Path, cp: int, timeout: float, server: RankServer | None = None) -> LaunchOutcome:
    """Run :func:`main` on ``cp`` local ranks (:func:`~seqpack.training.ranks.launch_ranks`) for ``job``,
    forked from ``server`` (see :func:`rank_server`) or from one started for this launch; the ranks' logs go
    next to ``out``."""
    return launch_ranks(["-m", "seqpack.training.cp_check", "--job", str(job), "--out", str(out)], cp,
                        timeout=timeout, log_dir=out.parent / f"{out.stem}_logs", server=server, preload=PRELOAD)


def rank_server(log: Path | None = None) -> RankServer | None:
    """A rank server for :func:`launch` with torch and Megatron-Core imported (started now: its imports run
    while the caller works), or None where ranks cannot be forked."""
    return RankServer(rank_environment(), PRELOAD, log=log) if fork_available() else None


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
