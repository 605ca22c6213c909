"""Reproduce Megatron-Bridge's offline packing strategy exactly.

Bridge's offline preparation packs *lengths*, then hands out samples:

1. histogram of runtime lengths (``len(input_ids) - 1``); samples longer than the tokenizer
   budget ``max_seq_length`` are dropped (here: returned in ``skipped``, never lost silently);
2. the histogram expanded to an ascending list of lengths;
3. ``first_fit_shuffle`` only: that list shuffled with numpy's legacy Mersenne-Twister stream;
4. first fit (``first_fit_decreasing``: stable sort longest first, then first fit) -> bins of
   lengths; a length over the pack size gets a bin of its own;
5. fill: for every length ``0..pack_size`` in ascending order with at least one sample, one
   ``permutation`` of that length's samples (dataset order); each bin, in order, takes for
   each of its lengths the *last* remaining sample of that length.

Bridge seeds the global legacy RNG once (``np.random.seed(seed)``) before step 3 and restores
the caller's state after step 5, so steps 3 and 5 draw from one stream. Here that stream is a
private ``numpy.random.RandomState(seed)``: it yields exactly the same numbers (same legacy
seeding, same shuffle and permutation algorithms) and the global RNG is never touched, so
there is nothing to save or restore. Pass the same ``RandomState`` object to
``bridge_packing_strategy`` and ``bridge_fill_assignment`` (``bridge_pack_samples`` does).

The metadata dict has Bridge's six keys, in Bridge's order, with its float arithmetic and
Python ``round(x, 2)``; ``bridge_pack_metadata`` is reusable by any offline pipeline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.random  # noqa: F401 - Bridge's legacy stream: loaded with this module, not inside the first call

from seqpack.core.arguments import is_int, non_negative_int, positive_int
from seqpack.core.errors import PackingError, UsageError
from seqpack.packing.algorithms import as_length_array, pack_lengths
from seqpack.packing.fit import first_fit_bins

logger = logging.getLogger(__name__)

BRIDGE_ALGORITHMS: tuple[str, ...] = ("first_fit_shuffle", "first_fit_decreasing", "first_fit")
BRIDGE_METADATA_KEYS: tuple[str, ...] = (
    "dataset_max_seqlen",
    "max_samples_per_bin",
    "packing_factor",
    "packing_efficiency",
    "pack_size",
    "min_packed_seqlen",
)


def bridge_rng(seed: int) -> np.random.RandomState:
    """The legacy stream Bridge draws from after ``np.random.seed(seed)``, as a private object."""
    if not is_int(seed) or not 0 <= seed < 2**32:
        raise UsageError(f"seed must be an integer in [0, 2**32), got {seed!r}", field="seed")
    return np.random.RandomState(int(seed))


def _as_rng(rng: np.random.RandomState | int) -> np.random.RandomState:
    if isinstance(rng, np.random.RandomState):
        return rng
    return bridge_rng(rng)


# --------------------------------------------------------------------------------------------
# Histogram
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeHistogram:
    """Runtime-length histogram as Bridge builds it.

    ``histogram[L]`` counts the kept samples of runtime length ``L`` (``0..max_seq_length``);
    ``buckets[L]`` lists their indices in dataset order; ``skipped`` lists the samples longer
    than ``max_seq_length`` that Bridge drops.
    """

    histogram: list[int]
    buckets: dict[int, list[int]]
    skipped: list[int]
    max_seq_length: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (bucket keys become strings)."""
        return {
            "histogram": list(self.histogram),
            "buckets": {str(k): list(v) for k, v in self.buckets.items()},
            "skipped": list(self.skipped),
            "max_seq_length": self.max_seq_length,
        }


def _histogram_counts(lengths: np.ndarray, max_seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts per runtime length ``0..max_seq_length``, the samples longer than it), with Bridge's warning."""
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 0:
        raise UsageError(
            f"max_seq_length must be an integer >= 0, got {max_seq_length!r}",
            field="max_seq_length",
        )
    s = int(max_seq_length)
    skipped = np.flatnonzero(lengths > s)
    if skipped.size:
        logger.warning(
            "skipping %d sample(s) longer than the maximum sequence length %d (first: sample %d)",
            skipped.size,
            s,
            int(skipped[0]),
        )
    return np.bincount(lengths[lengths <= s], minlength=s + 1), skipped


