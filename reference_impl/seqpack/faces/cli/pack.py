"""``seqpack pack``: offline packing of JSONL (or a blend manifest) into packed Parquet."""

from __future__ import annotations

import argparse

from seqpack.core.choices import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LOSS_MODES,
    REASONING_POLICIES,
    SCHEMA_OPTIONS,
    TRUNCATION_MODES,
)
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "pack"
HELP = "pack JSONL (or a blend manifest) offline into packed Parquet + metadata + manifest"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("input", help="JSONL file, or a blend manifest (.json/.yaml: [weight, path, ...])")
    p.add_argument("--out", required=True, help="output root; packs go to a fingerprinted directory inside")
    p.add_argument("--validation", help="validation JSONL packed with the same settings")
    p.add_argument("--pack-size", type=int, required=True, help="pack capacity in runtime tokens (e.g. 8192)")
    p.add_argument("--pad-seq-to-mult", type=int, default=None,
                   help="per-sequence alignment (default: derived; a given value must be a multiple of "
                   "the derived one)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size, to derive the alignment")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size, to derive the alignment")
    p.add_argument("--sp", action="store_true", help="sequence parallelism, to derive the alignment")
    p.add_argument("--eval-cp", type=int, default=None, help="evaluation CP size, to derive the alignment")
    p.add_argument("--max-seq-length", type=int, default=None, help="per-sample cap (default: the pack size)")
    p.add_argument("--schema", choices=SCHEMA_OPTIONS, default="auto")
    p.add_argument("--prompt-column", default="prompt")
    p.add_argument("--completion-column", default="completion")
    p.add_argument("--loss-mode", choices=LOSS_MODES, default=None,
                   help="completion|full (prompt/completion), assistant|last_turn|full (chat)")
    p.add_argument("--reasoning", choices=REASONING_POLICIES, default=None,
                   help="chat only: train on the reasoning of assistant turns (train, the default) or mask it")
    p.add_argument("--tokenizer", default=None, help="local tokenizer.json (default: the embedded byte tokenizer)")
    p.add_argument("--truncation", choices=TRUNCATION_MODES, default="right")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=DEFAULT_ALGORITHM)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--max-seqs-per-pack", type=int, default=None)
    p.add_argument("--bridge-compat", action="store_true", help="reproduce Megatron-Bridge's strategy and fill exactly")
    p.add_argument("--num-samples", type=int, default=None, help="draws from a blend (default: sum of source rows)")
    p.add_argument("--pad-seq-length-to-mult", type=int, default=None,
                   help="pre-pad samples to this multiple instead (a multiple of the alignment; capped at the "
                   "per-sample cap), as Megatron-Bridge's dataset_kwargs override does")
    p.add_argument("--metadata-path", default=None,
                   help="also append the metadata entries to this JSON array file (created when absent), as "
                   "Megatron-Bridge does")
    p.add_argument("--workers", type=int, default=1, help="tokenizer and writer processes (per rank under torchrun)")
    p.add_argument("--distributed", action="store_true", default=None,
                   help="run on the ranks of a torchrun job (detected from WORLD_SIZE when not given); every "
                   "rank must see the output root")
    p.add_argument("--overwrite", action="store_true", help="replace an existing pack with the same fingerprint")
    p.add_argument("--no-progress", action="store_true")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Pack and print where the packs went and how every row was accounted for."""
    import sys

    from seqpack.verbs.packing import PackOptions, pack

    options = PackOptions(
        input=args.input, out=args.out, validation=args.validation, pack_size=args.pack_size,
        tp=args.tp, cp=args.cp, sp=args.sp, eval_cp=args.eval_cp, pad_seq_to_mult=args.pad_seq_to_mult,
        max_seq_length=args.max_seq_length, schema=args.schema, prompt_column=args.prompt_column,
        completion_column=args.completion_column, loss_mode=args.loss_mode, reasoning=args.reasoning,
        tokenizer=args.tokenizer,
        truncation=args.truncation, algorithm=args.algorithm, seed=args.seed,
        max_seqs_per_pack=args.max_seqs_per_pack, bridge_compat=args.bridge_compat, num_samples=args.num_samples,
        pad_seq_length_to_mult=args.pad_seq_length_to_mult, metadata_path=args.metadata_path, workers=args.workers,
        distributed=args.distributed, overwrite=args.overwrite,
        progress=not args.no_progress and not args.json and sys.stderr.isatty(),
    )
    result = pack(options)
    multiple = options.multiple()
    if args.json:
        print_json(result.to_dict())
        return 0
    print(f"{'reused' if result.reused else 'wrote'} {result.pack_dir}"
          + (f" (rebuilt: {result.rebuilt})" if result.rebuilt else ""))
    rows = []
    for split, info in result.splits.items():
        acc = info["accounting"]
        skipped = ", ".join(f"{k}={v['count']}" for k, v in acc["skipped"].items()) or "-"
        rows.append([
            split, acc["rows_in"], acc["packed"], acc["truncated"], skipped, info["packs"],
            f"{info['aligned_tokens'] / info['token_slots']:.2%}",
        ])
    print(table(["split", "rows", "packed", "truncated", "skipped", "packs", "efficiency"], rows))
    print(f"pad_seq_to_mult={multiple} pack_size={args.pack_size} algorithm={args.algorithm} seed={args.seed}")
    return 0
