"""Benchmark: in-batch THD packing vs plain right-padding (BSHD) of the same micro-batches.

One command: ``python bench/bench_in_batch.py`` prints a table and writes
``bench/results/in_batch.json``. For each demo dataset (prompt/completion: lognormal lengths;
chat: bimodal lengths), each micro-batch size (4, 8) and each alignment multiple (1, and 8 =
TP4/CP2/SP), the rows are tokenized once up front, cut into consecutive micro-batches, and then
collated, side by side in one run, by

* ``in-batch``: :class:`~seqpack.packing.in_batch.InBatchPackingCollator` (one THD row per
  micro-batch; width = sum of aligned row lengths);
* ``right-pad``: the usual BSHD collate, every row padded to the micro-batch's longest row
  (rounded up to the alignment multiple, as CP/SP need), with an attention mask.

Reported per case: padding share (padding positions / all positions), median collate time and
real tokens per second of collate time, and the in-batch / right-pad ratios. A second table times
the whole lazy path (read + parse + tokenize + collate) through ``build_in_batch_loader`` with no
workers.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from seqpack.core.alignment import round_up  # noqa: E402
from seqpack.config import load_config  # noqa: E402
from seqpack.data import demo_path  # noqa: E402
from seqpack.packing.in_batch import (  # noqa: E402
    InBatchPackingCollator,
    PaddingTotals,
    build_in_batch_loader,
)
from seqpack.packing.sft_dataset import SFTJsonlDataset  # noqa: E402

log = logging.getLogger("bench_in_batch")

SEQ_LENGTH = 4096


def right_pad_collate(items: list[dict[str, Any]], m: int, pad_id: int) -> dict[str, torch.Tensor]:
    """BSHD collate: rows padded to the longest row of the micro-batch, rounded up to ``m``."""
    lengths = [int(it["tokens"].shape[0]) for it in items]
    width = round_up(max(lengths), m)
    b = len(items)
    tokens = np.full((b, width), pad_id, dtype=np.int64)
    labels = np.full((b, width), -100, dtype=np.int64)
    loss = np.zeros((b, width), dtype=np.float32)
    attention = np.zeros((b, width), dtype=bool)
    for i, (it, u) in enumerate(zip(items, lengths)):
        tokens[i, :u] = it["tokens"]
        labels[i, :u] = it["labels"]
        loss[i, :u] = it["loss_mask"]
        attention[i, :u] = True
    positions = np.broadcast_to(np.arange(width, dtype=np.int64), (b, width)).copy()
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "loss_mask": torch.from_numpy(loss),
        "attention_mask": torch.from_numpy(attention),
        "position_ids": torch.from_numpy(positions),
    }


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def collate_cases(schema: str, mbs: int, m: int, items: list[dict[str, Any]], pad_id: int,
                  repeats: int) -> list[dict[str, Any]]:
    """Time both collates over every full micro-batch of ``items``; return one result per mode."""
    batches = [items[k : k + mbs] for k in range(0, len(items) - mbs + 1, mbs)]
    real = sum(int(it["tokens"].shape[0]) for b in batches for it in b)
    collator = InBatchPackingCollator(pad_seq_to_mult=m, seq_length=SEQ_LENGTH, pad_token_id=pad_id)

    totals = PaddingTotals()
    for b in batches:
        totals.add(collator(b)["pack_info"])
    packed_positions = totals.positions
    padded_positions = sum(right_pad_collate(b, m, pad_id)["tokens"].numel() for b in batches)
    assert totals.real_tokens == real

    results = []
    for mode, fn, positions in (
        ("in-batch", lambda: [collator(b) for b in batches], packed_positions),
        ("right-pad", lambda: [right_pad_collate(b, m, pad_id) for b in batches], padded_positions),
    ):
        secs = _median_seconds(fn, repeats)
        results.append({
            "schema": schema, "mbs": mbs, "pad_seq_to_mult": m, "mode": mode,
            "micro_batches": len(batches), "real_tokens": real, "positions": positions,
            "padding_share": 1.0 - real / positions,
            "collate_ms_per_batch": 1000 * secs / len(batches),
            "real_tokens_per_s": real / secs,
        })
    packed, padded = results
    for r in results:
        r["positions_vs_right_pad"] = r["positions"] / padded["positions"]
        r["throughput_vs_right_pad"] = r["real_tokens_per_s"] / padded["real_tokens_per_s"]
    return results


def loader_case(schema: str, mbs: int, m_topology: dict[str, Any]) -> dict[str, Any]:
    """One pass of the lazy in-batch loader (read, parse, tokenize, collate) with no workers."""
    cfg = load_config({
        "model": {"seq_length": SEQ_LENGTH, **m_topology},
        "dataset": {"enable_in_batch_packing": True, "dataloader_type": "single", "num_workers": 0},
        "train": {"micro_batch_size": mbs},
        "dist": {"world_size": m_topology.get("tensor_model_parallel_size", 1)
                 * m_topology.get("context_parallel_size", 1)},
    })
    loader = build_in_batch_loader(cfg, demo_path(schema))
    start = time.perf_counter()
    totals = PaddingTotals()
    for batch in loader:
        totals.add(batch["pack_info"])
    secs = time.perf_counter() - start
    return {
        "schema": schema, "mbs": mbs, "pad_seq_to_mult": loader.collate_fn.pad_seq_to_mult,
        "rows": totals.rows, "micro_batches": totals.batches, "seconds": secs,
        "rows_per_s": totals.rows / secs, "real_tokens_per_s": totals.real_tokens / secs,
        "padding_share": totals.padding_share,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbs", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "in_batch.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)

    results: list[dict[str, Any]] = []
    for schema in ("prompt_completion", "chat"):
        ds = SFTJsonlDataset(demo_path(schema), seq_length=SEQ_LENGTH)
        items = [ds[i] for i in range(len(ds))]
        for mbs in args.mbs:
            for m in args.multiples:
                results += collate_cases(schema, mbs, m, items, ds.tokenizer.pad_id, args.repeats)

    header = (f"{'schema':17} {'mbs':>3} {'m':>2} {'mode':9} {'batches':>7} {'pad share':>9} "
              f"{'ms/batch':>8} {'Mtok/s':>7} {'positions x':>11} {'tok/s x':>7}")
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r['schema']:17} {r['mbs']:>3} {r['pad_seq_to_mult']:>2} {r['mode']:9} {r['micro_batches']:>7} "
            f"{r['padding_share']:>9.1%} {r['collate_ms_per_batch']:>8.3f} {r['real_tokens_per_s'] / 1e6:>7.1f} "
            f"{r['positions_vs_right_pad']:>11.3f} {r['throughput_vs_right_pad']:>7.2f}"
        )

    loaders = [
        loader_case(schema, mbs, topo)
        for schema in ("prompt_completion", "chat")
        for mbs in args.mbs
        for topo in ({}, {"tensor_model_parallel_size": 4, "context_parallel_size": 2, "sequence_parallel": True})
    ]
    lheader = (f"{'schema':17} {'mbs':>3} {'m':>2} {'rows':>5} {'seconds':>7} {'rows/s':>8} {'Mtok/s':>7} "
               f"{'pad share':>9}")
    lines += ["", "lazy in-batch loader (read + parse + tokenize + collate, 0 workers)", lheader, "-" * len(lheader)]
    for r in loaders:
        lines.append(
            f"{r['schema']:17} {r['mbs']:>3} {r['pad_seq_to_mult']:>2} {r['rows']:>5} {r['seconds']:>7.3f} "
            f"{r['rows_per_s']:>8.0f} {r['real_tokens_per_s'] / 1e6:>7.2f} {r['padding_share']:>9.2%}"
        )
    print("\n".join(lines))  # noqa: T201 - a benchmark script's table is its output

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
        "numpy": np.__version__, "seq_length": SEQ_LENGTH,
        "args": vars(args) | {"out": str(args.out)},
        "collate": results, "loader": loaders,
    }
    args.out.write_text(json.dumps(payload, indent=2))
    log.warning("wrote %s", args.out)


if __name__ == "__main__":
    main()
