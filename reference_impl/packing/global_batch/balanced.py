"""``balanced``: seqpack's global-batch scheduler, balancing tokens and attention cost over DP ranks.

A DP rank's work in a step is the sum over the samples it runs of a linear part (tokens, ``P``)
and an attention part (``P**2`` for causal varlen attention); how the samples are grouped into
packs does not change it. The ranks meet at the gradient all-reduce, so the step takes as long as
the most loaded rank. The scheduler therefore decides *which rank runs which sample* first and
forms packs afterwards:

1. **Assign samples to ranks.** Both loads are measured as shares of a perfect split (``P *
   DP / sum P`` and ``P**2 * DP / sum P**2``; 1.0 each = perfect). Samples go longest first, each
   to the rank whose larger share (``max(tokens, attention)``) is currently the smallest (ties: the
   lower rank): a longest-processing-time greedy on two loads at once, O(n log DP) with a heap.
2. **Pack each rank's samples** with first fit decreasing
   (:func:`reference_impl.packing.algorithms.pack_lengths`), capacity ``C``.
3. **Equal micro-batch counts.** ``M`` = the largest pack count of any rank. A rank with fewer
   packs splits its pack with the most samples into two halves of similar size until it has ``M``
   (the rank's load does not change); a rank with fewer than ``M`` samples in all gets filler packs.
4. **Line up micro-batches.** Each rank orders its packs by attention cost, heaviest first, so
   micro-batch ``k`` holds comparable packs on every rank. Inside a pack, samples are in id order.

Lower bound worth knowing: no schedule can put less than ``max(P**2)`` on the rank that runs the
longest sample, so when one sample's ``P**2`` exceeds ``sum P**2 / DP`` the attention imbalance is
at least ``max(P**2) * DP / sum P**2`` (``bench/bench_global_batch.py`` reports it).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from reference_impl.packing.algorithms import pack_lengths
from reference_impl.packing.global_batch.schedule import Scheduler, register_scheduler

__all__ = ["BalancedScheduler", "assign_ranks", "balanced_packs"]


def assign_ranks(lengths: Sequence[int] | np.ndarray, dp_size: int) -> np.ndarray:
    """DP rank (int64) of every sample: the two-load greedy of the module docstring (step 1)."""
    arr = np.asarray(lengths, dtype=np.int64)
    ranks = np.zeros(arr.shape[0], dtype=np.int64)
    if arr.size == 0 or dp_size == 1:
        return ranks
    as_float = arr.astype(np.float64)
    token_share = (as_float * (dp_size / as_float.sum())).tolist()
    squares = as_float * as_float
    attention_share = (squares * (dp_size / squares.sum())).tolist()
    heap = [(0.0, d, 0.0, 0.0) for d in range(dp_size)]
    replace = heapq.heapreplace
    out = [0] * arr.shape[0]
    for i in np.argsort(-arr, kind="stable").tolist():
        _, d, tok, att = heap[0]
        tok += token_share[i]
        att += attention_share[i]
        replace(heap, (tok if tok > att else att, d, tok, att))
        out[i] = d
    ranks[:] = out
    return ranks


def _split(pack: list[int], lengths: Sequence[int]) -> tuple[list[int], list[int]]:
    """Two halves of a pack with similar token counts (longest first, each to the lighter half)."""
    halves: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for gid in sorted(pack, key=lambda g: (-lengths[g], g)):
        h = 0 if sums[0] <= sums[1] else 1
        halves[h].append(gid)
        sums[h] += lengths[gid]
    return sorted(halves[0]), sorted(halves[1])


def balanced_packs(
    lengths: Sequence[int], *, dp_size: int, capacity: int
) -> tuple[list[tuple[int, ...]], list[str]]:
    """Packs in slot order and the adjustments made (see the module docstring)."""
    if not lengths:
        return [], []
    arr = np.asarray(lengths, dtype=np.int64)
    ranks = assign_ranks(arr, dp_size)
    per_rank: list[list[list[int]]] = []
    for d in range(dp_size):
        ids = np.flatnonzero(ranks == d)
        if ids.size == 0:
            per_rank.append([])
            continue
        result = pack_lengths(arr[ids], capacity, "first_fit_decreasing")
        per_rank.append([sorted(ids[b].tolist()) for b in map(np.asarray, result.bins())])
    target = max(len(p) for p in per_rank)
    notes: list[str] = []
    splits = fillers = 0
    for d, packs in enumerate(per_rank):
        while len(packs) < target:
            widest = max(range(len(packs)), key=lambda j: (len(packs[j]), j), default=None)
            if widest is None or len(packs[widest]) < 2:
                packs.extend([] for _ in range(target - len(packs)))
                fillers += 1
                break
            a, b = _split(packs.pop(widest), lengths)
            packs.extend((a, b))
            splits += 1
        packs.sort(key=lambda p: (-sum(lengths[g] ** 2 for g in p), -sum(lengths[g] for g in p), p[:1]))
    if splits:
        notes.append(f"split {splits} pack(s) so every DP rank runs {target} micro-batch(es)")
    if fillers:
        empty = sum(1 for packs in per_rank for p in packs if not p)
        notes.append(f"{fillers} DP rank(s) hold fewer than {target} sample(s); added {empty} filler pack(s)")
    slots = [tuple(per_rank[d][k]) for k in range(target) for d in range(dp_size)]
    return slots, notes


class BalancedScheduler(Scheduler):
    """seqpack's ``balanced`` scheduler (see the module docstring)."""

    name = "balanced"

    def make_packs(
        self, lengths: Sequence[int], *, dp_size: int, capacity: int
    ) -> tuple[list[tuple[int, ...]], list[str]]:
        """See :func:`balanced_packs`."""
        return balanced_packs(lengths, dp_size=dp_size, capacity=capacity)


register_scheduler(BalancedScheduler())
