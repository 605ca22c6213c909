"""Global-batch packing worker for tests/test_global_batch_distributed.py (gloo on CPU, one process per rank).

Run as ``python -m torch.distributed.run --nproc_per_node N tests/distributed/global_batch_worker.py
--data ROWS.jsonl --cp CP --out DIR`` from the repository root; DP = N / CP. Megatron-Core's
parallel state provides the groups. Every rank writes ``DIR/rank<R>.json`` with what it saw:

* ``steps``: for each scheduler (``dp_balanced``, ``balanced``) and step, the schedule, this rank's
  packs (sample ids, dataset rows, content hashes of the packed sequences), the hashes and rows of the
  samples this rank loaded, pack widths and this rank's token counts after the CP split, the FLOPs
  sums, and the packed loss / gradients against the same samples run unpacked in this process;
* ``cases``: the inputs Megatron-Core asserts on (pack 0 must split; too few samples for the ranks),
  an oversize sample and a malformed sample on one rank.

The assertions live in the test.
"""

from __future__ import annotations

import argparse
import datetime
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

from seqpack.data import ByteTokenizer  # noqa: E402
from seqpack.core.errors import SeqpackError  # noqa: E402
from seqpack.packing.global_batch.dataset import GlobalBatchSFTDataset, build_global_batch_loader  # noqa: E402
from seqpack.packing.global_batch.samples import make_unpacked_sample  # noqa: E402
from seqpack.training.global_batch_step import train_step  # noqa: E402
from seqpack.packing.global_batch.wrap import GlobalBatchPacker, ParallelLayout  # noqa: E402
from seqpack.packing.sft_dataset import SFTJsonlDataset  # noqa: E402
from seqpack.training.model import TinyGPT, TinyGPTConfig  # noqa: E402
from seqpack.training.ranks import import_megatron_core  # noqa: E402
from tests.distributed.global_batch_data import (  # noqa: E402
    packed_keys,
    sample_key,
    unpacked_reference,
)

SEQ_LENGTH = 128
CAPACITY = 192  # tokens per pack (max_seqlen_per_dp_cp_rank * CP)
GBS = 16
STEPS = 2
LR = 0.05


def config(world: int, cp: int, scheduler: str, gbs: int = GBS) -> dict:
    return {
        "model": {"seq_length": SEQ_LENGTH, "context_parallel_size": cp, "max_seqlen_per_dp_cp_rank": CAPACITY // cp,
                  "calculate_per_token_loss": True, "sequence_packing_scheduler": scheduler},
        "dataset": {"seq_length": SEQ_LENGTH, "enable_global_batch_packing": True, "dataloader_type": "single",
                    "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": gbs},
        "dist": {"world_size": world},
    }


class Recording:
    """Iterator wrapper remembering the samples this rank loaded (hash and row of each)."""

    def __init__(self, it):
        self.it = it
        self.loaded: list[tuple[str, int]] = []

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.it)
        for s in item if isinstance(item, list) else [item]:
            self.loaded.append((sample_key(s), int(s["row_index"][0]) if "row_index" in s else -1))
        return item


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def reference(model: TinyGPT, ds: SFTJsonlDataset, rows) -> tuple[float, float, dict]:
    return unpacked_reference(model, (ds[r] for r in rows))


def sgd(model: TinyGPT) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad


def record_step(result, ref: tuple[float, float, dict], loaded: list[tuple[str, int]]) -> dict:
    step = result.step
    ref_sum, ref_count, ref_grads = ref
    return {
        "schedule": step.schedule.to_dict(),
        "num_micro_batches": result.num_micro_batches,
        "widths": [int(b["tokens"].shape[1]) for b in step.batches],
        "local_tokens": result.local_tokens,
        "sample_ids": result.sample_ids,
        "row_indices": [list(b["row_indices"]) for b in step.batches],
        "packed_keys": [packed_keys(b) for b in step.batches],
        "loaded_keys": [k for k, _ in loaded],
        "loaded_rows": [r for _, r in loaded],
        "seqlen_sum": result.seqlen_sum,
        "seqlen_squared_sum": result.seqlen_squared_sum,
        "seqlen_sum_type": type(result.seqlen_sum).__name__,
        "loss": result.loss,
        "ref_loss": ref_sum / ref_count,
        "token_count": result.token_count,
        "ref_token_count": ref_count,
        "loss_diff": abs(result.loss - ref_sum / ref_count),
        "grad_diff": max_diff(result.grads, {k: g / ref_count for k, g in ref_grads.items()}),
    }


def unpacked(ds: SFTJsonlDataset, row: int, multiple: int, pad_id: int) -> dict:
    ex = ds[row]
    return make_unpacked_sample(ex["tokens"], ex["labels"], ex["loss_mask"], pad_seq_to_mult=multiple,
                                pad_token_id=pad_id, row_index=row)


