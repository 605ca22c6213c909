"""``balanced``: seqpack's global-batch scheduler, balancing the attention cost over DP ranks.

A DP rank's work in a step is the sum, over the samples it runs, of a cost per sample: by default
the attention proxy ``P**2`` (causal varlen attention grows with the square of a sequence's
length), or the token count ``P`` (``cost="tokens"``). How the samples are grouped into packs does
not change it. The ranks meet at the gradient all-reduce, so the step lasts as long as the most
loaded rank, and every rank must run the same number of micro-batches ``M``. The scheduler decides
*which rank runs which sample* first and forms packs afterwards:

1. **LPT** (:func:`lpt_ranks`): samples go largest cost first, each to the rank with the smallest
   cost so far (ties: the lower rank), in exact integer arithmetic.
2. **Fewer micro-batches** (:func:`equalise_counts`). A rank needs about ``tokens / C`` packs of
   capacity ``C``, and ranks balanced on attention differ in tokens, so one rank may need a pack
   more than the others, and then every rank runs that many micro-batches. This step tries to
   lower ``M`` one at a time: every rank above the new count sheds its cheapest samples (its
   shortest ones, or the single shortest one that covers the excess when that costs less) to the
   ranks with the lowest cost, as long as no rank's cost rises above the LPT peak and every rank
   still fits in the new count (checked by packing it). An attempt that fails changes nothing.
3. **Refine** (:func:`refine_ranks`): while the most loaded rank is more than ``TOLERANCE`` above
   a lower bound (:func:`cost_lower_bound`), move one of its samples to another rank or swap it for
   a cheaper one, taking the exchange that lowers the larger cost of the pair the most, within the
   token budget ``M * C`` of both ranks; at most ``MAX_ROUNDS`` exchanges. The largest cost never
   grows. If the result would need more than ``M`` packs on some rank, it is dropped.
4. **Pack** each rank's samples with first fit decreasing, capacity ``C``
   (:func:`first_fit_decreasing`: the bins of
   :func:`seqpack.packing.fit.first_fit_in_order` over the lengths sorted longest
   first, computed in plain Python because a rank holds only tens to hundreds of samples).
5. **Equal micro-batch counts.** A rank with fewer than ``M`` packs splits its pack with the most
   samples into two halves of similar size until it has ``M`` (its load does not change); a rank
   with fewer than ``M`` samples in all gets filler packs.
6. **Line up micro-batches.** Each rank orders its packs by cost, heaviest first, so micro-batch
   ``k`` holds comparable packs on every rank. Inside a pack, samples are in id order.

Against plain LPT (steps 1 and 4-6, :func:`lpt_packs`), steps 2 and 3 never raise the largest cost
nor the number of micro-batches (``tests/test_global_batch_schedule.py`` asserts both, over a
fixed set of seeds too). The lower bound: no rank holds less than the largest sample, some rank
holds two of the ``DP + 1`` largest samples, and no rank holds less than the mean. Balancing the
attention cost leaves the token counts less even (the benchmark reports both).

Everything is exact integer arithmetic on the gathered lengths, so every rank computes the same
schedule; the multi-process path also compares a fingerprint of it across ranks before using it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Sequence

from seqpack.core.errors import UsageError
from seqpack.packing.global_batch.schedule import Scheduler, register_scheduler

__all__ = [
    "COSTS",
    "BalancedScheduler",
    "LPTScheduler",
    "assign_ranks",
    "balanced_packs",
    "cost_lower_bound",
    "equalise_counts",
    "first_fit_decreasing",
    "longest_first",
    "lpt_packs",
    "lpt_ranks",
    "pack_ranks",
    "refine_ranks",
    "sample_costs",
    "slot_packs",
]

#: Per-sample costs the scheduler can balance: ``attention`` = ``P**2`` (default), ``tokens`` = ``P``.
COSTS: tuple[str, ...] = ("attention", "tokens")
#: Most exchanges the refinement makes per step.
MAX_ROUNDS = 32
#: Least loaded ranks the refinement tries as partners of the most loaded one.
PARTNERS = 2
#: The refinement stops once the largest rank cost is within this share of the lower bound.
TOLERANCE = 1e-4


# ------------------------------------------------------------------------------------------------
# Costs and the first assignment
# ------------------------------------------------------------------------------------------------


def sample_costs(lengths: Sequence[int], cost: str = "attention") -> list[int]:
    """The per-sample cost (exact Python ints): ``P**2`` for ``"attention"``, ``P`` for ``"tokens"``."""
    if cost == "attention":
        return [x * x for x in lengths]
    if cost == "tokens":
        return [int(x) for x in lengths]
    raise UsageError(f"unknown balanced cost {cost!r}; choose one of {', '.join(COSTS)}", field="cost")


def longest_first(values: Sequence[int]) -> list[int]:
    """Sample ids by value, largest first, ties in id order (a stable sort)."""
    return sorted(range(len(values)), key=values.__getitem__, reverse=True)


def lpt_ranks(costs: Sequence[int], dp_size: int, order: Sequence[int] | None = None) -> list[int]:
    """DP rank of every sample: largest cost first, each to the least loaded rank (ties: lower rank).

    ``order``: the ids largest cost first, when the caller has them already.
    """
    ranks = [0] * len(costs)
    if dp_size == 1:
        return ranks
    heap = [(0, d) for d in range(dp_size)]
    replace = heapq.heapreplace
    for i in longest_first(costs) if order is None else order:
        load, d = heap[0]
        replace(heap, (load + costs[i], d))
        ranks[i] = d
    return ranks


def cost_lower_bound(costs: Sequence[int], dp_size: int, order: Sequence[int] | None = None) -> int:
    """A lower bound on the largest rank cost of any assignment (see the module docstring).

    ``order``: the ids largest cost first, when the caller has them already.
    """
    if not costs:
        return 0
    top = [costs[g] for g in (longest_first(costs) if order is None else order)[: dp_size + 1]]
    pair = top[dp_size - 1] + top[dp_size] if len(top) > dp_size else 0
    return max(-(-sum(costs) // dp_size), top[0], pair)


# ------------------------------------------------------------------------------------------------
# Packing one rank
# ------------------------------------------------------------------------------------------------


def first_fit_decreasing(ids: Sequence[int], lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Packs (lists of sample ids) of the samples ``ids``: longest first (ties: lower id), each into
    the first opened pack with room, else a new pack."""
    return _first_fit(sorted(ids, key=lambda g: (-lengths[g], g)), lengths, capacity)


