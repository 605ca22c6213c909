"""Benchmark: per-step rank load and scheduling time of global-batch schedulers at DP=8 (simulated ranks).

One command: ``python bench/bench_global_batch.py`` prints a table and writes
``bench/results/global_batch.json``. For each length mix (``lognormal``: heavy-tailed;
``bimodal``: short and long chats; :func:`seqpack.data.length_mixes.sample_lengths`,
lengths in [8, 4096] rounded up to the CP=2 alignment of 4) and each global batch size (default 256
and 1024 samples), ``--steps`` seeded global batches are split over 8 DP ranks the way the loaders
split them (rank ``d`` loads samples ``d, d+8, ...``) and scheduled side by side, in one run, by

* ``dp_balanced``: Megatron-Core's scheduler (reproduced);
* ``balanced``: seqpack's scheduler (attention cost, sum of ``L**2``);
* ``balanced_tokens``: the same scheduler balancing tokens (sum ``L``; ``BalancedScheduler(cost="tokens")``);
* ``lpt``: plain LPT on the attention cost, then first fit decreasing per rank
  (:class:`seqpack.packing.global_batch.balanced.LPTScheduler`), the baseline ``balanced`` must
  match or beat;
* ``per_rank``: no global view; every rank packs only what it loaded (first fit decreasing) and
  runs as many micro-batches as the busiest rank needs.

Packs hold at most ``max_seqlen_per_dp_cp_rank * CP = 4096 * 2 = 8192`` tokens. Reported per cell
(mean over steps; median and p95 too): max/mean rank load per step in tokens (sum ``L``) and in
attention cost (sum ``L**2``), the lower bound on the attention ratio
(:func:`seqpack.packing.global_batch.balanced.cost_lower_bound`), micro-batches per step,
and time per step (median and p95 of the whole ``schedule_global_batch`` call, collectives
excluded; the schedulers take turns on every step, after one warm-up call each).

Targets for ``balanced``: attention max/mean at or below plain LPT's in the same run, micro-batches
no more than LPT's, under 1 ms per step at 256 samples and under 3 ms at 1024.
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

from seqpack.core.alignment import round_up  # noqa: E402
from seqpack.data.length_mixes import sample_lengths  # noqa: E402
from seqpack.packing.algorithms import pack_lengths  # noqa: E402
from seqpack.packing.global_batch import schedule_global_batch  # noqa: E402
from seqpack.packing.global_batch.balanced import (  # noqa: E402
    BalancedScheduler,
    LPTScheduler,
    cost_lower_bound,
)
from seqpack.packing.global_batch.schedule import Scheduler  # noqa: E402
from seqpack.core.textfmt import text_table  # noqa: E402

DP, CP, MAX_SEQLEN_PER_RANK, MULTIPLE = 8, 2, 4096, 4
CAPACITY = MAX_SEQLEN_PER_RANK * CP
MIXES = ("lognormal", "bimodal")
BATCHES = (256, 1024)
SCHEDULERS = ("dp_balanced", "lpt", "balanced", "balanced_tokens", "per_rank")
TIME_TARGET_MS = {256: 1.0, 1024: 3.0}


def ratio(values: list[int]) -> float:
    return max(values) * len(values) / sum(values)


def per_rank_packing(per_rank: list[list[int]]) -> tuple[list[int], list[int], int]:
    """Rank loads (tokens, attention) and micro-batches when every rank packs only its own samples."""
    counts = [pack_lengths(r, CAPACITY, "first_fit_decreasing").num_bins for r in per_rank]
    return [sum(r) for r in per_rank], [sum(x * x for x in r) for r in per_rank], max(counts)


def run_one(name: str, per_rank: list[list[int]]) -> tuple[list[int], list[int], int, float]:
    """(rank tokens, rank attention, micro-batches, seconds) of one scheduler on one step."""
    if name == "per_rank":
        started = time.perf_counter()
        tokens, attention, mbs = per_rank_packing(per_rank)
        return tokens, attention, mbs, time.perf_counter() - started
    named: dict[str, Scheduler] = {"lpt": LPTScheduler(), "balanced_tokens": BalancedScheduler(cost="tokens")}
    scheduler: str | Scheduler = named.get(name, name)
    started = time.perf_counter()
    s = schedule_global_batch(per_rank, max_seqlen_per_dp_cp_rank=MAX_SEQLEN_PER_RANK, cp_size=CP,
                              scheduler=scheduler)
    elapsed = time.perf_counter() - started
    counts = {len(s.rank_packs(d)) for d in range(DP)}
    assert counts == {s.num_micro_batches}, f"{name}: unequal micro-batch counts {counts}"
    tokens, attention = s.rank_loads()
    return tokens, attention, s.num_micro_batches, elapsed


def run_cell(mix: str, batch: int, steps: int, seed: int) -> list[dict[str, Any]]:
    rows = {s: {"tokens": [], "attention": [], "micro_batches": [], "ms": []} for s in SCHEDULERS}
    bounds = []
    not_worse = fewer_mbs = 0
    for t in range(steps):
        raw = sample_lengths(mix, batch, seed=seed * 1000 + t, min_len=8, max_len=4096)
        lengths = [round_up(int(x), MULTIPLE) for x in raw]
        per_rank = [lengths[d::DP] for d in range(DP)]
        squares = [x * x for x in lengths]
        bounds.append(cost_lower_bound(squares, DP) * DP / sum(squares))
        if t == 0:
            for name in SCHEDULERS:  # warm-up: imports, caches
                run_one(name, per_rank)
        for name in SCHEDULERS:
            tokens, attention, mbs, secs = run_one(name, per_rank)
            r = rows[name]
            r["tokens"].append(ratio(tokens))
            r["attention"].append(ratio(attention))
            r["micro_batches"].append(mbs)
            r["ms"].append(secs * 1e3)
        not_worse += rows["balanced"]["attention"][-1] <= rows["lpt"]["attention"][-1]
        fewer_mbs += rows["balanced"]["micro_batches"][-1] < rows["lpt"]["micro_batches"][-1]
    out = []
    for name, r in rows.items():
        out.append({
            "mix": mix, "batch": batch, "dp": DP, "scheduler": name, "steps": steps,
            "tokens_max_over_mean": statistics.fmean(r["tokens"]),
            "tokens_p95": float(np.percentile(r["tokens"], 95)),
            "attention_max_over_mean": statistics.fmean(r["attention"]),
            "attention_median": statistics.median(r["attention"]),
            "attention_p95": float(np.percentile(r["attention"], 95)),
            "attention_lower_bound": statistics.fmean(bounds),
            "micro_batches": statistics.fmean(r["micro_batches"]),
            "ms_per_step_median": statistics.median(r["ms"]),
            "ms_per_step_p95": float(np.percentile(r["ms"], 95)),
        })
        if name == "balanced":
            out[-1]["steps_attention_at_or_below_lpt"] = not_worse
            out[-1]["steps_fewer_micro_batches_than_lpt"] = fewer_mbs
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="global batches per cell (default 100)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES),
                        help="global batch sizes in samples (default 256 1024)")
    parser.add_argument("--seed", type=int, default=7, help="base seed (default 7)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "global_batch.json")
    args = parser.parse_args()

    results: list[dict[str, Any]] = []
    for mix in MIXES:
        for batch in args.batches:
            results += run_cell(mix, batch, args.steps, args.seed)

    table = [[r["mix"], r["batch"], r["scheduler"], f"{r['tokens_max_over_mean']:.4f}",
              f"{r['attention_max_over_mean']:.4f}", f"{r['attention_median']:.4f}",
              f"{r['attention_lower_bound']:.4f}", f"{r['micro_batches']:.2f}",
              f"{r['ms_per_step_median']:.3f}", f"{r['ms_per_step_p95']:.3f}"] for r in results]
    print(f"DP={DP}, CP={CP}, pack capacity {CAPACITY} tokens, {args.steps} global batches per cell "
          "(mean max/mean rank load per step; time per step of the whole scheduling call)")
    print(text_table(["mix", "batch", "scheduler", "sum_L", "sum_L^2", "sum_L^2_median", "L^2_bound",
                      "micro_batches", "ms_median", "ms_p95"], table))

    def cell(mix: str, batch: int, name: str) -> dict[str, Any]:
        return next(r for r in results if (r["mix"], r["batch"], r["scheduler"]) == (mix, batch, name))

    targets = []
    for mix in MIXES:
        for batch in args.batches:
            b, lpt = cell(mix, batch, "balanced"), cell(mix, batch, "lpt")
            targets.append({
                "target": f"balanced sum L^2 max/mean <= plain LPT ({mix}, {batch})",
                "value": b["attention_max_over_mean"], "baseline": lpt["attention_max_over_mean"],
                "met": b["attention_max_over_mean"] <= lpt["attention_max_over_mean"],
                "detail": f"at or below on {b['steps_attention_at_or_below_lpt']}/{args.steps} steps",
            })
            targets.append({
                "target": f"balanced micro-batches <= plain LPT ({mix}, {batch})",
                "value": b["micro_batches"], "baseline": lpt["micro_batches"],
                "met": b["micro_batches"] <= lpt["micro_batches"],
                "detail": f"fewer on {b['steps_fewer_micro_batches_than_lpt']}/{args.steps} steps",
            })
            if batch in TIME_TARGET_MS:
                limit = TIME_TARGET_MS[batch]
                targets.append({
                    "target": f"balanced <= {limit:g} ms per step ({mix}, {batch})",
                    "value": b["ms_per_step_median"], "baseline": lpt["ms_per_step_median"],
                    "met": b["ms_per_step_median"] <= limit,
                    "detail": f"plain LPT {lpt['ms_per_step_median']:.3f} ms, "
                    f"dp_balanced {cell(mix, batch, 'dp_balanced')['ms_per_step_median']:.3f} ms",
                })
    for t in targets:
        print(f"{'MET ' if t['met'] else 'MISS'} {t['target']}: {t['value']:.4f} vs {t['baseline']:.4f} ({t['detail']})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "dp": DP, "cp": CP, "capacity": CAPACITY, "steps": args.steps, "seed": args.seed,
        "results": results, "targets": targets,
    }
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
