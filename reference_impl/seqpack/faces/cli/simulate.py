"""``seqpack simulate``: bin-pack item lengths and print the statistics and the first bins."""

from __future__ import annotations

import argparse

from seqpack.core.choices import ALGORITHMS, DEFAULT_ALGORITHM, OVERSIZE_MODES
from seqpack.faces.cli._output import add_json_flag, int_list, print_json, table

NAME = "simulate"
HELP = "bin-pack a list of lengths into packs of a capacity and show the statistics and the bins"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--lengths", type=int_list, required=True, help="item lengths, comma-separated (e.g. 5,3,3,2,7)")
    p.add_argument("--capacity", type=int, required=True, help="tokens per pack")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=DEFAULT_ALGORITHM)
    p.add_argument("--seed", type=int, default=0, help="drives first_fit_shuffle only (default 0)")
    p.add_argument("--max-seqs-per-pack", type=int, default=None)
    p.add_argument("--oversize", choices=OVERSIZE_MODES, default="error",
                   help="items longer than the capacity: fail, leave out (report) or cut (default error)")
    p.add_argument("--max-bins", type=int, default=20, help="bins to show (statistics cover all; default 20)")
    p.add_argument("--bin-offset", type=int, default=0, help="first bin to show (paging)")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Pack and print."""
    from seqpack.verbs.simulation import SimulateOptions, simulate_packing

    sim = simulate_packing(SimulateOptions(
        lengths=args.lengths, capacity=args.capacity, algorithm=args.algorithm, seed=args.seed,
        max_seqs_per_pack=args.max_seqs_per_pack, oversize=args.oversize, max_bins=args.max_bins,
        bin_offset=args.bin_offset,
    ))
    if args.json:
        print_json(sim.to_dict())
        return 0
    s = sim.stats
    print(f"{s['num_packed']} of {s['num_items']} items in {s['num_bins']} packs of {s['capacity']} tokens "
          f"({s['algorithm']}); lower bound {s['lower_bound']}, efficiency {s['efficiency']:.2%}, "
          f"items per pack max {s['max_items_per_bin']} / mean {s['mean_items_per_bin']:.2f}")
    if sim.oversize or sim.truncated:
        print(f"oversize (left out): {sim.oversize}; truncated to the capacity: {sim.truncated}")
    print(table(["bin", "tokens", "items", "lengths"],
                [[b.bin, b.tokens, ",".join(map(str, b.items)), ",".join(map(str, b.lengths))] for b in sim.bins]))
    if sim.has_more:
        print(f"... more bins follow (--bin-offset {sim.bin_offset + sim.bins_returned})")
    return 0
