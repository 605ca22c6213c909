"""``seqpack energon-prepare``: JSONL -> WebDataset shards -> a prepared Energon dataset."""

from __future__ import annotations

import argparse

from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "energon-prepare"
HELP = "turn JSONL (text or VLM rows with images) into a prepared Energon dataset for online packing"
#: The optional extra this command needs (seqpack.core.extras): megatron-energon writes the index.
EXTRA = "energon"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("input", help="JSONL file (prompt/completion or chat rows; VLM rows with images/videos, "
                                 "see docs/vlm.md)")
    p.add_argument("--out", required=True, help="output dataset directory (written atomically)")
    p.add_argument("--with-media", action="store_true",
                   help="give about half the rows without images a seeded synthetic picture (and an <image> marker)")
    p.add_argument("--shard-size", type=int, default=1000, help="samples per tar shard (default 1000)")
    p.add_argument("--val-fraction", type=float, default=0.0, help="fraction of rows in the val split (default 0)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the val split and of the synthetic media")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Prepare the dataset and print where it went and what it holds."""
    from seqpack.verbs.energon import EnergonPrepareOptions, energon_prepare

    result = energon_prepare(EnergonPrepareOptions(
        input=args.input, out=args.out, with_media=args.with_media, shard_size=args.shard_size,
        val_fraction=args.val_fraction, seed=args.seed, overwrite=args.overwrite,
    ))
    if args.json:
        print_json(result.to_dict())
        return 0
    print(f"wrote {result.root} in {result.seconds:.3f}s")
    rows = [[split, n, len(result.shards[split])] for split, n in result.samples.items()]
    print(table(["split", "samples", "shards"], rows))
    media = result.media
    if media:
        print(f"media: {media['samples_with_media']} samples with {media['images']} image(s) and "
              f"{media['videos']} video(s) ({media['synthetic']} synthetic)")
    print(f"schema={result.schema} fingerprint={result.fingerprint[:16]}")
    return 0
