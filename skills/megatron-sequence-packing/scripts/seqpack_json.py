#!/usr/bin/env python3
"""Run one seqpack command and print its result as JSON on stdout (for agents without MCP).

Usage: python scripts/seqpack_json.py COMMAND [ARGS...]
COMMAND is one of: align, validate, rules, plan, simulate, inspect, smoke, batches, pack, model-support, image-tokens, mrope.
Exit status: 0 ok, 1 rule violations or a failed check, 2 usage or input error (one line on stderr).
Needs the seqpack package importable by this Python: pip install seqpack (the smoke and batches
commands also need pip install 'seqpack[train]'); the seqpack plugin for Claude Code or Codex
expects it installed the same way.
"""

import sys

COMMANDS = (
    "align", "validate", "rules", "plan", "simulate", "inspect", "smoke", "batches", "pack", "model-support",
    "image-tokens", "mrope",
)


def run(argv: list[str]) -> int:
    """Dispatch to the seqpack CLI with --json appended."""
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: seqpack_json.py {{{','.join(COMMANDS)}}} [ARGS...]", file=sys.stderr)
        return 2
    try:
        from seqpack.faces.cli import main
    except ImportError:
        print(f"seqpack is not installed for this Python ({sys.executable}): pip install seqpack, "
              "or run this script with the Python that has it", file=sys.stderr)
        return 2
    return main([*argv, "--json"])


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
