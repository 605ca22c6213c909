"""``balanced``: seqpack's global-batch scheduler, balancing tokens and attention cost over DP ranks.

A DP rank's work in a step is the sum over the samples it runs of a linear part (tokens, ``P``)
and an attention part (``P**2`` for causal varlen attention); how the samples are grouped into
packs does not change it. The ranks meet at the gradient all-reduce, so the step takes as long as
the most loaded rank. The scheduler therefore decides *which rank runs which sample* first and
forms packs afterwards:

1. **Assign samples to ranks** (:func:`assign_ranks`). Both loads are measured as shares of a
   perfect split (``P * DP / sum P`` and ``P**2 * DP / sum P**2``; 1.0 each = perfect); a rank's
   *key* is the larger of its two shares, and the goal is the smallest largest key.

   a. :func:`greedy_ranks`: samples go longest first, each to the rank with the smallest key
      (ties: the lower rank), a longest-processing-time greedy on two loads at once, O(n log DP),
      in exact integer arithmetic. The most loaded rank ends at most one sample's share above the
      least loaded.
   b. :func:`refine_ranks`: a bounded local search. The rank with the largest key (among those
      not yet settled) tries, with the two ranks that have the most room in its binding load, every
      exchange of at most one of its samples for at most two of theirs (pairs from their
      ``POOL_SIZE`` shortest samples), and takes the exchange that lowers the larger key of the
      two ranks the most. A rank that cannot improve is settled. It stops when every key is within
      ``TOLERANCE`` of 1, when every rank is settled, or after ``MAX_ROUNDS`` exchanges. The
      largest key never grows. One-for-two exchanges matter: a rank heavy in attention and light
      in tokens needs one long sample swapped for two shorter ones with more tokens in all.

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

Every rank computes the schedule from the same gathered lengths; the refinement uses float64 numpy
arithmetic, which is reproducible for identical inputs and library versions, and the multi-process
path compares a fingerprint of the schedule across ranks before using it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from reference_impl.packing.algorithms import pack_lengths
from reference_impl.packing.global_batch.schedule import Scheduler, register_scheduler

__all__ = ["BalancedScheduler", "assign_ranks", "balanced_packs", "greedy_ranks", "refine_ranks"]

#: Refinement stops once every rank's larger share is at most 1 + TOLERANCE.
TOLERANCE = 2e-3
#: Most exchanges the refinement makes per step.
MAX_ROUNDS = 32
#: Shortest samples of a partner rank considered for two-sample exchanges.
POOL_SIZE = 20
#: Partner ranks tried per exchange.
PARTNERS = 2


def greedy_ranks(lengths: Sequence[int] | np.ndarray, dp_size: int) -> np.ndarray:
    """DP rank (int64) of every sample from the two-load greedy (step 1a; exact integer keys)."""
    arr = np.asarray(lengths, dtype=np.int64)
    ranks = np.zeros(arr.shape[0], dtype=np.int64)
    if arr.size == 0 or dp_size == 1:
        return ranks
    values = arr.tolist()
    total = sum(values)
    total_sq = sum(x * x for x in values)
    # key = max(tokens / total, squares / total_sq) scaled by total * total_sq: exact Python ints
    heap = [(0, d, 0, 0) for d in range(dp_size)]
    replace = heapq.heapreplace
    out = [0] * len(values)
    for i in np.argsort(-arr, kind="stable").tolist():
        _, d, tok, sq = heap[0]
        tok += values[i]
        sq += values[i] * values[i]
        a, b = tok * total_sq, sq * total
        replace(heap, (a if a > b else b, d, tok, sq))
        out[i] = d
    ranks[:] = out
    return ranks


def refine_ranks(lengths: Sequence[int] | np.ndarray, ranks: np.ndarray, dp_size: int) -> np.ndarray:
    """Improve an assignment by bounded one-for-at-most-two exchanges (step 1b); returns a new array."""
    arr = np.asarray(lengths, dtype=np.float64)
    out = np.array(ranks, dtype=np.int64, copy=True)
    if arr.size == 0 or dp_size == 1:
        return out
    tok = arr * (dp_size / arr.sum())
    att = arr * arr
    att *= dp_size / att.sum()
    load_t = np.bincount(out, tok, dp_size)
    load_a = np.bincount(out, att, dp_size)
    settled = np.zeros(dp_size, dtype=bool)
    everyone = np.arange(dp_size)
    for _ in range(MAX_ROUNDS):
        key = np.maximum(load_t, load_a)
        if key.max() <= 1.0 + TOLERANCE or settled.all():
            break
        p = int(np.where(settled, -np.inf, key).argmax())
        peak = key[p]
        binding = load_a if load_a[p] >= load_t[p] else load_t
        room = np.where(settled | (everyone == p), -np.inf, 1.0 - binding)
        mine = np.flatnonzero(out == p)
        give_t = np.append(tok[mine], 0.0)
        give_a = np.append(att[mine], 0.0)
        best: tuple[float, int, list[int], list[int]] | None = None
        for o in np.argsort(-room, kind="stable")[:PARTNERS].tolist():
            if not np.isfinite(room[o]):
                continue
            theirs = np.flatnonzero(out == o)
            pool = theirs[np.argsort(tok[theirs], kind="stable")[:POOL_SIZE]]
            first, second = np.triu_indices(pool.size, 1)
            take_t = np.concatenate([tok[theirs], [0.0], tok[pool][first] + tok[pool][second]])
            take_a = np.concatenate([att[theirs], [0.0], att[pool][first] + att[pool][second]])
            moved_t = give_t[:, None] - take_t[None, :]
            moved_a = give_a[:, None] - take_a[None, :]
            worst = np.maximum(np.maximum(load_t[p] - moved_t, load_a[p] - moved_a),
                               np.maximum(load_t[o] + moved_t, load_a[o] + moved_a))
            worst[-1, theirs.size] = np.inf  # giving nothing for nothing
            k = int(worst.argmin())
            value = float(worst.flat[k])
            if value < peak * (1.0 - 1e-12) and (best is None or value < best[0]):
                g, t = divmod(k, take_t.size)
                give = [int(mine[g])] if g < mine.size else []
                if t < theirs.size:
                    take = [int(theirs[t])]
                elif t == theirs.size:
                    take = []
                else:
                    j = t - theirs.size - 1
                    take = [int(pool[first[j]]), int(pool[second[j]])]
                best = (value, o, give, take)
        if best is None:
            settled[p] = True
            continue
        _, o, give, take = best
        for i in give:
            out[i] = o
            load_t[p] -= tok[i]
            load_a[p] -= att[i]
            load_t[o] += tok[i]
            load_a[o] += att[i]
        for i in take:
            out[i] = p
            load_t[o] -= tok[i]
            load_a[o] -= att[i]
            load_t[p] += tok[i]
            load_a[p] += att[i]
    return out


def assign_ranks(lengths: Sequence[int] | np.ndarray, dp_size: int) -> np.ndarray:
    """DP rank (int64) of every sample: :func:`greedy_ranks`, then :func:`refine_ranks` (step 1)."""
    return refine_ranks(lengths, greedy_ranks(lengths, dp_size), dp_size)


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
