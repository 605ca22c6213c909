"""``seqpack model-support``: a model family's recorded support for each packing path."""

from __future__ import annotations

import argparse

from seqpack.core.choices import PACKING_PATHS
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "model-support"
HELP = "recorded packing support of a model family (from Megatron-Bridge recipes) per packing path"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("family", help="model family id or alias, e.g. qwen3_next, llama3, gemma3_vl")
    p.add_argument("--path", choices=PACKING_PATHS, metavar="PATH", default=None,
                   help="one packing path (default: every path): %(choices)s")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the support table."""
    from seqpack.verbs.support import ModelSupportOptions, model_support

    report = model_support(ModelSupportOptions(family=args.family, path=args.path))
    if args.json:
        print_json(report.to_dict())
        return 0
    known = "known family" if report.known_family else "no record for this family (verify with `seqpack smoke`)"
    print(f"{report.query}: {known}")
    print(table(["path", "status", "note", "evidence"],
                [[r.path, r.status, r.note, r.evidence or "-"] for r in report.results]))
    return 0
