"""The bin-packing rules of :func:`seqpack.packing.algorithms.pack_lengths`, each computed fast.

Best fit and first fit decreasing process all items of one distinct length in a single vectorised step
(BFD keeps bins bucketed by free-space level, FFD keeps bins in opening order in blocks with a per-block
maximum); first fit in a given order bisects the running maximum of the bins' free space, with a max
segment tree as the bound; next fit is one pass. Each returns a layout: bin per item, the items grouped
by bin in placement order (CSR order and offsets) and the tokens per bin.
"""

from __future__ import annotations

import bisect
import logging
from typing import Sequence

import numpy as np

from seqpack.core.errors import PackingError
from seqpack.core.limits import MAX_PACK_LEN

logger = logging.getLogger(__name__)

# Best fit keeps one counter per free-space level, so its memory grows with the capacity.
MAX_BFD_CAPACITY = MAX_PACK_LEN
# Bins per block in the first-fit-decreasing block index.
_FFD_BLOCK = 256
# First fit decreasing costs about one vectorised step (~25 us) per distinct length, or about 1 us
# per item with first_fit_in_order; below this many items per distinct length the per-item search wins.
_FFD_ITEMS_PER_LENGTH = 12

Layout = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # bin_ids, order, offsets, bin_sums


def layout_from_steps(
    lengths: np.ndarray, proc: np.ndarray, bins: np.ndarray, ranks: np.ndarray, nbins: int
) -> Layout:
    """Layout from per-step placements: step ``t`` put item ``proc[t]`` into ``bins[t]`` as
    that bin's ``ranks[t]``-th item."""
    m = int(proc.shape[0])
    counts = np.bincount(bins, minlength=nbins).astype(np.int64, copy=False)
    offsets = np.zeros(nbins + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = np.empty(m, dtype=np.int64)
    order[offsets[bins] + ranks] = proc
    bin_ids = np.empty(m, dtype=np.int64)
    bin_ids[proc] = bins
    bin_sums = np.bincount(bins, weights=lengths[proc], minlength=nbins).astype(np.int64)
    return bin_ids, order, offsets, bin_sums


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def decreasing_order(lengths: np.ndarray) -> np.ndarray:
    """Item indices sorted by length, longest first, ties in input order (a stable sort)."""
    n = int(lengths.shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    top = int(lengths.max())
    if top < (1 << 16):
        # A stable argsort of a 16-bit key is a radix sort in numpy: O(n).
        key = (top - lengths).astype(np.uint16)
    else:
        key = top - lengths
    return np.argsort(key, kind="stable").astype(np.int64, copy=False)


def _length_groups(lengths: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """Decreasing order plus, per distinct length (longest first), its value and run length."""
    order = decreasing_order(lengths)
    if int(lengths.max()) < (1 << 20):
        hist = np.bincount(lengths)
        distinct = np.flatnonzero(hist)[::-1]
        return order, distinct.tolist(), hist[distinct].tolist()
    ranked = lengths[order]  # huge lengths: run-length encode the sorted values instead
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    runs = np.diff(np.r_[starts, ranked.shape[0]])
    return order, ranked[starts].tolist(), runs.tolist()


# --------------------------------------------------------------------------------------------
# Best fit decreasing: bins bucketed by free-space level
# --------------------------------------------------------------------------------------------


def best_fit_decreasing(
    lengths: np.ndarray, capacity: int, max_seqs: int | None
) -> Layout:
    n = int(lengths.shape[0])
    cap = capacity
    order, values, runs = _length_groups(lengths)
    min_len = values[-1]  # a bin with less free space than this is never read again
    count = np.zeros(n, dtype=np.int64)  # items per bin (at most n bins)
    iota = np.arange(n + 1, dtype=np.int64)
    # Bins that can still take items, filed by free-space level: ``buckets[f]`` is a list of
    # sorted id arrays (merged when the level is read), ``sizes[f]`` their total size and
    # ``nonempty`` the sorted list of levels holding bins.
    buckets: dict[int, list[np.ndarray]] = {}
    sizes = [0] * (cap + 1)
    nonempty: list[int] = []
    rec = _Placements()
    nbins = 0

    for length, k in zip(values, runs):
        need = k
        pending: list[tuple[int, np.ndarray]] = []  # (level, sorted ids) to file after the step
        first = bisect.bisect_left(nonempty, length)
        j = first
        # Levels are visited from the tightest fit up; each is emptied except possibly the last.
        while need > 0 and j < len(nonempty):
            f = nonempty[j]
            j += 1
            parts = buckets.pop(f)
            ids = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            sizes[f] = 0
            before = count[ids]
            q_level = f // length if length else need
            if max_seqs is None:
                if ids.shape[0] * q_level <= need:
                    count[ids] = before + q_level
                    rec.add(ids, q_level, before, length)
                    pending.append((f - q_level * length, ids))
                    need -= ids.shape[0] * q_level
                    continue
                full, r = divmod(need, q_level)
                if full:
                    used = ids[:full]
                    count[used] = before[:full] + q_level
                    rec.add(used, q_level, before[:full], length)
                    pending.append((f - q_level * length, used))
                if r:
                    used = ids[full : full + 1]
                    count[used] = before[full : full + 1] + r
                    rec.add(used, r, before[full : full + 1], length)
                    pending.append((f - r * length, used))
                    full += 1
                pending.append((f, ids[full:]))
                need = 0
                continue
            q = np.minimum(q_level, max_seqs - before)
            cq = np.cumsum(q)
            total = int(cq[-1])
            if total <= need:
                used, qu, bef = ids, q, before
                need -= total
                partial = False
            else:
                cut = int(np.searchsorted(cq, need)) + 1
                used, qu, bef = ids[:cut], q[:cut].copy(), before[:cut]
                qu[-1] -= int(cq[cut - 1]) - need
                partial = bool(qu[-1] < q[cut - 1])
                pending.append((f, ids[cut:]))
                need = 0
            newc = bef + qu
            count[used] = newc
            rec.add(used, qu, bef, length)
            alive = newc < max_seqs
            if partial:
                alive[-1] = False
                if newc[-1] < max_seqs:
                    pending.append((f - int(qu[-1]) * length, used[-1:]))
            pending.append((f - q_level * length, used[alive]))
        del nonempty[first:j]
        if need > 0:
            # Every existing bin is too full: open new bins, each taking as many as fit.
            per_new = cap // length if length else need
            if max_seqs is not None:
                per_new = min(per_new, max_seqs)
            nb, r = divmod(need, per_new)
            if nb:
                new = iota[nbins : nbins + nb]
                count[nbins : nbins + nb] = per_new
                rec.add(new, per_new, 0, length)
                if max_seqs is None or per_new < max_seqs:
                    pending.append((cap - per_new * length, new))
                nbins += nb
            if r:
                new = iota[nbins : nbins + 1]
                count[nbins] = r
                rec.add(new, r, 0, length)
                pending.append((cap - r * length, new))
                nbins += 1
        for level, ids in pending:
            if level < min_len or ids.shape[0] == 0:
                continue
            if sizes[level]:
                buckets[level].append(ids)
            else:
                buckets[level] = [ids]
                bisect.insort(nonempty, level)
            sizes[level] += ids.shape[0]
    return rec.layout(order, count, nbins)


class _Placements:
    """Bulk placements in processing order: records of (bins, items each takes, items each
    bin held before, item length)."""

    def __init__(self) -> None:
        self.bins: list[np.ndarray] = []
        self.takes: list[np.ndarray | int] = []
        self.before: list[np.ndarray | int] = []
        self.lengths: list[int] = []

    def add(
        self, bins: np.ndarray, take: np.ndarray | int, before: np.ndarray | int, length: int
    ) -> None:
        self.bins.append(bins)
        self.takes.append(take)
        self.before.append(before)
        self.lengths.append(length)

    def layout(self, order: np.ndarray, counts: np.ndarray, nbins: int) -> Layout:
        """Final layout; ``order`` is the processing order, ``counts`` the items per bin."""
        n = int(order.shape[0])
        offsets = np.zeros(nbins + 1, dtype=np.int64)
        np.cumsum(counts[:nbins], out=offsets[1:])
        sizes = [b.shape[0] for b in self.bins]
        bins = np.concatenate(self.bins)
        takes = _expand(self.takes, sizes)
        before = _expand(self.before, sizes)
        # item j of a record entry (bin b, take t) lands at offsets[b] + before + j
        pos = offsets[bins]
        pos += before
        first_step = takes.cumsum()
        first_step -= takes
        pos -= first_step
        pos = pos.repeat(takes)
        pos += np.arange(n, dtype=np.int64)
        csr = np.empty(n, dtype=np.int64)
        csr[pos] = order
        bin_ids = np.empty(n, dtype=np.int64)
        bin_ids[order] = bins.repeat(takes)
        tokens = np.repeat(np.asarray(self.lengths, dtype=np.int64), sizes)
        tokens *= takes
        bin_sums = np.bincount(bins, weights=tokens, minlength=nbins).astype(np.int64)
        return bin_ids, csr, offsets, bin_sums


def _expand(values: list[np.ndarray | int], sizes: list[int]) -> np.ndarray:
    """Concatenate per-record values, a scalar standing for ``size`` copies of itself."""
    is_array = [not isinstance(v, int) for v in values]
    scalars = np.asarray([0 if a else v for a, v in zip(is_array, values)], dtype=np.int64)
    out = np.repeat(scalars, sizes)
    arrays = [v for a, v in zip(is_array, values) if a]
    if arrays:
        out[np.repeat(np.asarray(is_array), sizes)] = np.concatenate(arrays)
    return out


# --------------------------------------------------------------------------------------------
# First fit decreasing: bins in opening order, grouped in blocks with a per-block max
# --------------------------------------------------------------------------------------------


def first_fit_decreasing(lengths: np.ndarray, capacity: int, max_seqs: int | None) -> Layout:
    n = int(lengths.shape[0])
    cap = capacity
    order, values, runs = _length_groups(lengths)
    if n < _FFD_ITEMS_PER_LENGTH * len(values):
        # few items per distinct length: first fit over the sorted items, item by item
        bins, ranks, nbins = first_fit_in_order(lengths[order], cap, max_seqs)
        return layout_from_steps(lengths, order, bins, ranks, nbins)
    width_b = _FFD_BLOCK
    nblk = -(-n // width_b)
    # ``free[b]``: free space of bin b; -1 for bins not opened yet and for bins holding
    # ``max_seqs`` items. ``bmax`` is the per-block maximum, so blocks without a candidate
    # are skipped. New bins are opened (in order) only once no opened bin has room.
    free = np.full(nblk * width_b, -1, dtype=np.int64)
    count = np.zeros(nblk * width_b, dtype=np.int64)
    bmax = np.full(nblk, -1, dtype=np.int64)
    lane = np.arange(width_b, dtype=np.int64)
    iota = np.arange(n + 1, dtype=np.int64)
    top_of = np.maximum.reduce
    rec = _Placements()
    nbins = 0
    for length, k in zip(values, runs):
        need = k
        opened_blocks = -(-nbins // width_b)
        cand = (bmax[:opened_blocks] >= length).nonzero()[0]
        # few candidate blocks: take them all at once; else grow the window geometrically
        start, width = 0, (cand.shape[0] if cand.shape[0] <= 8 else 2)
        while need > 0 and start < cand.shape[0]:
            # Candidate bins of the next blocks, in opening order.
            if width == 1:  # one block: work on a view, no index arrays
                blk = int(cand[start])
                base = blk * width_b
                window = free[base : base + width_b]
                offs = (window >= length).nonzero()[0]
                sel = offs + base
                fsel = window[offs]
            else:
                blk = -1
                blks = cand[start : start + width]
                idx = (blks[:, None] * width_b + lane).ravel()
                fr = free[idx]
                ok = fr >= length
                sel = idx[ok]
                fsel = fr[ok]
            start += width
            width *= 4
            # Each takes min(free // L, room) items, in order, until ``need`` is met.
            before = count[sel]
            q = fsel // length if length else np.full(sel.shape[0], need, dtype=np.int64)
            if max_seqs is not None:
                np.minimum(q, max_seqs - before, out=q)
            cq = q.cumsum()
            total = int(cq[-1])
            if total > need:
                cut = int(cq.searchsorted(need)) + 1
                sel, q, fsel, before = sel[:cut], q[:cut], fsel[:cut], before[:cut]
                q[-1] -= int(cq[cut - 1]) - need
                total = need
            rec.add(sel, q, before, length)
            newc = before + q
            count[sel] = newc
            nf = fsel - q * length
            if max_seqs is not None:
                nf[newc >= max_seqs] = -1
            free[sel] = nf
            if blk >= 0:
                bmax[blk] = top_of(window)
            else:
                bmax[blks] = top_of(free[idx].reshape(-1, width_b), axis=1)
            need -= total
        if need > 0:
            # No opened bin has room: open new bins, each taking as many as fit.
            per_new = cap // length if length else need
            if max_seqs is not None:
                per_new = min(per_new, max_seqs)
            nb, r = divmod(need, per_new)
            first = nbins
            if nb:
                rec.add(iota[nbins : nbins + nb], per_new, 0, length)
                count[nbins : nbins + nb] = per_new
                full = max_seqs is not None and per_new >= max_seqs
                free[nbins : nbins + nb] = -1 if full else cap - per_new * length
                nbins += nb
            if r:
                rec.add(iota[nbins : nbins + 1], r, 0, length)
                count[nbins] = r
                free[nbins] = -1 if max_seqs is not None and r >= max_seqs else cap - r * length
                nbins += 1
            b0 = first // width_b
            b1 = -(-nbins // width_b)
            bmax[b0:b1] = top_of(free[b0 * width_b : b1 * width_b].reshape(-1, width_b), axis=1)
    return rec.layout(order, count, nbins)


# --------------------------------------------------------------------------------------------
# First fit in a given order: a prefix maximum searched with bisect, a max segment tree as the bound
# --------------------------------------------------------------------------------------------

#: Steps of prefix-maximum repair allowed per item (on average) before first fit moves to the tree.
_PREFIX_STEPS_PER_ITEM = 8


def first_fit_in_order(
    lengths: np.ndarray | Sequence[int],
    capacity: int,
    max_seqs: int | None = None,
    *,
    oversize_singletons: bool = False,
) -> tuple[np.ndarray, np.ndarray, int]:
    """First fit over items in the given order: returns (bin per item, rank in bin, #bins).

    Each item goes to the earliest-opened bin with enough free space (and, with
    ``max_seqs``, fewer than that many items); otherwise a new bin opens. With
    ``oversize_singletons`` an item longer than ``capacity`` opens a bin of its own that
    never takes another item (Megatron-Bridge's behaviour); otherwise such an item raises
    ``PackingError``.

    The running maximum of the bins' free space (over bins in opening order) is non-decreasing,
    so the first bin with room is a ``bisect`` in it (C speed); placing an item repairs the
    maximum from that bin up to the next bin with at least as much room, usually a few steps.
    Inputs that make those repairs long (free space falling bin after bin) move, once the repairs
    pass :data:`_PREFIX_STEPS_PER_ITEM` per item, to a max segment tree over the bins
    (O(log bins) per item) for the rest: the same bins either way.
    """
    items = lengths.tolist() if isinstance(lengths, np.ndarray) else [int(x) for x in lengths]
    n = len(items)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), 0
    if max_seqs is None:
        fast = _first_fit_unlimited(items, capacity, oversize_singletons)
        if fast is not None:
            bins = np.asarray(fast[0], dtype=np.int64)
            return bins, ranks_in_bins(bins, fast[1]), fast[1]
    return _first_fit_general(items, capacity, max_seqs, oversize_singletons)


def _first_fit_general(items: list[int], capacity: int, max_seqs: int | None,
                       oversize_singletons: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`first_fit_in_order` on the prefix maximum with counts and ranks kept, moving to the tree when the
    repairs run long (``items`` not empty)."""
    n = len(items)
    limit = n + 1 if max_seqs is None else max_seqs
    seq_bins = [0] * n
    seq_ranks = [0] * n
    free: list[int] = []  # per opened bin; a closed bin (or an oversize singleton) reads -1
    counts: list[int] = []
    peak: list[int] = []  # peak[i] = max(free[: i + 1]), non-decreasing
    budget = _PREFIX_STEPS_PER_ITEM * n
    find = bisect.bisect_left
    for t, length in enumerate(items):
        if length > capacity:
            if not oversize_singletons:
                raise PackingError(f"item of length {length} exceeds the capacity {capacity}")
            b = len(free)
        else:
            b = find(peak, length)
        if b == len(free):  # a new bin
            f = capacity - length if length <= capacity else -1
            if limit <= 1:
                f = -1
            free.append(f)
            counts.append(1)
            peak.append(f if not peak or f > peak[-1] else peak[-1])
            seq_bins[t] = b
            continue
        seq_bins[t] = b
        c = counts[b]
        seq_ranks[t] = c
        counts[b] = c + 1
        old = free[b]
        f = -1 if c + 1 >= limit else old - length
        free[b] = f
        # repair the running maximum from b on: it held old up to the next bin with >= old free
        cur = peak[b - 1] if b else -1
        if f > cur:
            cur = f
        last = len(free)
        j = b
        while True:
            peak[j] = cur
            j += 1
            if j == last:
                break
            fj = free[j]
            if fj >= old:
                break
            if fj > cur:
                cur = fj
        budget -= j - b
        if budget < 0:
            _first_fit_tree(items, t + 1, capacity, limit, oversize_singletons, free, counts, seq_bins, seq_ranks)
            break
    return np.asarray(seq_bins, dtype=np.int64), np.asarray(seq_ranks, dtype=np.int64), len(free)


def ranks_in_bins(bins: np.ndarray, nbins: int) -> np.ndarray:
    """Each item's rank among the items of its bin, counted in item order."""
    order = np.argsort(bins, kind="stable")
    counts = np.bincount(bins, minlength=nbins)
    starts = np.cumsum(counts) - counts
    ranks = np.empty_like(bins)
    ranks[order] = np.arange(bins.shape[0], dtype=np.int64) - starts[bins[order]]
    return ranks


def first_fit_bins(lengths: np.ndarray, capacity: int, *, oversize_singletons: bool = False) -> tuple[np.ndarray, int]:
    """:func:`first_fit_in_order` without a per-bin item limit, as (bin per item, #bins): what a caller that
    groups items by bin itself needs (no ranks)."""
    items = lengths.tolist()
    if not items:
        return np.zeros(0, dtype=np.int64), 0
    fast = _first_fit_unlimited(items, capacity, oversize_singletons)
    if fast is None:  # long repairs: the general search (once), which moves to the tree
        bins, _, nbins = _first_fit_general(items, capacity, None, oversize_singletons)
        return bins, nbins
    return np.asarray(fast[0], dtype=np.int64), fast[1]


def _first_fit_unlimited(items: list[int], capacity: int, oversize_singletons: bool) -> tuple[list[int], int] | None:
    """The prefix-maximum first fit with no per-bin item limit and nothing but the bins kept (the loop of
    :func:`first_fit_in_order` with its bookkeeping of counts and ranks left out); None when the repairs that walk
    past the next bin pass their budget (the caller then runs the general search, which moves to the tree).

    An item longer than every bin's free space (``top``) opens a bin without a search. After a placement in bin
    ``b``, the running maximum changes from ``b`` up to the next bin with at least the old free space of ``b``;
    most of the time that is ``b + 1``, or ``b`` is the last bin, and only ``peak[b]`` is written.
    """
    seq_bins: list[int] = []
    add = seq_bins.append
    free: list[int] = []
    peak: list[int] = []  # peak[i] = max(free[: i + 1]), non-decreasing; top = peak[-1]
    nbins = 0
    top = -1
    budget = _PREFIX_STEPS_PER_ITEM * len(items)
    find = bisect.bisect_left
    for length in items:
        if length <= top:
            b = find(peak, length)
            add(b)
            old = free[b]
            f = old - length
            free[b] = f
            cur = peak[b - 1] if b else -1
            if f > cur:
                cur = f
            peak[b] = cur
            j = b + 1
            if j == nbins:
                top = cur
                continue
            if free[j] >= old:
                continue
            while True:  # free space falls after b: repair the running maximum until a bin with >= old
                fj = free[j]
                if fj >= old:
                    break
                if fj > cur:
                    cur = fj
                peak[j] = cur
                j += 1
                if j == nbins:
                    top = cur
                    break
            budget -= j - b
            if budget < 0:
                return None
            continue
        if length <= capacity:
            f = capacity - length
        elif oversize_singletons:
            f = -1
        else:
            raise PackingError(f"item of length {length} exceeds the capacity {capacity}")
        add(nbins)
        free.append(f)
        if f > top:
            top = f
        peak.append(top)
        nbins += 1
    return seq_bins, nbins


def _first_fit_tree(items: list[int], start: int, capacity: int, limit: int, oversize_singletons: bool,
                    free: list[int], counts: list[int], seq_bins: list[int], seq_ranks: list[int]) -> None:
    """First fit of ``items[start:]`` on a max segment tree over the bins, from the state the prefix
    search left (``free`` and ``counts`` of the opened bins, extended in place)."""
    rest = items[start:]
    fitting = [x for x in rest if x <= capacity] if capacity > 0 else []
    bound = len(free) + (len(rest) if capacity <= 0 else min(len(rest), 2 * sum(fitting) // capacity + 2
                                                              + len(rest) - len(fitting)))
    size = 1 << max(0, (bound - 1).bit_length())
    # Leaves are bins; a bin not opened yet has the full capacity free, so the tree walk
    # lands on "open a new bin" by itself. A closed bin reads -1.
    tree = [capacity] * (2 * size)
    tree[size : size + len(free)] = free
    for node in range(size - 1, 0, -1):
        left, right = tree[2 * node], tree[2 * node + 1]
        tree[node] = left if left > right else right
    nbins = len(free)
    counts.extend([0] * (size - len(counts)))
    for t in range(start, len(items)):
        length = items[t]
        if nbins == size or tree[1] < length <= capacity:  # every leaf is an opened bin: double the tree
            leaves = tree[size:]
            size *= 2
            tree = [capacity] * (2 * size)
            tree[size : size + len(leaves)] = leaves
            for node in range(size - 1, 0, -1):
                left, right = tree[2 * node], tree[2 * node + 1]
                tree[node] = left if left > right else right
            counts.extend([0] * (size - len(counts)))
        if length > capacity:
            if not oversize_singletons:
                raise PackingError(f"item of length {length} exceeds the capacity {capacity}")
            b = nbins
            node = b + size
            free_after = -1
        else:
            node = 1
            while node < size:
                node <<= 1
                if tree[node] < length:
                    node += 1
            b = node - size
            free_after = tree[node] - length
        c = counts[b]
        seq_ranks[t] = c
        c += 1
        counts[b] = c
        if c >= limit:
            free_after = -1
        seq_bins[t] = b
        if b >= nbins:
            nbins = b + 1
        tree[node] = free_after
        node >>= 1
        while node:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            top = left if left > right else right
            if tree[node] == top:
                break
            tree[node] = top
            node >>= 1
    free[:] = tree[size : size + nbins]


# --------------------------------------------------------------------------------------------
# Next fit: one pass
# --------------------------------------------------------------------------------------------


def next_fit(
    lengths: np.ndarray, capacity: int, max_seqs: int | None
) -> tuple[np.ndarray, np.ndarray, int]:
    n = int(lengths.shape[0])
    limit = n + 1 if max_seqs is None else max_seqs
    bins = [0] * n
    ranks = [0] * n
    b = -1
    used = capacity + 1  # forces a bin to open for the first item
    c = 0
    for i, length in enumerate(lengths.tolist()):
        if used + length > capacity or c >= limit:
            b += 1
            used = 0
            c = 0
        bins[i] = b
        ranks[i] = c
        used += length
        c += 1
    return np.asarray(bins, dtype=np.int64), np.asarray(ranks, dtype=np.int64), b + 1
