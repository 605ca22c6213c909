"""Context-parallel run of saved canonical batches, one process per CP rank (gloo on CPU).

Launched by the packing smoke test as::

    python -m torch.distributed.run --nproc_per_node CP -m reference_impl.training.cp_check \
        --job JOB.pt --out RESULT.pt

``JOB.pt`` (written by the parent with ``torch.save``, read with ``weights_only=True``) holds the
canonical batches, the model config and seed, and the loss-reduction settings. Every rank takes
its ``2*CP``-chunk slice of each batch (:func:`slice_thd_batch_for_cp`), runs
:func:`~reference_impl.training.cp_step.cp_step` (Megatron-Core parallel state groups, K/V
all-gather) and rank 0 writes, per batch, the reduced objective, the global per-sequence loss sums
and the reduced gradients to ``RESULT.pt``. A batch that cannot be split (alignment) is reported
with its error message instead of numbers.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")


def main(argv: list[str] | None = None) -> None:
    """Worker entry point (one process per CP rank)."""
    import torch
    import torch.distributed as dist

    from reference_impl.errors import SeqpackError
    from reference_impl.training.context_parallel import slice_thd_batch_for_cp
    from reference_impl.training.cp_step import cp_step
    from reference_impl.training.model import TinyGPT, TinyGPTConfig

    parser = argparse.ArgumentParser(description="context-parallel check worker")
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    job: dict[str, Any] = torch.load(args.job, weights_only=True)
    dist.init_process_group("gloo")
    from megatron.core import parallel_state

    cp = dist.get_world_size()
    parallel_state.initialize_model_parallel(context_parallel_size=cp)
    try:
        group = parallel_state.get_context_parallel_group()
        rank = parallel_state.get_context_parallel_rank()
        grad_group = parallel_state.get_data_parallel_group(with_context_parallel=True)
        model = TinyGPT(TinyGPTConfig(**job["model_config"]), seed=int(job["seed"]))
        if job.get("dtype") == "float32":
            model = model.float()
        results = []
        for batch in job["batches"]:
            try:
                local = slice_thd_batch_for_cp(batch, cp, rank)
            except SeqpackError as exc:
                results.append({"error": str(exc)})
                continue
            res = cp_step(
                model,
                local,
                cp_size=cp,
                cp_rank=rank,
                group=group,
                grad_group=grad_group,
                calculate_per_token_loss=bool(job["calculate_per_token_loss"]),
                average_in_collective=bool(job["average_in_collective"]),
            )
            results.append(
                {
                    "objective": res.reduction.objective,
                    "token_mean": res.reduction.token_mean,
                    "sequence_sums": [s.loss_sum for s in res.sequences],
                    "grads": res.grads,
                }
            )
        if rank == 0:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"cp": cp, "results": results}, args.out)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