def run_case(model, packer, feeds, ds, rows) -> dict:
    """One train step on hand-made per-rank feeds; compare with the unpacked reference of ``rows``."""
    try:
        result = train_step(model, packer, iter(feeds))
    except SeqpackError as exc:
        return {"error": str(exc), "error_type": type(exc).__name__, "rule_id": exc.rule_id}
    out = record_step(result, reference(model, ds, rows), [])
    out["adjustments"] = list(result.step.schedule.adjustments)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
    parallel_state, _ = import_megatron_core()  # without compiling fused kernels it never calls

    world, cp = dist.get_world_size(), args.cp
    parallel_state.initialize_model_parallel(context_parallel_size=cp)
    layout = ParallelLayout.from_megatron()
    init_s = time.perf_counter() - started
    tok = ByteTokenizer()
    ds = SFTJsonlDataset(args.data, seq_length=SEQ_LENGTH)
    model = TinyGPT(TinyGPTConfig(vocab_size=tok.vocab_size, hidden_size=16, num_heads=2, ffn_hidden_size=32),
                    seed=11)
    report: dict = {
        "rank": dist.get_rank(), "world": world, "layout": layout.to_dict(),
        "dcp_group_rank": dist.get_rank(group=layout.dp_cp_group), "init_s": init_s, "steps": [], "cases": {},
    }

    for scheduler in ("dp_balanced", "balanced"):
        cfg = config(world, cp, scheduler)
        dataset = GlobalBatchSFTDataset(args.data, seq_length=SEQ_LENGTH)
        feed = Recording(iter(build_global_batch_loader(cfg, dataset, dp_rank=layout.dp_rank)))
        packer = GlobalBatchPacker(cfg, pad_token_id=tok.pad_id)
        for s in range(STEPS):
            before = len(feed.loaded)
            result = train_step(model, packer, feed)
            rows = range(s * GBS, (s + 1) * GBS)  # the single sampler's positions of this step
            entry = record_step(result, reference(model, ds, rows), feed.loaded[before:])
            entry.update(scheduler=scheduler, step=s)
            report["steps"].append(entry)
            sgd(model)

    # -- the inputs Megatron-Core asserts on, and bad inputs --------------------------------------
    dp = layout.dp_size
    multiple = packer.settings.pad_seq_to_mult
    lengths = [len(ds[r]["tokens"]) for r in range(len(ds))]
    short = [r for r in range(len(ds)) if lengths[r] <= CAPACITY // (2 * dp) - multiple][:dp]
    long = [r for r in range(len(ds)) if lengths[r] > CAPACITY // 2][: dp + 1]
    small_cfg = config(world, cp, "dp_balanced", gbs=dp)
    small = GlobalBatchPacker(small_cfg, pad_token_id=tok.pad_id)

    # every rank's sample fits one pack: DP packs are needed, so pack 0 must give samples away
    feeds = [[unpacked(ds, short[layout.dp_rank], multiple, tok.pad_id)]]
    report["cases"]["pack0_split"] = run_case(model, small, feeds, ds, short)

    # DP + 1 long samples (no two share a pack), rank 0 yields two of them in one next() call
    mine = [long[0], long[dp]] if layout.dp_rank == 0 else [long[layout.dp_rank]]
    feeds = [[unpacked(ds, r, multiple, tok.pad_id) for r in mine]]
    report["cases"]["too_few_samples"] = run_case(model, small, feeds, ds, long)

    # a sample longer than the pack capacity on the last DP rank
    if layout.dp_rank == dp - 1:
        n = CAPACITY + multiple
        feeds = [[make_unpacked_sample(torch.ones(n, dtype=torch.int64), torch.ones(n, dtype=torch.int64),
                                       torch.ones(n), pad_seq_to_mult=multiple, row_index=9999)]]
    else:
        feeds = [[unpacked(ds, short[layout.dp_rank], multiple, tok.pad_id)]]
    report["cases"]["oversize"] = run_case(model, small, feeds, ds, short)

    # a malformed sample (float64 loss mask) on DP rank 0 only: every rank must stop, none may hang
    bad = unpacked(ds, short[layout.dp_rank], multiple, tok.pad_id)
    if layout.dp_rank == 0:
        bad["loss_mask"] = bad["loss_mask"].double()
    report["cases"]["malformed"] = run_case(model, small, [[bad]], ds, short)

    # the groups still work after the failures: one more normal step
    report["cases"]["after_errors"] = run_case(
        model, small, [[unpacked(ds, short[layout.dp_rank], multiple, tok.pad_id)]], ds, short)

    report["param_checksum"] = float(sum(p.double().sum() for p in model.parameters()))
    report["total_s"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{dist.get_rank()}.json").write_text(json.dumps(report, indent=1))
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
