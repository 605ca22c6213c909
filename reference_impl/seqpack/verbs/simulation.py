"""``simulate_packing``: bin-pack item lengths and return the statistics plus one page of bins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import is_int
from seqpack.core.choices import OVERSIZE_MODES
from seqpack.core.errors import UsageError
from seqpack.core.limits import (
    MAX_BINS_RETURNED,
    MAX_INDICES_RETURNED,
    MAX_INLINE_LENGTHS,
    MAX_ITEMS_RETURNED,
    MAX_PACK_LEN,
    MAX_SAMPLE_TOKENS,
)
from seqpack.core.results import Result
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import algorithm_option, max_seqs_option, seed_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["SIMULATE", "PackingSimulation", "SimulateOptions", "SimulatedBin", "render_simulation", "simulate_packing"]


@verb_options
class SimulateOptions:
    """Item lengths, pack size, algorithm and what to do with items longer than a pack; the page of
    bins to return (``max_bins`` from ``bin_offset``). ``pack_size`` was called ``capacity`` (the old
    name is accepted, with a deprecation warning, for one release)."""

    lengths: Sequence[int] = option(help="item lengths in tokens (CLI: comma-separated, e.g. 5,3,3,2,7)",
                                    item_minimum=1, item_maximum=MAX_SAMPLE_TOKENS, min_items=1,
                                    max_items=MAX_INLINE_LENGTHS, check_items=False)
    pack_size: int = option(help="tokens per pack", minimum=1, maximum=MAX_PACK_LEN, renamed_from=("capacity",))
    algorithm: str = algorithm_option()
    seed: int = seed_option(0, "drives first_fit_shuffle only")
    max_seqs_per_pack: int | None = max_seqs_option()
    oversize: str = option("error", help="items longer than pack_size: fail (error), leave out and report "
                           "(report) or cut (truncate)", choices=OVERSIZE_MODES)
    max_bins: int = option(20, help="bins to return (the statistics cover all)", minimum=0,
                           maximum=MAX_BINS_RETURNED)
    bin_offset: int = option(0, help="first bin to return (paging)", minimum=0)


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

    ``stats["pack_size"]`` is the pack size (``stats["capacity"]`` repeats it under its old name for
    one release; deprecated).

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
    """Pack ``options.lengths`` into bins of ``options.pack_size`` tokens (see :class:`SimulateOptions`).

    At most ``max_bins`` bins and 20,000 item indices in all are returned; the statistics cover
    every bin.
    """
    from seqpack.packing.algorithms import pack_lengths

    check_options(options)
    lengths = options.lengths
    empty = next((i for i, v in enumerate(lengths) if is_int(v) and v < 1), None)
    if empty is not None:
        raise UsageError(f"lengths[{empty}] is {lengths[empty]}; every item holds at least one token",
                         field="lengths")
    max_bins, offset = options.max_bins, options.bin_offset
    result = pack_lengths(lengths, options.pack_size, options.algorithm, seed=options.seed, oversize=options.oversize,
                          max_seqs_per_pack=options.max_seqs_per_pack)
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
    stats = {("pack_size" if k == "capacity" else k): v for k, v in result.stats().items()}
    stats["capacity"] = stats["pack_size"]  # the old name, deprecated (one release)
    return PackingSimulation(
        stats=stats,
        oversize=result.oversize[:MAX_INDICES_RETURNED].tolist(),
        truncated=result.truncated[:MAX_INDICES_RETURNED].tolist(),
        bins=bins,
        bin_offset=offset,
        bins_returned=len(bins),
        has_more=b < result.num_bins,
    )


def render_simulation(sim: PackingSimulation, options: SimulateOptions) -> str:
    """The CLI's text: the statistics, what was left out or cut, and the page of bins."""
    s = sim.stats
    out = [f"{s['num_packed']} of {s['num_items']} items in {s['num_bins']} packs of {s['pack_size']} tokens "
           f"({s['algorithm']}); lower bound {s['lower_bound']}, efficiency {s['efficiency']:.2%}, "
           f"items per pack max {s['max_items_per_bin']} / mean {s['mean_items_per_bin']:.2f}"]
    if sim.oversize or sim.truncated:
        out.append(f"oversize (left out): {sim.oversize}; truncated to the pack size: {sim.truncated}")
    out.append(text_table(["bin", "tokens", "items", "lengths"],
                          [[b.bin, b.tokens, ",".join(map(str, b.items)), ",".join(map(str, b.lengths))]
                           for b in sim.bins]))
    if sim.has_more:
        out.append(f"... more bins follow (--bin-offset {sim.bin_offset + sim.bins_returned})")
    return "\n".join(out)


SIMULATE = Verb(
    name="simulate_packing", options=SimulateOptions, function=simulate_packing,
    render=render_simulation,
    help="bin-pack a list of lengths into packs of a pack size and show the statistics and the bins",
    tools=(Tool(
        "simulate_packing", title="Simulate bin packing of lengths",
        description="""Pack item lengths into bins of `pack_size` tokens and return the statistics plus a few bins.

stats: bins, lower bound, efficiency, items per bin, oversize/truncated counts. bins:
at most max_bins bins from bin_offset (and at most 20000 item indices in all), each with
its item indices in placement order, their lengths and its token count; has_more tells
whether more bins follow. Item indices refer to positions in `lengths`. (`capacity`, the old
name of pack_size, is still accepted for one release.)""",
    ),),
)
