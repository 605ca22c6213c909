"""Benchmark: per-step rank load of global-batch schedulers at DP=8 (simulated ranks).

One command: ``python bench/bench_global_batch.py`` prints a table and writes
``bench/results/global_batch.json``. For each length mix (``lognormal``: heavy-tailed;
``bimodal``: short and long chats; :func:`reference_impl.data.length_mixes.sample_lengths`,
lengths in [8, 4096] rounded up to the CP=2 alignment of 4) and each global batch size (64, 256,
1024 samples), ``--trials`` seeded global batches are split over 8 DP ranks the way the loaders
split them (rank ``d`` loads samples ``d, d+8, ...``) and scheduled side by side, in one run, by

* ``dp_balanced``: Megatron-Core's scheduler (reproduced);
* ``balanced``: seqpack's scheduler (tokens and attention cost);
* ``per_rank``: no global view; every rank packs only what it loaded (first fit decreasing) and
  runs as many micro-batches as the busiest rank needs.

Packs hold at most ``max_seqlen_per_dp_cp_rank * CP = 4096 * 2 = 8192`` tokens. Reported per cell
(mean over trials; median and p95 too): max/mean rank load per step in tokens and in attention cost
(sum of ``L**2``), the mean over micro-batches of max/mean attention per micro-batch (``mb_attn``),
the lower bound on the attention ratio (``max(1, max L**2 * DP / sum L**2)``:
one sample cannot be split across ranks), micro-batches per step, and scheduling time per step
(median; the pure scheduling call, collectives excluded).

Targets for ``balanced``: attention max/mean <= 1.01 at 256 samples, scheduling under 5 ms per
step at 1024 samples.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from reference_impl.alignment import round_up  # noqa: E402
from reference_impl.data.length_mixes import sample_lengths  # noqa: E402
from reference_impl.packing.algorithms import pack_lengths  # noqa: E402
from reference_impl.packing.global_batch import schedule_global_batch  # noqa: E402
from reference_impl.textfmt import text_table  # noqa: E402

DP, CP, MAX_SEQLEN_PER_RANK, MULTIPLE = 8, 2, 4096, 4
CAPACITY = MAX_SEQLEN_PER_RANK * CP
MIXES = ("lognormal", "bimodal")
BATCHES = (64, 256, 1024)
SCHEDULERS = ("dp_balanced", "balanced", "per_rank")


def ratio(values: list[int]) -> float:
    return max(values) * len(values) / sum(values)


def per_rank_packing(per_rank: list[list[int]]) -> tuple[list[int], list[int], int]:
    """Rank loads (tokens, attention) and micro-batches when every rank packs only its own samples."""
    counts = [pack_lengths(r, CAPACITY, "first_fit_decreasing").num_bins for r in per_rank]
    return [sum(r) for r in per_rank], [sum(x * x for x in r) for r in per_rank], max(counts)


def run_cell(mix: str, batch: int, trials: int, seed: int) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, list[float]]] = {s: {"tokens": [], "attention": [], "micro_batches": [], "ms": [],
                                                   "micro_batch_attention": []} for s in SCHEDULERS}
    bounds = []
    for t in range(trials):
        raw = sample_lengths(mix, batch, seed=seed * 1000 + t, min_len=8, max_len=4096)
        lengths = [round_up(int(x), MULTIPLE) for x in raw]
        per_rank = [lengths[d::DP] for d in range(DP)]
        squares = [x * x for x in lengths]
        bounds.append(max(1.0, max(squares) * DP / sum(squares)))
        for name in SCHEDULERS:
            started = time.perf_counter()
            if name == "per_rank":
                tokens, attention, mbs = per_rank_packing(per_rank)
                mb_ratio = float("nan")
            else:
                s = schedule_global_batch(per_rank, max_seqlen_per_dp_cp_rank=MAX_SEQLEN_PER_RANK, cp_size=CP,
                                          scheduler=name)
                elapsed = time.perf_counter() - started
                tokens, attention = s.rank_loads()
                mbs = s.num_micro_batches
                per_mb = [[a for _, a in mb] for mb in s.micro_batch_loads()]
                mb_ratio = statistics.fmean(ratio(m) for m in per_mb if sum(m))
            if name == "per_rank":
                elapsed = time.perf_counter() - started
            r = rows[name]
            r["tokens"].append(ratio(tokens))
            r["attention"].append(ratio(attention))
            r["micro_batches"].append(mbs)
            r["ms"].append(elapsed * 1e3)
            r["micro_batch_attention"].append(mb_ratio)
    out = []
    for name, r in rows.items():
        out.append({
            "mix": mix, "batch": batch, "scheduler": name, "trials": trials,
            "tokens_max_over_mean": statistics.fmean(r["tokens"]),
            "tokens_p95": float(np.percentile(r["tokens"], 95)),
            "attention_max_over_mean": statistics.fmean(r["attention"]),
            "attention_median": statistics.median(r["attention"]),
            "attention_p95": float(np.percentile(r["attention"], 95)),
            "share_attention_within_1pct": statistics.fmean(1.0 if x <= 1.01 else 0.0 for x in r["attention"]),
            "share_bound_above_1pct": statistics.fmean(1.0 if x > 1.01 else 0.0 for x in bounds),
            "attention_lower_bound": statistics.fmean(bounds),
            "attention_over_bound": statistics.fmean(a / b for a, b in zip(r["attention"], bounds)),
            "micro_batch_attention_max_over_mean": None if name == "per_rank"
            else statistics.fmean(r["micro_batch_attention"]),
            "micro_batches": statistics.fmean(r["micro_batches"]),
            "schedule_ms_median": statistics.median(r["ms"]),
            "schedule_ms_p95": float(np.percentile(r["ms"], 95)),
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="global batches per cell (default 100)")
    parser.add_argument("--seed", type=int, default=7, help="base seed (default 7)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "global_batch.json")
    args = parser.parse_args()

    results: list[dict[str, Any]] = []
    for mix in MIXES:
        for batch in BATCHES:
            results += run_cell(mix, batch, args.trials, args.seed)

    table = []
    for r in results:
        mb = r["micro_batch_attention_max_over_mean"]
        table.append([
            r["mix"], r["batch"], r["scheduler"], f"{r['tokens_max_over_mean']:.4f}",
            f"{r['attention_max_over_mean']:.4f}", f"{r['attention_median']:.4f}", f"{r['attention_lower_bound']:.4f}",
            f"{r['attention_over_bound']:.4f}", "-" if mb is None else f"{mb:.3f}",
            f"{r['micro_batches']:.2f}", f"{r['schedule_ms_median']:.2f}",
        ])
    print(f"DP={DP}, CP={CP}, pack capacity {CAPACITY} tokens, {args.trials} global batches per cell "
          "(mean max/mean rank load per step)")
    print(text_table(["mix", "batch", "scheduler", "tokens", "attention", "attn_median", "attn_bound", "attn/bound",
                      "mb_attn", "micro_batches", "sched_ms"], table))

    def cell(mix: str, batch: int, name: str) -> dict[str, Any]:
        return next(r for r in results if (r["mix"], r["batch"], r["scheduler"]) == (mix, batch, name))

    targets = []
    for mix in MIXES:
        b = cell(mix, 256, "balanced")
        targets.append({
            "target": f"balanced attention max/mean <= 1.01 at 256 samples ({mix})",
            "value": b["attention_max_over_mean"], "median": b["attention_median"],
            "lower_bound": b["attention_lower_bound"], "share_within": b["share_attention_within_1pct"],
            "share_bound_above": b["share_bound_above_1pct"], "met": b["attention_max_over_mean"] <= 1.01,
        })
        t = cell(mix, 1024, "balanced")
        targets.append({"target": f"balanced scheduling < 5 ms per step at 1024 samples ({mix})",
                        "value": t["schedule_ms_median"], "met": t["schedule_ms_median"] < 5.0})
    for t in targets:
        extra = ""
        if "lower_bound" in t:
            extra = (f" (median {t['median']:.4f}; {t['share_within']:.0%} of steps within 1.01; the lower bound "
                     f"averages {t['lower_bound']:.4f} and exceeds 1.01 in {t['share_bound_above']:.0%} of steps)")
        print(f"{'MET ' if t['met'] else 'MISS'} {t['target']}: {t['value']:.4f}{extra}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "dp": DP, "cp": CP, "capacity": CAPACITY, "trials": args.trials, "seed": args.seed,
        "results": results, "targets": targets,
    }
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
