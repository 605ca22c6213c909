"""Small helpers shared by the CLI subcommands: the ``--json`` flag and JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from seqpack.core.textfmt import markdown_table, text_table

table = text_table

__all__ = ["add_json_flag", "int_list", "markdown_table", "print_json", "table"]


def int_list(text: str) -> list[int]:
    """argparse type of a comma-separated list of integers (``900,300,1500``)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Every subcommand accepts ``--json``."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def print_json(data: Any) -> None:
    """Pretty JSON on stdout (keys in insertion order).

    Under the eval harness (``SEQPACK_EVAL_NONCE`` set) a dict also carries the run's nonce under
    ``seqpack_nonce`` (see :mod:`seqpack.core.nonce`); nothing is added otherwise.
    """
    from seqpack.core.nonce import NONCE_KEY, current_nonce

    nonce = current_nonce()
    if nonce is not None and isinstance(data, dict):
        data = {**data, NONCE_KEY: nonce}
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
