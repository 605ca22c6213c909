"""``simulate_packing``: bin-pack item lengths and return the statistics plus one page of bins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import is_int, non_negative_int, positive_int
from seqpack.core.choices import ALGORITHMS, DEFAULT_ALGORITHM, OVERSIZE_MODES
from seqpack.core.errors import UsageError
from seqpack.core.limits import (
    MAX_BINS_RETURNED,
    MAX_INDICES_RETURNED,
    MAX_INLINE_LENGTHS,
    MAX_ITEMS_RETURNED,
    MAX_PACK_LEN,
    MAX_SEQS_PER_PACK,
)
from seqpack.core.results import Result
from seqpack.verbs.common import check_choice, check_seed

__all__ = ["PackingSimulation", "SimulateOptions", "SimulatedBin", "simulate_packing"]


@dataclass(frozen=True, kw_only=True)
class SimulateOptions:
    """Item lengths, bin capacity, algorithm and what to do with items longer than a bin; the page of
    bins to return (``max_bins`` from ``bin_offset``)."""

    lengths: Sequence[int]
    capacity: int
    algorithm: str = DEFAULT_ALGORITHM
    seed: int = 0
    max_seqs_per_pack: int | None = None
    oversize: str = "error"
    max_bins: int = 20
    bin_offset: int = 0


@dataclass(frozen=True)
class SimulatedBin(Result):
    """One bin: item indices (positions in ``lengths``, placement order), their lengths, the tokens."""

    bin: int
    tokens: int
    items: list[int]
    lengths: list[int]


@dataclass(frozen=True)
class PackingSimulation(Result):
    """Packing statistics plus a window of bins (``bin_offset`` .. ``bin_offset + bins_returned``).

    ``oversize`` / ``truncated`` list (at most 1000) items left out / cut; ``has_more`` tells
    whether more bins follow the window.
    """

    stats: dict[str, Any]
    oversize: list[int]
    truncated: list[int]
    bins: list[SimulatedBin]
    bin_offset: int
    bins_returned: int
    has_more: bool


def simulate_packing(options: SimulateOptions) -> PackingSimulation:
    """Pack ``options.lengths`` into bins of ``options.capacity`` tokens (see :class:`SimulateOptions`).

    At most ``max_bins`` bins and 20,000 item indices in all are returned; the statistics cover
    every bin.
    """
    from seqpack.packing.algorithms import pack_lengths

    lengths = options.lengths
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence) or not len(lengths):
        raise UsageError("lengths must be a non-empty list of item lengths", field="lengths")
    if len(lengths) > MAX_INLINE_LENGTHS:
        raise UsageError(f"{len(lengths)} lengths given; the limit is {MAX_INLINE_LENGTHS}", field="lengths")
    empty = next((i for i, v in enumerate(lengths) if is_int(v) and v < 1), None)
    if empty is not None:
        raise UsageError(f"lengths[{empty}] is {lengths[empty]}; every item holds at least one token",
                         field="lengths")
    check_choice("algorithm", options.algorithm, ALGORITHMS)
    check_choice("oversize", options.oversize, OVERSIZE_MODES)
    max_bins = non_negative_int("max_bins", options.max_bins, maximum=MAX_BINS_RETURNED)
    offset = non_negative_int("bin_offset", options.bin_offset)
    result = pack_lengths(
        lengths, positive_int("capacity", options.capacity, maximum=MAX_PACK_LEN), options.algorithm,
        seed=check_seed(options.seed), oversize=options.oversize,
        max_seqs_per_pack=positive_int("max_seqs_per_pack", options.max_seqs_per_pack, allow_none=True,
                                       maximum=MAX_SEQS_PER_PACK),
    )
    order, offsets, sums = result.order.tolist(), result.offsets.tolist(), result.bin_sums.tolist()
    bins: list[SimulatedBin] = []
    items_out = 0
    b = offset
    while b < result.num_bins and len(bins) < max_bins:
        items = order[offsets[b] : offsets[b + 1]]
        if bins and items_out + len(items) > MAX_ITEMS_RETURNED:
            break
        bins.append(SimulatedBin(b, int(sums[b]), items, [int(lengths[i]) for i in items]))
        items_out += len(items)
        b += 1
    return PackingSimulation(
        stats=result.stats(),
        oversize=result.oversize[:MAX_INDICES_RETURNED].tolist(),
        truncated=result.truncated[:MAX_INDICES_RETURNED].tolist(),
        bins=bins,
        bin_offset=offset,
        bins_returned=len(bins),
        has_more=b < result.num_bins,
    )
