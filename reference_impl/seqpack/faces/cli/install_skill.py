"""``seqpack install-skill``: copy the agent skill for Claude Code, Codex or any Agent Skills client."""

from __future__ import annotations

import argparse

from seqpack.faces.cli._output import add_json_flag, print_json

NAME = "install-skill"
HELP = "install the megatron-sequence-packing skill for a client and print the MCP registration"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--client", required=True, choices=("claude", "codex", "agents"))
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install into your home directory")
    where.add_argument("--project", metavar="DIR", help="install into this project (default: the current directory)")
    p.add_argument("--force", action="store_true", help="replace an existing installation")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Install and print where, plus the registration command."""
    from seqpack.faces.install_skill import install_skill

    result = install_skill(args.client, project=args.project, user=args.user, force=args.force)
    if args.json:
        print_json(result.to_dict())
        return 0
    print(f"{'replaced' if result.replaced else 'installed'} {result.destination} ({result.files} files)")
    print("register the MCP server:")
    print(f"  {result.mcp_command}")
    print(f"  ({result.mcp_note})")
    return 0
