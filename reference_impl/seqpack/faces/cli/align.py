"""``seqpack align``: derive pad_seq_to_mult for a topology, plus equal-token-slot candidates."""

from __future__ import annotations

import argparse

from seqpack.faces.cli._output import add_json_flag, int_list, print_json, table

NAME = "align"
HELP = "derive the per-sequence alignment (pad_seq_to_mult) for TP/CP/SP, and equal token-slot candidates"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size (default 1)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism on")
    p.add_argument("--eval-cp", type=int, default=None, help="a distinct evaluation CP size")
    p.add_argument("--token-slots", type=int, default=None, help="also list pack length / GBS pairs with this many slots")
    p.add_argument("--pack-lengths", type=int_list, default=None, help="candidate pack lengths (default 2048,4096,8192)")
    p.add_argument("--dp", type=int, default=None, help="data-parallel size for the candidate check")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the alignment (and candidates)."""
    from seqpack.verbs.alignment import AlignOptions, align

    al = align(AlignOptions(tp=args.tp, cp=args.cp, sp=args.sp, eval_cp=args.eval_cp, token_slots=args.token_slots,
                            pack_lengths=args.pack_lengths, dp=args.dp))
    if args.json:
        print_json(al.to_dict())
        return 0
    topo = f"TP{al.tp} / CP{al.cp} / SP {'on' if al.sp else 'off'}" + (f" / eval CP{al.eval_cp}" if al.eval_cp else "")
    print(topo)
    print(
        table(
            ["value", "n", "why"],
            [
                ["cp_multiple", al.cp_multiple, "2*CP when CP>1, else 1"],
                ["sp_multiple", al.sp_multiple, "CP*TP when SP and TP>1, else 1"],
                ["pad_seq_to_mult", al.pad_seq_to_mult, "lcm over train/eval CP of both multiples"],
                ["seq_length_multiple", al.seq_length_multiple, "seq_length and fixed pack widths"],
            ],
        )
    )
    print(al.explanation)
    if al.candidates is not None:
        print()
        print(
            table(
                ["pack_len", "global_batch_size", "token_slots", "valid", "reason"],
                [[c.pack_len, c.global_batch_size, c.token_slots, "yes" if c.valid else "no", c.reason]
                 for c in al.candidates],
            )
        )
    return 0
