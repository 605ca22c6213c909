"""``seqpack mcp``: run the MCP server (stdio by default, or streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import argparse

from seqpack.core.choices import MCP_TRANSPORTS

NAME = "mcp"
HELP = "run the MCP server for coding agents (stdio, or streamable HTTP on 127.0.0.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument(
        "--root", action="append", default=None, metavar="DIR",
        help="directory tools may read and write (repeatable; default: the current directory)",
    )
    p.add_argument("--transport", choices=MCP_TRANSPORTS, default="stdio",
                   help="stdio (default) or streamable HTTP")
    p.add_argument("--port", type=int, default=8765, help="HTTP port on 127.0.0.1 (default 8765)")
    p.add_argument("--token-file", default=None, metavar="FILE",
                   help="HTTP only: a file holding a bearer token; requests without 'Authorization: Bearer "
                   "<token>' get 401")
    p.add_argument("--lifetime", type=float, default=None, metavar="SECONDS",
                   help="HTTP only: stop by itself after this many seconds (tests, CI); a stdio server "
                   "stops when its client closes stdin")


def run(args: argparse.Namespace) -> int:
    """Serve until the client disconnects, the process is interrupted, or --lifetime passes."""
    from seqpack.core.arguments import positive_float
    from seqpack.core.errors import UsageError
    from seqpack.core.limits import MAX_SERVER_LIFETIME_S

    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, got {args.port}")
    if args.lifetime is not None:
        positive_float("--lifetime", args.lifetime, maximum=MAX_SERVER_LIFETIME_S, field="lifetime")
    if args.lifetime is not None and args.transport != "http":
        raise UsageError("--lifetime applies to --transport http (a stdio server stops when its client closes stdin)")
    from seqpack.faces.mcp.server import serve

    try:
        serve(args.root, transport=args.transport, port=args.port, lifetime_s=args.lifetime,
              token_file=args.token_file)
    except NotADirectoryError as exc:
        raise UsageError(str(exc), fix="pass existing directories to --root") from None
    return 0
