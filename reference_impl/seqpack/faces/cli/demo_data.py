"""``seqpack demo-data``: print the path of the bundled demo JSONL (for examples and first runs)."""

from __future__ import annotations

import argparse

from seqpack.faces.cli._output import add_json_flag, print_json

NAME = "demo-data"
HELP = ("print the path of a bundled demo JSONL file (prompt_completion or chat, 2000 rows each; vlm: 48 chat "
        "rows with images)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("schema", nargs="?", default="prompt_completion", choices=("prompt_completion", "chat", "vlm"))
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the path (or, with --json, the path and row count)."""
    from seqpack.data import demo_path
    from seqpack.data.vlm.demo import vlm_demo_path
    from seqpack.data.jsonl import JsonlFile

    path = vlm_demo_path() if args.schema == "vlm" else demo_path(args.schema)
    if args.json:
        print_json({"schema": args.schema, "path": str(path), "rows": len(JsonlFile(path))})
    else:
        print(path)
    return 0