def _first_fit(ids: Sequence[int], lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """First fit over ``ids`` in the given order.

    Pure Python: a rank holds tens to hundreds of samples, where this is several times faster than
    the array-based packer built for whole datasets.
    """
    room: list[int] = []
    packs: list[list[int]] = []
    for g in ids:
        n = lengths[g]
        for b, free in enumerate(room):
            if free >= n:
                room[b] = free - n
                packs[b].append(g)
                break
        else:
            room.append(capacity - n)
            packs.append([g])
    return packs


def _members(ranks: Sequence[int], dp_size: int, order: Sequence[int]) -> list[list[int]]:
    """The samples of every rank, in ``order``."""
    out: list[list[int]] = [[] for _ in range(dp_size)]
    for g in order:
        out[ranks[g]].append(g)
    return out


def pack_ranks(
    lengths: Sequence[int], ranks: Sequence[int], *, dp_size: int, capacity: int,
    order: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """First fit decreasing packs of every rank's samples (``[d]`` = the packs of DP rank ``d``).

    ``order``: the ids longest first (ties: lower id), when the caller has them already.
    """
    order = longest_first(lengths) if order is None else order
    return [_first_fit(ids, lengths, capacity) for ids in _members(ranks, dp_size, order)]


# ------------------------------------------------------------------------------------------------
# Step 2: fewer micro-batches where that costs no balance
# ------------------------------------------------------------------------------------------------


def _shed(mine: list[int], lengths: Sequence[int], costs: Sequence[int], excess: int) -> list[int]:
    """The cheapest samples of ``mine`` whose lengths add up to at least ``excess``.

    Either the shortest samples (fewest cost per token) or the single shortest sample that covers
    the excess on its own, whichever costs less; [] when all of ``mine`` is not enough.
    """
    by_length = sorted(mine, key=lambda g: (lengths[g], g))
    prefix: list[int] = []
    moved = cost = 0
    single = None
    for g in by_length:
        if single is None and lengths[g] >= excess:
            single = g
        if moved < excess:
            prefix.append(g)
            moved += lengths[g]
            cost += costs[g]
        if single is not None and moved >= excess:
            break
    if moved < excess:
        return []
    if single is not None and costs[single] < cost:
        return [single]
    return prefix


def equalise_counts(
    lengths: Sequence[int],
    costs: Sequence[int],
    ranks: Sequence[int],
    *,
    dp_size: int,
    capacity: int,
    counts: Sequence[int],
    order: Sequence[int] | None = None,
) -> tuple[list[int], int]:
    """Lower the micro-batch count ``M = max(counts)`` by moving samples between ranks (step 2).

    ``counts[d]`` is the number of packs rank ``d``'s samples need. Returns the new assignment and
    its ``M``. No rank's cost ends above the largest cost of ``ranks``; every rank's first fit
    decreasing packs number at most the returned ``M``. ``order``: as for :func:`pack_ranks`.
    """
    ranks = list(ranks)
    count = max(counts, default=0)
    floor = max(1, -(-sum(lengths) // (dp_size * capacity)))
    if count <= floor:
        return ranks, count
    order = longest_first(lengths) if order is None else order
    tokens = [0] * dp_size
    load = [0] * dp_size
    for g, d in enumerate(ranks):
        tokens[d] += lengths[g]
        load[d] += costs[g]
    peak = max(load)
    needs = list(counts)
    while count > floor:
        target = count - 1
        budget = target * capacity
        trial, t_tok, t_load = list(ranks), list(tokens), list(load)
        members = _members(trial, dp_size, order)
        changed: set[int] = set()
        ok = True
        for d in range(dp_size):
            if needs[d] <= target:
                continue
            excess = t_tok[d] - budget
            moving = _shed(members[d], lengths, costs, excess) if excess > 0 else []
            if excess > 0 and not moving:
                ok = False
                break
            for g in moving:
                room = [e for e in range(dp_size)
                        if e != d and t_tok[e] + lengths[g] <= budget and t_load[e] + costs[g] <= peak]
                if not room:
                    ok = False
                    break
                e = min(room, key=lambda e: (t_load[e], e))
                trial[g] = e
                t_tok[d] -= lengths[g]
                t_tok[e] += lengths[g]
                t_load[d] -= costs[g]
                t_load[e] += costs[g]
                changed.update((d, e))
            if not ok:
                break
            changed.add(d)
        if not ok:
            break
        members = _members(trial, dp_size, order)
        new_needs = list(needs)
        for d in changed:
            new_needs[d] = len(_first_fit(members[d], lengths, capacity))
        if max(new_needs) > target:
            break
        ranks, tokens, load, needs, count = trial, t_tok, t_load, new_needs, target
    return ranks, count


# ------------------------------------------------------------------------------------------------
# Step 3: lower the largest load
# ------------------------------------------------------------------------------------------------


def _best_exchange(
    p: int, members: list[list[int]], lengths: Sequence[int], costs: Sequence[int],
    load: list[int], tokens: list[int], budget: int,
) -> tuple[int, int, int, int | None] | None:
    """(new pair peak, partner rank, sample given, sample taken or None) of the best exchange."""
    best: tuple[int, int, int, int | None] | None = None
    partners = sorted((d for d in range(len(members)) if load[d] < load[p]), key=lambda d: (load[d], d))
    for o in partners[:PARTNERS]:
        gap = load[p] - load[o]
        theirs = members[o]
        pool = sorted(theirs, key=lambda g: (costs[g], g))
        doubled = [2 * costs[g] for g in pool]
        for i in members[p]:
            # the ideal sample to take costs costs[i] - gap / 2: try its two neighbours, and nothing
            k = bisect_left(doubled, 2 * costs[i] - gap)
            for j in (None, *pool[max(0, k - 1) : k + 1]):
                delta = costs[i] - (0 if j is None else costs[j])
                shift = lengths[i] - (0 if j is None else lengths[j])
                if not 0 < delta < gap or tokens[o] + shift > budget or tokens[p] - shift > budget:
                    continue
                peak = max(load[p] - delta, load[o] + delta)
                if best is None or peak < best[0]:
                    best = (peak, o, i, j)
    return best


def refine_ranks(
    lengths: Sequence[int],
    costs: Sequence[int],
    ranks: Sequence[int],
    *,
    dp_size: int,
    budget: int,
    order: Sequence[int] | None = None,
) -> list[int]:
    """Lower the largest rank cost by moves and one-for-one swaps within a token budget (step 3).

    ``order``: as for :func:`pack_ranks`.
    """
    ranks = list(ranks)
    if dp_size == 1 or not ranks:
        return ranks
    order = longest_first(lengths) if order is None else order
    bound = cost_lower_bound(costs, dp_size, order)
    good_enough = bound + int(bound * TOLERANCE)
    load = [0] * dp_size
    tokens = [0] * dp_size
    for g, d in enumerate(ranks):
        load[d] += costs[g]
        tokens[d] += lengths[g]
    if max(load) <= good_enough:
        return ranks
    members = _members(ranks, dp_size, order)
    for _ in range(MAX_ROUNDS):
        p = max(range(dp_size), key=lambda d: (load[d], -d))
        if load[p] <= good_enough:
            break
        best = _best_exchange(p, members, lengths, costs, load, tokens, budget)
        if best is None:
            break
        _, o, i, j = best
        for g, src, dst in ((i, p, o), (j, o, p)):
            if g is None:
                continue
            members[src].remove(g)
            members[dst].append(g)
            ranks[g] = dst
            load[src] -= costs[g]
            load[dst] += costs[g]
            tokens[src] -= lengths[g]
            tokens[dst] += lengths[g]
    return ranks


# ------------------------------------------------------------------------------------------------
# The whole schedule
# ------------------------------------------------------------------------------------------------


def assign_ranks(
    lengths: Sequence[int], dp_size: int, *, capacity: int, cost: str = "attention", improve: bool = True
) -> tuple[list[int], list[list[list[int]]]]:
    """DP rank of every sample (steps 1-3) and every rank's first fit decreasing packs (step 4).

    ``improve=False`` stops after step 1: plain LPT, the baseline the scheduler is measured against.
    """
    values = [int(x) for x in lengths]
    costs = sample_costs(values, cost)
    order = longest_first(values)  # also largest cost first: both costs grow with the length
    ranks = lpt_ranks(costs, dp_size, order)
    packs = pack_ranks(values, ranks, dp_size=dp_size, capacity=capacity, order=order)
    if dp_size == 1 or not improve:
        return ranks, packs
    equal, count = equalise_counts(values, costs, ranks, dp_size=dp_size, capacity=capacity,
                                   counts=[len(p) for p in packs], order=order)
    packs = _repack(values, ranks, equal, packs, capacity, order)
    refined = refine_ranks(values, costs, equal, dp_size=dp_size, budget=count * capacity, order=order)
    trial = _repack(values, equal, refined, packs, capacity, order)
    if max(len(p) for p in trial) <= count:
        return refined, trial
    return equal, packs


def _repack(
    lengths: Sequence[int], old: list[int], new: list[int], packs: list[list[list[int]]], capacity: int,
    order: Sequence[int],
) -> list[list[list[int]]]:
    """``packs`` (of assignment ``old``) updated for assignment ``new``: ranks that changed are repacked."""
    if old == new:
        return packs
    changed = {d for a, b in zip(old, new) if a != b for d in (a, b)}
    members = _members(new, len(packs), order)
    return [_first_fit(members[d], lengths, capacity) if d in changed else packs[d] for d in range(len(packs))]


def _split(pack: list[int], lengths: Sequence[int]) -> tuple[list[int], list[int]]:
    """Two halves of a pack with similar token counts (longest first, each to the lighter half)."""
    halves: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for gid in sorted(pack, key=lambda g: (-lengths[g], g)):
        h = 0 if sums[0] <= sums[1] else 1
        halves[h].append(gid)
        sums[h] += lengths[gid]
    return sorted(halves[0]), sorted(halves[1])


def slot_packs(
    per_rank: list[list[list[int]]], lengths: Sequence[int], costs: Sequence[int]
) -> tuple[list[tuple[int, ...]], list[str]]:
    """Steps 5 and 6: equal pack counts by splits and fillers, packs ordered by cost, in slot order."""
    dp_size = len(per_rank)
    per_rank = [[sorted(p) for p in packs] for packs in per_rank]
    target = max(len(p) for p in per_rank)
    notes: list[str] = []
    splits = fillers = 0
    for packs in per_rank:
        while len(packs) < target:
            widest = max(range(len(packs)), key=lambda j: (len(packs[j]), j), default=None)
            if widest is None or len(packs[widest]) < 2:
                packs.extend([] for _ in range(target - len(packs)))
                fillers += 1
                break
            a, b = _split(packs.pop(widest), lengths)
            packs.extend((a, b))
            splits += 1
        packs.sort(key=lambda p: (-sum([costs[g] for g in p]), -sum([lengths[g] for g in p]), p[:1]))
    if splits:
        notes.append(f"split {splits} pack(s) so every DP rank runs {target} micro-batch(es)")
    if fillers:
        empty = sum(1 for packs in per_rank for p in packs if not p)
        notes.append(f"{fillers} DP rank(s) hold fewer than {target} sample(s); added {empty} filler pack(s)")
    return [tuple(per_rank[d][k]) for k in range(target) for d in range(dp_size)], notes


def balanced_packs(
    lengths: Sequence[int], *, dp_size: int, capacity: int, cost: str = "attention", improve: bool = True
) -> tuple[list[tuple[int, ...]], list[str]]:
    """Packs in slot order and the adjustments made (see the module docstring; ``improve`` as for
    :func:`assign_ranks`)."""
    costs = sample_costs(lengths, cost)
    if not lengths:
        return [], []
    _, per_rank = assign_ranks(lengths, dp_size, capacity=capacity, cost=cost, improve=improve)
    return slot_packs(per_rank, lengths, costs)


def lpt_packs(
    lengths: Sequence[int], *, dp_size: int, capacity: int, cost: str = "attention"
) -> tuple[list[tuple[int, ...]], list[str]]:
    """Plain LPT (steps 1 and 4-6 only), the baseline of the benchmark and the tests."""
    return balanced_packs(lengths, dp_size=dp_size, capacity=capacity, cost=cost, improve=False)


class BalancedScheduler(Scheduler):
    """seqpack's ``balanced`` scheduler (see the module docstring).

    ``cost`` picks the balanced load: ``"attention"`` (sum of ``P**2``, the registered default) or
    ``"tokens"`` (sum of ``P``); pass ``BalancedScheduler(cost="tokens")`` as the ``scheduler``.
    """

    name = "balanced"

    def __init__(self, cost: str = "attention") -> None:
        sample_costs([], cost)  # rejects an unknown cost now
        self.cost = cost

    def make_packs(
        self, lengths: Sequence[int], *, dp_size: int, capacity: int
    ) -> tuple[list[tuple[int, ...]], list[str]]:
        """See :func:`balanced_packs`."""
        return balanced_packs(lengths, dp_size=dp_size, capacity=capacity, cost=self.cost)


class LPTScheduler(BalancedScheduler):
    """Plain LPT (:func:`lpt_packs`), the baseline of the benchmark and the tests; not registered."""

    name = "lpt"

    def make_packs(
        self, lengths: Sequence[int], *, dp_size: int, capacity: int
    ) -> tuple[list[tuple[int, ...]], list[str]]:
        """See :func:`lpt_packs`."""
        return lpt_packs(lengths, dp_size=dp_size, capacity=capacity, cost=self.cost)


register_scheduler(BalancedScheduler())
