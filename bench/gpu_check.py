#!/usr/bin/env python
"""GPU check of the training glue against Megatron-Core + Transformer Engine (one GPU, < 5 minutes).

Usage (repository root):  python bench/gpu_check.py [--json bench/results/gpu_check.json] [--seed 0]

Needs a CUDA GPU, megatron-core and transformer-engine[pytorch] (built for the machine's CUDA; e.g.
``pip install --no-build-isolation "transformer-engine[pytorch]>=2.0"``). Without them it prints
what is missing, writes ``{"skipped": true, ...}`` and exits 0.

Checks, printed as a table and written as JSON:
1. TE's ``thd_get_partitioned_indices`` == our ``thd_partition_indices`` (exact, several layouts, CP 1-4);
2. Megatron-Core GPT (TE spec, bf16) on a packed row with our ``PackedSeqParams``: per-sequence mean
   losses equal each sequence run alone (bf16 tolerance), while the same row without
   ``PackedSeqParams`` (causal over the whole row) does not;
3. perturbing the first sequence leaves later sequences' logits unchanged with ``PackedSeqParams``
   and moves them without.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTITION_CASES = [
    ([0, 8, 12, 16], 2),
    ([0, 4, 12, 24], 2),
    ([0, 8, 24], 4),
    ([0, 12, 24, 36, 36, 48], 3),
    ([0, 16, 48, 64], 4),
    ([0, 6, 10], 1),  # TE wants an even total even for CP=1
]
LOSS_TOL = 0.05  # absolute, on per-sequence mean losses (bf16 model)


def _batch(seed: int, vocab: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths, prompts = [37, 120, 9, 64, 201], [5, 30, 0, 10, 50]
    rows = []
    for n, k in zip(lengths, prompts):
        rows.append(
            {
                "tokens": torch.randint(0, vocab, (n,), generator=gen).tolist(),
                "labels": torch.randint(0, vocab, (n,), generator=gen).tolist(),
                "loss_mask": [0.0] * k + [1.0] * (n - k),
            }
        )
    try:
        from seqpack.packing.thd import build_thd_batch
    except ImportError:  # THD builder not merged yet: the tests' hand builder follows the same contract
        from tests.distributed.thd_helpers import make_thd_batch

        return make_thd_batch(rows, 8)
    return build_thd_batch(rows, pad_seq_to_mult=8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "gpu_check.json")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()

    from seqpack.training.te_backend import te_status

    status = te_status()
    print(
        f"torch {status.torch}  cuda={status.cuda} ({status.device})  "
        f"TE={status.transformer_engine}  mcore={status.megatron_core}"
    )
    report: dict = {"status": status.to_dict()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    if not status.ready:
        print("skipped: needs " + "; ".join(status.missing))
        report["skipped"] = True
        args.json.write_text(json.dumps(report, indent=2))
        return 0

    from seqpack.training.te_backend import (
        build_mcore_gpt,
        check_mcore_packing,
        compare_partition_indices,
        init_single_gpu,
    )

    report["skipped"] = False
    partition = compare_partition_indices(PARTITION_CASES)
    report["partition"] = partition
    init_single_gpu(args.seed)
    vocab = 1024
    batch = _batch(args.seed, vocab)
    model = build_mcore_gpt(vocab_size=vocab, max_sequence_length=int(batch["tokens"].shape[1]))
    packing = check_mcore_packing(model, batch)
    report["packing"] = packing

    checks = {
        "TE partition indices == ours": all(r["equal"] for r in partition),
        f"packed == alone (max |d mean loss| < {LOSS_TOL})": packing["packed_vs_alone_max_abs"] < LOSS_TOL,
        "no PackedSeqParams differs (control)": packing["no_params_vs_alone_max_abs"]
        > 2 * packing["packed_vs_alone_max_abs"],
        "no leak with PackedSeqParams": packing["leak_with_params"] <= 0.1 * packing["leak_without_params"],
        "leak without PackedSeqParams (control)": packing["leak_without_params"] > 0,
    }
    report["checks"] = checks
    report["wall_s"] = time.perf_counter() - started
    width = max(map(len, checks))
    print(f"{'check':<{width}}  result")
    for name, ok in checks.items():
        print(f"{name:<{width}}  {'pass' if ok else 'FAIL'}")
    print(
        f"packed vs alone {packing['packed_vs_alone_max_abs']:.4g}, "
        f"without params {packing['no_params_vs_alone_max_abs']:.4g}; "
        f"leak {packing['leak_with_params']:.3g} vs {packing['leak_without_params']:.3g}; {report['wall_s']:.1f} s"
    )
    args.json.write_text(json.dumps(report, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
