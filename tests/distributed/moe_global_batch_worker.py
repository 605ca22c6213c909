"""Global-batch step of an MoE + MTP model under context parallelism (gloo, one process per CP rank).

Run as ``python -m torch.distributed.run --nproc_per_node 2 tests/distributed/moe_global_batch_worker.py
--out DIR`` from the repository root (CP = 2, DP = 1). Every rank runs two training steps of the same
global batches through :func:`~seqpack.training.global_batch_step.run_micro_batches` and, in
the same process, the CP=1 reference: every whole pack through ``micro_batch_terms`` on a one-rank
layout. It writes ``DIR/rank<R>.json`` with the logged auxiliary losses of both and the largest
gradient difference; the assertions live in tests/test_moe_mtp_distributed.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seqpack.packing.global_batch.samples import make_unpacked_sample  # noqa: E402
from seqpack.packing.global_batch.wrap import GlobalBatchPacker, ParallelLayout  # noqa: E402
from seqpack.training.global_batch_step import micro_batch_terms, run_micro_batches  # noqa: E402
from seqpack.training.model import TinyGPT, TinyGPTConfig  # noqa: E402
from seqpack.training.moe import MoEConfig  # noqa: E402
from seqpack.training.moe_mtp_step import average_aux_logs  # noqa: E402
from seqpack.training.mtp import MTPConfig, with_mtp_streams  # noqa: E402

CP = 2
CAPACITY = 160  # tokens per pack
STEP_LENGTHS = ((70, 45, 30, 81, 52), (23, 97, 61, 38, 74, 12))


def config(n: int) -> dict:
    return {
        "model": {"seq_length": 128, "context_parallel_size": CP, "max_seqlen_per_dp_cp_rank": CAPACITY // CP,
                  "calculate_per_token_loss": True, "sequence_packing_scheduler": "dp_balanced"},
        "dataset": {"seq_length": 128, "enable_global_batch_packing": True, "dataloader_type": "single",
                    "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": n},
        "dist": {"world_size": CP},
    }


def samples(lengths: tuple[int, ...], multiple: int, seed: int) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(lengths):
        toks = torch.randint(1, 64, (n + 1,), generator=gen)
        prompt = n // 3
        mask = torch.cat([torch.zeros(prompt), torch.ones(n - prompt)])
        out.append(make_unpacked_sample(toks[:-1], toks[1:], mask, pad_seq_to_mult=multiple, row_index=i))
    return out


def reference(model: TinyGPT, batches: list[dict]) -> tuple[dict, dict, float]:
    """CP=1: every whole pack on one rank; the aux averages, the gradients (per supervised token) and the loss sum."""
    one = ParallelLayout()
    model.zero_grad(set_to_none=True)
    logs, supervised, loss_sum = [], 0.0, 0.0
    for batch in batches:
        batch = with_mtp_streams(batch, model.config.mtp.num_layers)
        lm, count, extra, log = micro_batch_terms(model, batch, one)
        (lm + extra).backward()
        logs.append(log)
        supervised += float(count)
        loss_sum += float(lm.detach())
    grads = {n: p.grad.detach().clone() / supervised for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return average_aux_logs(logs), grads, loss_sum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(context_parallel_size=CP)
    layout = ParallelLayout.from_megatron()
    model = TinyGPT(TinyGPTConfig(hidden_size=16, num_heads=2, moe=MoEConfig(num_experts=4, topk=2,
                                                                           expert_hidden_size=8),
                                  mtp=MTPConfig(num_layers=1, loss_scaling_factor=0.3)), seed=9)
    report: dict = {"rank": dist.get_rank(), "steps": []}
    for s, lengths in enumerate(STEP_LENGTHS):
        packer = GlobalBatchPacker(config(len(lengths)), layout=layout)
        step = packer.wrap(iter(samples(lengths, packer.settings.pad_seq_to_mult, seed=s)), len(lengths))
        result = run_micro_batches(model, step, backward=True)
        ref_aux, ref_grads, ref_loss = reference(model, step.batches)
        grad_diff = max(float((result.grads[n] - ref_grads[n]).abs().max()) for n in ref_grads)
        report["steps"].append({
            "num_micro_batches": result.num_micro_batches,
            "widths": [int(b["tokens"].shape[1]) for b in step.batches],
            "aux": result.aux, "ref_aux": ref_aux, "grad_diff": grad_diff,
            "loss_sum": result.loss_sum, "ref_loss_sum": ref_loss,
            "local_real_tokens": [float((~b["padding_mask"][0]).sum()) for b in step.batches],
        })
    (args.out / f"rank{dist.get_rank()}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
