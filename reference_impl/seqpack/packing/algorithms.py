"""Bin packing of sequence lengths into packs of a fixed token capacity.

``pack_lengths`` assigns every item (a sequence length) to a pack ("bin") with one of five
classic online/offline rules. Each rule has exactly its textbook meaning; the fast code paths
only change how the answer is computed, never which answer comes out:

``best_fit_decreasing`` (default)
    Items sorted by length, longest first; equal lengths keep input order (stable sort).
    Each item goes to the feasible bin with the least remaining space; among equally full
    bins the one opened first wins. No feasible bin: a new bin is opened at the end.
``first_fit_decreasing``
    Same order; each item goes to the earliest-opened feasible bin.
``first_fit``
    Input order; earliest-opened feasible bin.
``first_fit_shuffle``
    The packable items in a random order drawn with ``numpy.random.default_rng(seed)``
    (``rng.permutation``), then first fit. The global numpy RNG is never used.
``next_fit``
    Input order; only the most recently opened bin is considered.

A bin is *feasible* for an item when the item fits in its remaining space and, when
``max_seqs_per_pack`` is set, the bin holds fewer than that many items. Zero-length items fit
any bin that still has room for one more item.

How it is fast: BFD and FFD process all items of one distinct length in a single vectorised
step. With items taken longest first, a bin that receives an item of length ``L`` keeps
receiving items of that length until its free space drops below ``L`` (or it is full), so one
step reduces to "walk the candidate bins in rule order and hand each ``min(free // L, room)``
items". BFD keeps its bins bucketed by free space (one bucket per free-space level), FFD keeps
bins in opening order in blocks with a per-block maximum of the free space. Python work is
proportional to the number of distinct lengths and buckets touched, not to the number of items
(FFD switches to the per-item search below when there are few items per distinct length).
First fit in input or shuffled order has no such structure; per item it bisects the running
maximum of the bins' free space, with a max segment tree over the bins (O(n log n)) as the bound
for inputs that make that maximum costly to repair. Next fit is a single linear pass.

The result is returned as ``PackResult``: a bin id per item plus a CSR layout (items grouped
by bin in placement order), per-bin token sums and summary statistics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import numpy as np

from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.choices import ALGORITHMS as CHOICE_ALGORITHMS
from seqpack.core.choices import OVERSIZE_MODES
from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.packing.fit import (
    MAX_BFD_CAPACITY,
    best_fit_decreasing,
    first_fit_decreasing,
    Layout,
    layout_from_steps,
    next_fit,
    first_fit_in_order,
)

logger = logging.getLogger(__name__)

ALGORITHMS: tuple[str, ...] = CHOICE_ALGORITHMS
OVERSIZE_POLICIES: tuple[str, ...] = OVERSIZE_MODES
_T = TypeVar("_T")



# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class PackResult:
    """The outcome of one packing run.

    Assignment, two equivalent forms:

    * ``bin_ids[i]``: the bin of item ``i`` (int64), ``-1`` when the item was left out
      (only oversize items under ``oversize="report"``);
    * CSR: ``order[offsets[b]:offsets[b + 1]]`` are the items of bin ``b`` in the order the
      algorithm placed them. Bins are numbered in the order they were opened.

    ``bin_sums[b]`` is the number of tokens in bin ``b`` (truncated items count as
    ``capacity``). ``oversize`` lists every item longer than ``capacity``; ``truncated`` lists
    those that were packed as ``capacity`` tokens (policy ``"truncate"``). Under ``"report"``
    the oversize items are exactly the items with ``bin_ids == -1``.
    """

    bin_ids: np.ndarray
    order: np.ndarray
    offsets: np.ndarray
    bin_sums: np.ndarray
    capacity: int
    algorithm: str
    seed: int
    max_seqs_per_pack: int | None
    oversize_policy: str
    oversize: np.ndarray
    truncated: np.ndarray

    def __post_init__(self) -> None:
        for name in ("bin_ids", "order", "offsets", "bin_sums", "oversize", "truncated"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    # -- sizes -----------------------------------------------------------------------------
    @property
    def num_items(self) -> int:
        """Number of input items (packed or not)."""
        return int(self.bin_ids.shape[0])

    @property
    def num_packed(self) -> int:
        """Number of items placed in a bin."""
        return int(self.order.shape[0])

    @property
    def num_bins(self) -> int:
        """Number of bins (packs)."""
        return int(self.offsets.shape[0] - 1)

    @property
    def bin_counts(self) -> np.ndarray:
        """Items per bin (int64, one entry per bin)."""
        return np.diff(self.offsets)

    @property
    def total_tokens(self) -> int:
        """Tokens placed in bins (truncated items count as ``capacity``)."""
        return int(self.bin_sums.sum())

    # -- quality ---------------------------------------------------------------------------
    @property
    def efficiency(self) -> float:
        """Packed tokens / (bins x capacity); 0.0 when there is no bin."""
        if self.num_bins == 0:
            return 0.0
        return self.total_tokens / (self.num_bins * self.capacity)

    @property
    def lower_bound(self) -> int:
        """ceil(packed tokens / capacity): no packing of these items uses fewer bins."""
        return -(-self.total_tokens // self.capacity)

    @property
    def max_items_per_bin(self) -> int:
        """Largest number of items in one bin (0 without bins)."""
        return int(self.bin_counts.max()) if self.num_bins else 0

    @property
    def min_bin_fill(self) -> int:
        """Fewest tokens in one bin (0 without bins)."""
        return int(self.bin_sums.min()) if self.num_bins else 0

    # -- views -----------------------------------------------------------------------------
    def bins(self) -> list[list[int]]:
        """Item indices per bin, bins in opening order, items in placement order."""
        order = self.order.tolist()
        offs = self.offsets.tolist()
        return [order[offs[b] : offs[b + 1]] for b in range(len(offs) - 1)]

    def stats(self) -> dict[str, Any]:
        """Scalar summary (JSON-able)."""
        nb = self.num_bins
        return {
            "algorithm": self.algorithm,
            "seed": self.seed,
            "capacity": self.capacity,
            "max_seqs_per_pack": self.max_seqs_per_pack,
            "oversize_policy": self.oversize_policy,
            "num_items": self.num_items,
            "num_packed": self.num_packed,
            "num_bins": nb,
            "total_tokens": self.total_tokens,
            "efficiency": self.efficiency,
            "lower_bound": self.lower_bound,
            "bins_over_lower_bound": nb - self.lower_bound,
            "max_items_per_bin": self.max_items_per_bin,
            "mean_items_per_bin": (self.num_packed / nb) if nb else 0.0,
            "min_bin_fill": self.min_bin_fill,
            "num_oversize": int(self.oversize.shape[0]),
            "num_truncated": int(self.truncated.shape[0]),
        }

    def to_dict(self, include_assignment: bool = False) -> dict[str, Any]:
        """Stats plus the oversize/truncated item lists; per-item and per-bin arrays on request."""
        out = self.stats()
        out["oversize"] = self.oversize.tolist()
        out["truncated"] = self.truncated.tolist()
        if include_assignment:
            out["bin_ids"] = self.bin_ids.tolist()
            out["order"] = self.order.tolist()
            out["offsets"] = self.offsets.tolist()
            out["bin_sums"] = self.bin_sums.tolist()
        return out


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------


def as_length_array(lengths: Sequence[int] | np.ndarray, *, field: str = "lengths") -> np.ndarray:
    """Validate ``lengths`` (1-D, integer, non-negative) and return it as an int64 array."""
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise UsageError(f"{field} must be one-dimensional, got shape {arr.shape}", field=field)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise InputError(
            f"{field} must hold integers, got dtype {arr.dtype}",
            field=field,
            fix="pass token counts as ints",
        )
    arr = arr.astype(np.int64, copy=False)
    if int(arr.min()) < 0:
        bad = int(np.flatnonzero(arr < 0)[0])
        raise InputError(
            f"{field}[{bad}] is {int(arr[bad])}; lengths must be >= 0", row=bad, field=field
        )
    return arr


def pack_lengths(
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    algorithm: str = "best_fit_decreasing",
    *,
    seed: int = 0,
    max_seqs_per_pack: int | None = None,
    oversize: str = "error",
) -> PackResult:
    """Pack items of the given lengths into bins of ``capacity`` tokens.

    ``algorithm`` is one of ``ALGORITHMS`` (module docstring gives the exact rules);
    ``seed`` drives ``first_fit_shuffle`` only; ``max_seqs_per_pack`` caps items per bin.
    Items longer than ``capacity``: ``oversize="error"`` raises ``PackingError``,
    ``"report"`` leaves them out (listed in ``result.oversize``), ``"truncate"`` packs them
    as ``capacity`` tokens (listed in ``result.truncated``). Same inputs -> same bins.
    """
    arr = as_length_array(lengths)
    capacity = positive_int("capacity", capacity)
    if algorithm not in ALGORITHMS:
        raise UsageError(
            f"unknown packing algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}",
            field="algorithm",
        )
    max_seqs_per_pack = positive_int("max_seqs_per_pack", max_seqs_per_pack, allow_none=True)
    if oversize not in OVERSIZE_POLICIES:
        raise UsageError(
            f"unknown oversize policy {oversize!r}; choose one of {', '.join(OVERSIZE_POLICIES)}",
            field="oversize",
        )
    non_negative_int("seed", seed)
    if algorithm == "best_fit_decreasing" and capacity > MAX_BFD_CAPACITY:
        raise UsageError(
            f"best_fit_decreasing keeps one counter per free-space level and supports capacities "
            f"up to {MAX_BFD_CAPACITY}, got {capacity}",
            field="capacity",
            fix="use algorithm='first_fit_decreasing' for larger packs",
        )
    cap_m = None if max_seqs_per_pack is None else int(max_seqs_per_pack)

    n = int(arr.shape[0])
    over = np.flatnonzero(arr > capacity)
    truncated = np.zeros(0, dtype=np.int64)
    keep: np.ndarray | None = None  # items to pack when not all of them
    work = arr
    if over.size:
        first = int(over[0])
        if oversize == "error":
            raise PackingError(
                f"{over.size} item(s) longer than the pack capacity {capacity}; the first is "
                f"item {first} with length {int(arr[first])}",
                row=first,
                field="lengths",
                fix="raise the capacity, or pass oversize='report' (leave them out) or "
                "oversize='truncate' (pack them cut to the capacity)",
            )
        if oversize == "report":
            keep = np.flatnonzero(arr <= capacity)
            work = arr[keep]
            logger.warning("left %d item(s) longer than %d out of every bin", over.size, capacity)
        else:
            work = np.minimum(arr, capacity)
            truncated = over
            logger.warning(
                "packing %d item(s) longer than %d cut to the capacity", over.size, capacity
            )

    bins_local, order_local, offsets, bin_sums = _run(work, capacity, algorithm, seed, cap_m)
    if keep is None:
        bin_ids = bins_local
        order = order_local
    else:
        bin_ids = np.full(n, -1, dtype=np.int64)
        bin_ids[keep] = bins_local
        order = keep[order_local]
    return PackResult(
        bin_ids=bin_ids,
        order=order,
        offsets=offsets,
        bin_sums=bin_sums,
        capacity=capacity,
        algorithm=algorithm,
        seed=int(seed),
        max_seqs_per_pack=cap_m,
        oversize_policy=oversize,
        oversize=over,
        truncated=truncated,
    )


def pack_items(
    items: Sequence[_T],
    capacity: int,
    algorithm: str = "best_fit_decreasing",
    *,
    item_lengths: Sequence[int] | np.ndarray | None = None,
    seed: int = 0,
    max_seqs_per_pack: int | None = None,
    oversize: str = "error",
) -> list[list[_T]]:
    """Pack arbitrary payloads (samples, dicts, ids) into bins; returns the payloads grouped by bin.

    By default every item is its own length (integers). Pass ``item_lengths`` (keyword only, one
    token count per item, in the same order) to pack objects, as Megatron-Bridge's ``first_fit``
    does; a different number of lengths and items is a ``UsageError``. The bins and the order inside
    them are exactly those of :func:`pack_lengths` on the lengths; with ``oversize="report"`` the
    items left out are not in any bin (``pack_lengths(...).oversize`` lists them).
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise UsageError(f"items must be a sequence, got {type(items).__name__}", field="items")
    lengths = items if item_lengths is None else item_lengths
    if item_lengths is not None and len(item_lengths) != len(items):
        raise UsageError(
            f"items and item_lengths must have the same number of entries, got {len(items)} and "
            f"{len(item_lengths)}",
            field="item_lengths",
        )
    result = pack_lengths(
        lengths, capacity, algorithm, seed=seed, max_seqs_per_pack=max_seqs_per_pack, oversize=oversize
    )
    return [[items[i] for i in b] for b in result.bins()]


def _run(
    lengths: np.ndarray, capacity: int, algorithm: str, seed: int, max_seqs: int | None
) -> Layout:
    """Dispatch to a core; returns bin per item, CSR order and offsets, and tokens per bin."""
    n = int(lengths.shape[0])
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return layout_from_steps(lengths, empty, empty, empty, 0)
    if algorithm == "best_fit_decreasing":
        return best_fit_decreasing(lengths, capacity, max_seqs)
    if algorithm == "first_fit_decreasing":
        return first_fit_decreasing(lengths, capacity, max_seqs)
    if algorithm == "next_fit":
        bins, ranks, nbins = next_fit(lengths, capacity, max_seqs)
        return layout_from_steps(lengths, np.arange(n, dtype=np.int64), bins, ranks, nbins)
    if algorithm == "first_fit":
        sequence = np.arange(n, dtype=np.int64)
    else:  # first_fit_shuffle
        sequence = np.random.default_rng(seed).permutation(n).astype(np.int64)
    bins, ranks, nbins = first_fit_in_order(lengths[sequence], capacity, max_seqs)
    return layout_from_steps(lengths, sequence, bins, ranks, nbins)
