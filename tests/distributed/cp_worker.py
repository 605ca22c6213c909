"""Context-parallel worker for tests/test_cp_distributed.py (one process per CP rank, gloo on CPU).

Run as ``python -m torch.distributed.run --nproc_per_node 2 tests/distributed/cp_worker.py --out DIR``
from the repository root. Every rank writes ``DIR/rank<R>.json`` with the numbers the test asserts
on: max differences between the CP run and the CP=1 reference, for each loss-reduction setting and
for the negative controls. The assertions themselves live in the test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seqpack.core.alignment import derive_alignment  # noqa: E402
from seqpack.core.errors import AlignmentError  # noqa: E402
from seqpack.training.context_parallel import slice_thd_batch_for_cp  # noqa: E402
from seqpack.training.cp_step import cp_step  # noqa: E402
from seqpack.training.loss import reduction_weights, token_cross_entropy  # noqa: E402
from seqpack.training.model import TinyGPT  # noqa: E402
from seqpack.training.ranks import import_megatron_core  # noqa: E402
from seqpack.training.step import cp_rank_pieces, packed_forward, reference_step  # noqa: E402
from tests.distributed.thd_helpers import make_thd_batch, random_sequences  # noqa: E402

LENGTHS = [5, 11, 3, 7, 9]
PROMPTS = [2, 6, 0, 3, 1]


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def predicted_grads(model: TinyGPT, batch: dict, cp: int, per_token: bool, avg: bool) -> dict[str, torch.Tensor]:
    """Gradient the pure reduction predicts: d/dθ of sum_r w_r s_r, from one whole-row forward."""
    logits = packed_forward(model, batch)
    losses = token_cross_entropy(logits, batch["labels"][0], batch["loss_mask"][0])
    physical = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"])
    pieces = cp_rank_pieces(losses, batch["loss_mask"][0], physical, cp)
    weights = reduction_weights(
        [[float(n)] for _, n in pieces], calculate_per_token_loss=per_token, average_in_collective=avg
    )
    objective = sum(w[0] * s for w, (s, _) in zip(weights, pieces))
    names, params = zip(*model.named_parameters())
    return dict(zip(names, torch.autograd.grad(objective, params)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    dist.init_process_group("gloo")
    parallel_state, _ = import_megatron_core()  # without compiling fused kernels it never calls

    cp = dist.get_world_size()
    parallel_state.initialize_model_parallel(context_parallel_size=cp)
    group = parallel_state.get_context_parallel_group()
    rank = parallel_state.get_context_parallel_rank()
    grad_group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    init_s = time.perf_counter() - started

    seqs = random_sequences(LENGTHS, seed=args.seed, prompt=PROMPTS)
    batch = make_thd_batch(seqs, derive_alignment(cp=cp).pad_seq_to_mult, trailing_pad=2 * cp)
    model = TinyGPT(seed=args.seed)  # float64
    ref = reference_step(model, batch, keep_logits=True)
    ref_mean_grads = {k: g / ref.token_count for k, g in ref.grads.items()}
    local = slice_thd_batch_for_cp(batch, cp, rank)

    report: dict = {"rank": rank, "cp": cp, "init_s": init_s, "ref_loss": ref.loss, "settings": {}}
    for per_token in (True, False):
        for avg in (False, True):
            res = cp_step(
                model,
                local,
                cp_size=cp,
                cp_rank=rank,
                group=group,
                grad_group=grad_group,
                calculate_per_token_loss=per_token,
                average_in_collective=avg,
                keep_logits=True,
            )
            predicted = predicted_grads(model, batch, cp, per_token, avg)
            report["settings"][f"per_token={per_token},avg_in_collective={avg}"] = {
                "grad_vs_cp1": max_diff(res.grads, ref_mean_grads),
                "grad_vs_predicted": max_diff(res.grads, predicted),
                "objective": res.reduction.objective,
                "objective_vs_cp1_loss": abs(res.reduction.objective - ref.loss),
                "token_mean_vs_cp1_loss": abs(res.reduction.token_mean - ref.loss),
                "logits_vs_cp1": float((res.logits - ref.logits[res.positions]).abs().max()),
                "sequence_sum_vs_cp1": max(
                    abs(a.loss_sum - b.loss_sum) for a, b in zip(res.sequences, ref.sequences)
                ),
                "sequence_count_equal": [a.token_count for a in res.sequences]
                == [b.token_count for b in ref.sequences],
                "local_token_count": res.local_token_count,
                "rank_token_counts": [row[0] for row in res.reduction.token_counts],
                "weights": [row[0] for row in res.reduction.weights],
            }

    blind = cp_step(model, local, cp_size=cp, cp_rank=rank, group=group, exchange_kv=False, keep_logits=True)
    report["no_kv_exchange"] = {
        "grad_vs_cp1": max_diff(blind.grads, ref_mean_grads),
        "logits_vs_cp1": float((blind.logits - ref.logits[blind.positions]).abs().max()),
    }

    misaligned = make_thd_batch(seqs, 1)
    try:
        slice_thd_batch_for_cp(misaligned, cp, rank)
        report["misaligned_error"] = None
    except AlignmentError as exc:
        report["misaligned_error"] = str(exc)

    report["total_s"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(report, indent=2))
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