def bridge_histogram(
    runtime_lengths: Sequence[int] | np.ndarray, max_seq_length: int
) -> BridgeHistogram:
    """Histogram of runtime lengths over ``0..max_seq_length``; longer samples are skipped."""
    lengths = as_length_array(runtime_lengths, field="runtime_lengths")
    hist, skipped = _histogram_counts(lengths, max_seq_length)
    s = int(max_seq_length)
    kept = np.flatnonzero(lengths <= s)
    order = kept[np.argsort(lengths[kept], kind="stable")]
    buckets: dict[int, list[int]] = {}
    start = 0
    for length in np.flatnonzero(hist).tolist():
        stop = start + int(hist[length])
        buckets[length] = order[start:stop].tolist()
        start = stop
    return BridgeHistogram(
        histogram=hist.tolist(), buckets=buckets, skipped=skipped.tolist(), max_seq_length=s
    )


# --------------------------------------------------------------------------------------------
# Bin assignment
# --------------------------------------------------------------------------------------------


def _assign_csr(arr: np.ndarray, pack_size: int, algorithm: str,
                rng: np.random.RandomState | int | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bridge_assign` as arrays: item indices in placement order, and bin offsets into them."""
    n = int(arr.shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if algorithm == "first_fit_decreasing" and pack_size > 0 and int(arr.max()) <= pack_size:
        result = pack_lengths(arr, pack_size, "first_fit_decreasing")
        return np.asarray(result.order, dtype=np.int64), np.asarray(result.offsets, dtype=np.int64)
    if algorithm == "first_fit_shuffle":
        if rng is None:
            raise UsageError(
                "first_fit_shuffle needs rng (a numpy RandomState, or a seed)",
                field="rng",
                fix="pass rng=bridge_rng(seed) and reuse it for bridge_fill_assignment",
            )
        # Bridge shuffles a Python list; the legacy generator draws the same numbers for an array
        # (one bounded integer per position, last to first), so the order and the stream are the same
        seq = np.arange(n, dtype=np.int64)
        _as_rng(rng).shuffle(seq)
    elif algorithm == "first_fit_decreasing":
        seq = np.argsort(-arr, kind="stable").astype(np.int64)
    else:
        seq = np.arange(n, dtype=np.int64)
    bins, nbins = first_fit_bins(arr[seq], pack_size, oversize_singletons=True)
    counts = np.bincount(bins, minlength=nbins)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return seq[np.argsort(bins, kind="stable")], offsets


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in BRIDGE_ALGORITHMS:
        raise UsageError(
            f"unknown Bridge packing algorithm {algorithm!r}; choose one of "
            f"{', '.join(BRIDGE_ALGORITHMS)}",
            field="algorithm",
        )


def _split(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    values, offs = flat.tolist(), offsets.tolist()
    return [values[offs[b] : offs[b + 1]] for b in range(len(offs) - 1)]


def bridge_assign(
    lengths: Sequence[int] | np.ndarray,
    pack_size: int,
    algorithm: str = "first_fit",
    *,
    rng: np.random.RandomState | int | None = None,
) -> list[list[int]]:
    """Bridge's bin assignment of a list of lengths: bins of item indices, in placement order.

    ``first_fit`` keeps the given order, ``first_fit_decreasing`` sorts longest first (ties
    keep input order), ``first_fit_shuffle`` shuffles with ``rng`` (a ``RandomState`` or a
    seed). An item longer than ``pack_size`` gets a bin of its own, as in Bridge. ``pack_size=0`` is
    accepted as in Bridge's ``first_fit``: every non-empty item gets its own bin and zero-length
    items share the first bin that still has room (Bridge's strategy then fails computing its
    metadata; :func:`bridge_packing_strategy` refuses 0 instead).
    """
    pack_size = non_negative_int("pack_size", pack_size)
    arr = as_length_array(lengths)
    _check_algorithm(algorithm)
    return _split(*_assign_csr(arr, pack_size, algorithm, rng))


def bridge_pack_items(
    items: Sequence[Any],
    pack_size: int,
    algorithm: str = "first_fit",
    *,
    item_lengths: Sequence[int] | np.ndarray | None = None,
) -> list[list[Any]]:
    """Bridge's ``first_fit`` / ``first_fit_decreasing`` over payloads: bins of the items themselves.

    Without ``item_lengths`` the items are their own lengths; with it (keyword only, same number of
    entries, else ``UsageError`` as Bridge's ValueError) any objects are packed by those lengths and
    come back in Bridge's bin order, oversize items in bins of their own. Bridge's
    ``first_fit_shuffle`` takes no item lengths, so neither does this.
    """
    if algorithm not in ("first_fit", "first_fit_decreasing"):
        raise UsageError(
            f"Bridge packs payloads with first_fit or first_fit_decreasing only, got {algorithm!r}",
            field="algorithm",
        )
    if item_lengths is not None and len(item_lengths) != len(items):
        raise UsageError(
            f"items and item_lengths must have the same number of entries, got {len(items)} and "
            f"{len(item_lengths)}",
            field="item_lengths",
        )
    lengths = items if item_lengths is None else item_lengths
    return [[items[i] for i in b] for b in bridge_assign(lengths, pack_size, algorithm)]


def bridge_pack_metadata(
    bin_sums: Sequence[int] | np.ndarray,
    bin_counts: Sequence[int] | np.ndarray,
    pack_size: int,
    dataset_max_seqlen: int,
) -> dict[str, int | float]:
    """Bridge's pack metadata (six keys, Bridge's order) from per-bin token sums and counts.

    ``packing_factor`` = samples / bins and ``packing_efficiency`` = mean bin sum / pack_size
    x 100, both with Python float arithmetic in Bridge's operation order and ``round(x, 2)``.
    """
    sums = [int(x) for x in np.asarray(bin_sums).tolist()]
    counts = [int(x) for x in np.asarray(bin_counts).tolist()]
    pack_size = positive_int("pack_size", pack_size)
    if len(sums) != len(counts):
        raise UsageError(
            f"bin_sums and bin_counts differ in length ({len(sums)} vs {len(counts)})",
            field="bin_counts",
        )
    if not sums:
        raise PackingError("no bins: Bridge's metadata is undefined for an empty packing")
    nbins = len(sums)
    packing_factor = sum(counts) / nbins
    packing_efficiency = sum(sums) / nbins / pack_size * 100
    return {
        "dataset_max_seqlen": int(dataset_max_seqlen),
        "max_samples_per_bin": max(counts),
        "packing_factor": round(packing_factor, 2),
        "packing_efficiency": round(packing_efficiency, 2),
        "pack_size": pack_size,
        "min_packed_seqlen": min(sums),
    }


def _strategy_csr(hist: np.ndarray, pack_size: int, algorithm: str,
                  rng: np.random.RandomState | int | None) -> tuple[np.ndarray, np.ndarray, dict[str, int | float]]:
    """:func:`bridge_packing_strategy` as arrays: the lengths of every bin's slots (flat, bin after bin),
    the bin offsets into them, and the metadata."""
    if int(hist.sum()) == 0:
        raise PackingError("the histogram is empty: there is nothing to pack", field="histogram")
    lengths = np.repeat(np.arange(hist.shape[0], dtype=np.int64), hist)
    over = int((lengths > pack_size).sum())
    if over:
        logger.warning(
            "%d length(s) exceed the pack size %d and get bins of their own (Bridge's fill "
            "step cannot place them)",
            over,
            pack_size,
        )
    order, offsets = _assign_csr(lengths, pack_size, algorithm, rng)
    slots = lengths[order]
    sums = np.add.reduceat(slots, offsets[:-1]) if slots.size else np.zeros(0, dtype=np.int64)
    metadata = bridge_pack_metadata(sums, np.diff(offsets), pack_size, int(lengths.max()))
    return slots, offsets, metadata


def bridge_packing_strategy(
    histogram: Sequence[int],
    pack_size: int,
    algorithm: str = "first_fit",
    *,
    rng: np.random.RandomState | int | None = None,
) -> tuple[list[list[int]], dict[str, int | float]]:
    """Bins of lengths plus Bridge's metadata, from a histogram of runtime lengths.

    ``algorithm`` defaults to ``first_fit``, the default of Bridge's ``create_packing_strategy``
    (Bridge's offline preparation, and :func:`bridge_pack_samples`, pass ``first_fit_shuffle``).
    The histogram is expanded to an ascending list of lengths and packed with ``algorithm``
    (``rng`` feeds ``first_fit_shuffle``). Lengths over ``pack_size`` get bins of their own,
    as in Bridge, and a warning; ``bridge_fill_assignment`` rejects such bins.
    """
    hist = as_length_array(histogram, field="histogram")
    pack_size = positive_int("pack_size", pack_size)
    _check_algorithm(algorithm)
    slots, offsets, metadata = _strategy_csr(hist, pack_size, algorithm, rng)
    return _split(slots, offsets), metadata


# --------------------------------------------------------------------------------------------
# Fill
# --------------------------------------------------------------------------------------------


def _sort_key(values: np.ndarray) -> np.ndarray:
    """``values`` (non-negative) as the narrowest unsigned type that holds them: numpy's stable sort of 8- and
    16-bit integers is a radix sort, several times faster than its merge sort of int64, with the same order."""
    top = int(values.max()) if values.size else 0
    return values.astype(np.uint16) if top < 1 << 16 else values


def _fill_csr(lengths: np.ndarray, slots: np.ndarray, offsets: np.ndarray, rs: np.random.RandomState,
              pack_size: int | None) -> np.ndarray:
    """:func:`bridge_fill_assignment` as arrays: the sample in every slot (``slots``: the slot lengths,
    flat, bin after bin, ``offsets`` into them)."""

    def bin_of(slot: int) -> int:
        return int(np.searchsorted(offsets, slot, side="right")) - 1

    max_slot = int(slots.max()) if slots.size else -1
    if pack_size is not None and max_slot > pack_size:
        where = bin_of(int(np.flatnonzero(slots == max_slot)[0]))
        raise PackingError(
            f"bin {where} has a slot of length {max_slot}, longer than the pack size {pack_size}",
            row=where,
            field="bins",
        )
    # Bridge permutes every length bucket up to the pack size (ascending); the largest slot any bin
    # asks for plays that role here (a longer sample could never be placed anyway). Each bin then
    # takes, slot by slot, the last remaining sample of the slot's length: the k-th slot of length L
    # (in bin order) gets the (k+1)-th sample from the end of L's permuted bucket.
    order = np.argsort(_sort_key(lengths), kind="stable")
    ranked = lengths[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if ranked.size else ranked
    stops = np.r_[starts[1:], ranked.shape[0]].astype(np.int64)
    uniq = ranked[starts] if ranked.size else ranked
    stacked = order.copy()
    for start, stop, length in zip(starts.tolist(), stops.tolist(), uniq.tolist()):
        if length > max_slot:
            break
        if stop - start > 1:  # a permutation of one item draws nothing from the stream
            stacked[start:stop] = order[start:stop][rs.permutation(stop - start)]
    # Every slot's bucket (its length's index in ``uniq``; a length no sample has: the empty bucket after the
    # last), and its rank among the slots of that bucket in slot order.
    if max_slot < 1 << 16:  # a table by length (small): one gather
        table = np.full(max_slot + 1, uniq.size, dtype=np.int64)
        fits = uniq <= max_slot
        table[uniq[fits]] = np.flatnonzero(fits)
        pos = table[slots]
    else:
        pos = np.searchsorted(uniq, slots)
        pos[np.r_[uniq, -1][pos] != slots] = uniq.size
    bucket_start = np.r_[starts, 0].astype(np.int64)
    bucket_size = np.r_[stops - starts, 0].astype(np.int64)
    size = bucket_size[pos]
    counts = np.bincount(pos, minlength=uniq.size + 1)
    by_bucket = np.argsort(_sort_key(pos), kind="stable")
    rank = np.empty(slots.size, dtype=np.int64)
    rank[by_bucket] = np.arange(slots.size, dtype=np.int64) - (np.cumsum(counts) - counts)[pos[by_bucket]]
    empty = np.flatnonzero(rank >= size)
    if empty.size:
        first = int(empty[0])
        raise PackingError(
            f"bin {bin_of(first)} has a slot of length {int(slots[first])} but no sample of that "
            "length is left",
            row=bin_of(first),
            field="bins",
        )
    samples = stacked[bucket_start[pos] + size - 1 - rank] if slots.size else np.zeros(0, dtype=np.int64)
    used = counts[: uniq.size]
    left = [stacked[a : b - u] for a, b, u in zip(starts.tolist(), stops.tolist(), used.tolist()) if b - u > a]
    unplaced = np.concatenate(left) if left else np.zeros(0, dtype=np.int64)
    if unplaced.size:
        raise PackingError(
            f"{unplaced.size} sample(s) have no slot in the bins (first: sample {int(unplaced.min())})",
            row=int(unplaced.min()),
            field="sample_lengths",
        )
    return samples


def bridge_fill_assignment(
    sample_lengths: Sequence[int] | np.ndarray,
    bins: Sequence[Sequence[int]],
    rng: np.random.RandomState | int,
    *,
    pack_size: int | None = None,
) -> list[list[int]]:
    """Which sample lands where: bins of lengths -> bins of sample indices, Bridge's way.

    ``sample_lengths[i]`` is sample ``i``'s runtime length. For each length present, in
    ascending order, one ``rng.permutation`` reorders that length's samples (dataset order);
    each bin then takes, per length slot, the last remaining sample of that length. ``rng``
    must be the stream the strategy used (for ``first_fit_shuffle``); a seed starts a fresh
    one (exact for ``first_fit_decreasing``, which draws nothing). With ``pack_size``, slots
    longer than it are refused as in Bridge. Raises ``PackingError`` when the bins and the
    samples do not match one to one.
    """
    lengths = as_length_array(sample_lengths, field="sample_lengths")
    counts = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    slots = np.fromiter((int(x) for b in bins for x in b), dtype=np.int64, count=int(offsets[-1]))
    return _split(_fill_csr(lengths, slots, offsets, _as_rng(rng), pack_size), offsets)


# --------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgePack:
    """Bridge's offline pack of a dataset, reproduced.

    ``bins`` are Bridge's assignments (lengths per bin); ``sample_bins`` the sample indices
    per packed row, in row order; ``skipped`` the samples Bridge drops for being longer than
    ``max_seq_length``.
    """

    bins: list[list[int]]
    sample_bins: list[list[int]]
    metadata: dict[str, int | float]
    skipped: list[int]
    pack_size: int
    max_seq_length: int
    algorithm: str
    seed: int

    def to_dict(self, include_bins: bool = False) -> dict[str, Any]:
        """JSON-able summary; the per-bin lists only when asked."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "seed": self.seed,
            "pack_size": self.pack_size,
            "max_seq_length": self.max_seq_length,
            "num_bins": len(self.bins),
            "num_samples": sum(len(b) for b in self.sample_bins),
            "skipped": list(self.skipped),
            "metadata": dict(self.metadata),
        }
        if include_bins:
            out["bins"] = [list(b) for b in self.bins]
            out["sample_bins"] = [list(b) for b in self.sample_bins]
        return out


@dataclass(frozen=True)
class BridgeAssignment:
    """Bridge's packed rows as arrays: row ``r`` holds samples ``order[offsets[r]:offsets[r + 1]]``
    (in Bridge's segment order), ``slots`` their runtime lengths; ``skipped`` the samples longer
    than ``max_seq_length``; ``metadata`` Bridge's six keys."""

    order: np.ndarray
    offsets: np.ndarray
    slots: np.ndarray
    metadata: dict[str, int | float]
    skipped: np.ndarray
    max_seq_length: int


def bridge_pack_csr(
    runtime_lengths: Sequence[int] | np.ndarray,
    pack_size: int,
    *,
    seed: int,
    algorithm: str = "first_fit_shuffle",
    max_seq_length: int | None = None,
) -> BridgeAssignment:
    """:func:`bridge_pack_samples` as arrays (what offline packing uses: no per-row lists)."""
    pack_size = positive_int("pack_size", pack_size)
    lengths = as_length_array(runtime_lengths, field="runtime_lengths")
    _check_algorithm(algorithm)
    s = pack_size if max_seq_length is None else int(max_seq_length)
    rs = bridge_rng(seed)
    hist, skipped = _histogram_counts(lengths, s)
    kept = np.flatnonzero(lengths <= s)
    too_long = kept[lengths[kept] > pack_size]
    if too_long.size:
        first = int(too_long[0])
        raise PackingError(
            f"{too_long.size} sample(s) are longer than the pack size {pack_size} but within "
            f"max_seq_length {s}; the first is sample {first} with length {int(lengths[first])}",
            row=first,
            field="runtime_lengths",
            fix="use max_seq_length <= pack_size",
        )
    slots, offsets, metadata = _strategy_csr(hist, pack_size, algorithm, rs)
    local = _fill_csr(lengths[kept], slots, offsets, rs, pack_size)
    return BridgeAssignment(order=kept[local], offsets=offsets, slots=slots, metadata=metadata, skipped=skipped,
                            max_seq_length=s)


def bridge_pack_samples(
    runtime_lengths: Sequence[int] | np.ndarray,
    pack_size: int,
    *,
    seed: int,
    algorithm: str = "first_fit_shuffle",
    max_seq_length: int | None = None,
) -> BridgePack:
    """Per-sample runtime lengths -> Bridge's packed rows (sample indices), exactly.

    Runs histogram, strategy and fill on one ``RandomState(seed)`` stream, as Bridge does
    between its ``np.random.seed(seed)`` and the restore. ``max_seq_length`` (default:
    ``pack_size``) is the histogram cut-off; samples above it are reported in ``skipped``.
    Raises ``PackingError`` when a kept sample is longer than ``pack_size`` (Bridge would fail
    in its fill step) or when nothing is left to pack. :func:`bridge_pack_csr` gives the same
    rows as arrays.
    """
    done = bridge_pack_csr(runtime_lengths, pack_size, seed=seed, algorithm=algorithm,
                           max_seq_length=max_seq_length)
    return BridgePack(
        bins=_split(done.slots, done.offsets),
        sample_bins=_split(done.order, done.offsets),
        metadata=done.metadata,
        skipped=done.skipped.tolist(),
        pack_size=int(pack_size),
        max_seq_length=done.max_seq_length,
        algorithm=algorithm,
        seed=int(seed),
    )
