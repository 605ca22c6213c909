"""``seqpack mrope``: multimodal RoPE ids (temporal, height, width) of a described Qwen-VL layout, packed or not."""

from __future__ import annotations

import argparse

from seqpack.core.choices import MROPE_MODELS, TEXT_AFTER_VISION
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "mrope"
HELP = "M-RoPE position ids of a layout of text, images and videos (sequences separated by |, packed into one row)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("layout", help="e.g. 'text:3,image:1x4x6,text:2|text:5': items text:N, image:1xHxW, "
                                  "video:TxHxW[@seconds]; every image/video gets vision start and end tokens")
    p.add_argument("--merge-size", type=int, default=2, help="spatial merge size (default 2)")
    p.add_argument("--model", choices=MROPE_MODELS, default="qwen2_vl",
                   help="qwen2_vl (temporal interval 1) or qwen2_5_vl (tokens_per_second x seconds per patch)")
    p.add_argument("--tokens-per-second", type=float, default=2.0, help="qwen2_5_vl only (default 2)")
    p.add_argument("--text-after-vision", choices=TEXT_AFTER_VISION, default="max",
                   help="max: one past the block's largest id (the Qwen code, transformers < 5.3); spatial: "
                   "start + max(h, w)/merge (transformers >= 5.3)")
    p.add_argument("--pad-seq-to-mult", type=int, default=1, help="alignment of each packed sequence (default 1)")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print every block's first and last (t, h, w) ids and every sequence's restart."""
    from seqpack.verbs.vision import MRopeOptions, mrope_positions

    r = mrope_positions(MRopeOptions(
        layout=args.layout, merge_size=args.merge_size, model=args.model, tokens_per_second=args.tokens_per_second,
        text_after_vision=args.text_after_vision, pad_seq_to_mult=args.pad_seq_to_mult,
    ))
    if args.json:
        print_json(r.to_dict())
        return 0
    print(f"{r.model}, merge {r.merge_size}, text after vision: {r.text_after_vision}; {len(r.sequences)} sequence(s), "
          f"{r.total_tokens} tokens")
    print(table(["seq", "block", "grid", "positions", "first (t,h,w)", "last (t,h,w)"],
                [[b["sequence"], b["kind"], "x".join(map(str, b.get("grid", []))) or "-", f"{b['start']}-{b['end'] - 1}",
                  tuple(b["first"]), tuple(b["last"])] for b in r.blocks]))
    for s in r.sequences:
        print(f"sequence {s['sequence']}: starts at {s['start']} with (0, 0, 0), {s['length']} tokens, next id "
              f"{s['next_position']}")
    return 0
