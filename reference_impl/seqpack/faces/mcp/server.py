"""The seqpack MCP server: the library's verbs as MCP tools, the skill and rules as resources, two prompts.

Built on the official ``mcp`` SDK (2.x, ``MCPServer``). The verbs' tools are generated from the verbs'
declarations (:mod:`seqpack.faces.mcp.generate`); each calls the same verb as the CLI and the Python
API (:mod:`seqpack.verbs`) and returns the verb's result dataclass: the SDK derives the output schema
from it and returns its fields as structured content. The registry (:mod:`seqpack.faces.mcp.registry`)
holds them and the hand-written ``server_info``.

Security model:

* every file path argument is resolved (symlinks followed) and must lie inside an allowed root
  (``--root``, repeatable; default: the working directory); relative paths are relative to the
  first root;
* no tool runs a shell command or evaluates user text; only ``pack_dataset`` writes, and only
  inside a root;
* stdout carries the protocol only (stdio); logs go to stderr; HTTP binds 127.0.0.1 only and, with
  a token file, refuses every request without ``Authorization: Bearer <token>`` (401, nothing
  echoed; :mod:`seqpack.faces.mcp.http_auth`).

Parts live in :mod:`seqpack.faces.mcp`; a long-running tool (progress, time limit,
cancellation) uses :func:`seqpack.faces.mcp.jobs.run_job`.
"""

from __future__ import annotations

import logging
import os
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent

from seqpack import __version__
from seqpack.faces.mcp.content import find_skill_dir, register_prompts, register_resources
from seqpack.faces.mcp.links import add_links
from seqpack.faces.mcp.registry import TOOLS, register_tools, roots_of, tool
from seqpack.faces.mcp.roots import AllowedRoots
from seqpack.faces.mcp.skills import SkillBundle, SkillsExtension
from seqpack.faces.mcp.stamped import StampedMCPServer
from seqpack.core.results import Result

log = logging.getLogger("seqpack.mcp")

SERVER_NAME = "seqpack"
HEAVY_MODULES = ("torch", "pyarrow", "megatron.core", "megatron.energon")
INSTRUCTIONS = (
    "Sequence packing for Megatron-style fine-tuning. Compute instead of guessing: derive_alignment for "
    "pad_seq_to_mult, plan_pack_length to choose a pack length, validate_config before launching, "
    "explain_rule for a rule id in an error. For the user's data, pass the model's tokenizer folder as "
    "tokenizer_path (plan_pack_length, pack_dataset, inspect_in_batch, run_packing_smoke_test): without it rows are "
    "measured in bytes with seqpack's own chat template, not the model's. Chat rows: loss_mode assistant (default), "
    "last_turn or full, reasoning train or mask, truncation oldest_turns keeps a long chat's last answer. Run "
    "run_packing_smoke_test on the user's rows (data_path) and config before they spend GPU hours. File paths must "
    "lie inside the allowed roots (server_info lists them)."
)
_AUTO = object()
#: The deprecation notes of the tool call in progress (read by :meth:`SeqpackServer.finish_result`).
_NOTES: ContextVar[list[str]] = ContextVar("seqpack_mcp_notes", default=[])


class SeqpackServer(StampedMCPServer):
    """The SDK's server (with the eval nonce on every result) plus what the tools read per request: the allowed
    roots and the skill directory; with a usable skill bundle it declares the Skills extension."""

    def __init__(self, roots: AllowedRoots, skill_dir: Path | None, bundle: SkillBundle | None = None) -> None:
        super().__init__(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS,
                         extensions=[SkillsExtension(bundle)] if bundle is not None else None)
        self.seqpack_roots = roots
        self.seqpack_skill_dir = skill_dir

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        """The prompt as the SDK renders it. An unknown name, an unknown argument (with the closest valid one), an
        argument that is not a string (the spec's prompt arguments are strings) or a missing required one is
        ``-32602`` (invalid params) naming it, as the spec says: not the SDK's internal error and its traceback."""
        prompt = self._prompt_manager.get_prompt(name)  # noqa: SLF001 - the SDK offers no public lookup
        if prompt is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt: {name}")
        problem = prompt_argument_problem(name, [(a.name, bool(a.required)) for a in prompt.arguments or []],
                                          arguments)
        if problem is not None:
            raise MCPError(code=INVALID_PARAMS, message=problem)
        return await super().get_prompt(name, arguments, context)

    async def call_tool(  # type: ignore[override]
            self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Run the tool; an argument under its old name (:attr:`ToolSpec.aliases`) is passed under the new one,
        and the result says so in a text block (the old name goes in the next release)."""
        spec = TOOLS.get(name)
        notes: list[str] = []
        if spec is not None and spec.aliases and isinstance(arguments, dict):
            arguments = dict(arguments)
            for old, new in spec.aliases.items():
                if old in arguments and new not in arguments:
                    arguments[new] = arguments.pop(old)
                    notes.append(f"warning: the argument {old!r} is deprecated; use {new!r} (the old name goes "
                                 "in the next release)")
                    log.warning("tool %s: argument %r is deprecated, use %r", name, old, new)
        token = _NOTES.set(notes)
        try:
            return await super().call_tool(name, arguments, context)
        finally:
            _NOTES.reset(token)

    def finish_result(self, name: str, result: Any) -> Any:
        """A writing tool's result plus ``resource_link`` items for what it wrote (inside the roots), and the
        deprecation notes of the call."""
        spec = TOOLS.get(name)
        if spec is not None and spec.links:
            result = add_links(result, spec.links, self.seqpack_roots)
        notes = _NOTES.get()
        if notes and isinstance(result, CallToolResult):
            result = result.model_copy(update={"content": [*result.content,
                                                           *(TextContent(type="text", text=n) for n in notes)]})
        return result


def prompt_argument_problem(name: str, declared: list[tuple[str, bool]], arguments: Any) -> str | None:
    """Why ``arguments`` cannot render prompt ``name`` (``declared``: its ``(argument, required)`` pairs), or None."""
    import difflib

    from seqpack.core.textfmt import printable

    names = [n for n, _ in declared]
    given = arguments or {}
    if not isinstance(given, dict):
        return f"prompt {name}: arguments must be an object of strings"
    for key, value in given.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return (f"prompt {name} has no argument {printable(str(key))[:80]!r}{hint} (its arguments: "
                    f"{', '.join(names) or 'none'})")
        if not isinstance(value, str):
            kind = "a boolean" if isinstance(value, bool) else type(value).__name__
            return f"prompt {name}: argument {key!r} must be a string, got {kind}"
    missing = [n for n, required in declared if required and n not in given]
    if missing:
        return f"prompt {name}: missing required argument {missing[0]!r}"
    return None


@dataclass(frozen=True)
class ServerInfo(Result):
    """Server version, allowed roots, skill bundle location and which heavy modules are loaded."""

    name: str
    version: str
    roots: list[str]
    skill_dir: str | None
    heavy_modules_loaded: dict[str, bool]


@tool(title="Server info: allowed roots and loaded modules")
def server_info(ctx: Context) -> ServerInfo:
    """Version, the allowed roots (every path argument must lie inside one), the skill bundle
    directory served as resources, and which heavy modules this server process has loaded."""
    skill = ctx.mcp_server.seqpack_skill_dir  # type: ignore[attr-defined]
    return ServerInfo(
        name=SERVER_NAME,
        version=__version__,
        roots=[str(r) for r in roots_of(ctx).roots],
        skill_dir=str(skill) if skill is not None else None,
        heavy_modules_loaded={m: m in sys.modules for m in HEAVY_MODULES},
    )


class TerminalSafeFormatter(logging.Formatter):
    """Log lines with every character that could drive a terminal escaped (a request path, a client's
    name, a file name from a dataset): :func:`seqpack.core.textfmt.printable`, tracebacks kept on their lines."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatted record, escaped."""
        from seqpack.core.textfmt import printable

        return printable(super().format(record), keep_lines=True)


def build_server(
    roots: AllowedRoots | list[str | os.PathLike[str]] | None = None,
    *,
    skill_dir: Path | None | object = _AUTO,
) -> MCPServer:
    """The server with every tool, resource and prompt registered.

    ``roots``: allowed directories (default: the working directory). ``skill_dir``: the skill
    bundle to serve as resources (default: found next to the package; None: serve none).
    """
    allowed = roots if isinstance(roots, AllowedRoots) else AllowedRoots.from_args([os.fspath(r) for r in roots or []])
    skill = find_skill_dir() if skill_dir is _AUTO else skill_dir
    bundle = SkillBundle.load(skill) if isinstance(skill, Path) else None
    server = SeqpackServer(allowed, skill, bundle)  # type: ignore[arg-type]
    register_tools(server)
    register_resources(server, skill, bundle)  # type: ignore[arg-type]
    register_prompts(server)
    return server


def serve(
    roots: list[str] | None = None,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    port: int = 8765,
    lifetime_s: float | None = None,
    token_file: str | os.PathLike[str] | None = None,
) -> None:
    """Run the server until the client disconnects (stdio) or the process is interrupted.

    ``lifetime_s`` (HTTP only) stops the server by itself after that many seconds; ``token_file``
    (HTTP only) holds the bearer token every request must carry.
    """
    import anyio

    from seqpack.core.errors import UsageError
    from seqpack.faces.mcp.http_auth import read_token_file

    if token_file is not None and transport != "http":
        raise UsageError("--token-file applies to --transport http (a stdio server is reached only by its client)")
    if not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[handler])
    token = read_token_file(token_file) if token_file is not None else None
    allowed = AllowedRoots.from_args(roots)
    server = build_server(allowed)
    log.info("seqpack MCP server %s (%s); roots: %s", __version__, transport, allowed.describe())
    if transport == "stdio":
        anyio.run(server.run_stdio_async)
    else:
        anyio.run(_serve_http, server, port, lifetime_s, token)


async def _serve_http(server: MCPServer, port: int, lifetime_s: float | None, token: str | None = None) -> None:
    """Streamable HTTP on 127.0.0.1 only (DNS-rebinding protection on host and port, one answer per request id,
    accepts that back off when descriptors run out: :mod:`seqpack.faces.mcp.http_guard`; the bearer token when
    given), logs through ``logging`` (query values redacted)."""
    import anyio
    import uvicorn

    import asyncio

    from seqpack.faces.mcp.http_auth import BearerTokenGuard
    from seqpack.faces.mcp.http_guard import DistinctRequestIds, RedactQuery, accept_errors_once, transport_security

    sock = _bind("127.0.0.1", port)  # before anything starts: a port in use is one line, not a traceback
    port = sock.getsockname()[1]
    log.info("listening on http://127.0.0.1:%d/mcp%s", port, " (bearer token required)" if token else "")
    accept_errors_once(asyncio.get_running_loop())
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactQuery) for f in access.filters):
        access.addFilter(RedactQuery())
    app: Any = DistinctRequestIds(server.streamable_http_app(host="127.0.0.1",
                                                             transport_security=transport_security(port)))
    if token is not None:
        app = BearerTokenGuard(app, token)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="info")
    http = uvicorn.Server(config)

    async def stop_later(seconds: float) -> None:
        await anyio.sleep(seconds)
        log.info("lifetime of %g s is over; stopping", seconds)
        http.should_exit = True  # uvicorn finishes open requests and shuts down

    async with anyio.create_task_group() as tg:
        if lifetime_s is not None:
            tg.start_soon(stop_later, lifetime_s)
        await http.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def _bind(host: str, port: int) -> Any:
    """A listening socket on ``host:port``; a port in use (or not allowed) is a UsageError naming it."""
    import socket

    from seqpack.core.errors import UsageError

    from seqpack.faces.mcp.http_guard import BackoffSocket

    sock = BackoffSocket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="port",
                         fix="choose another --port, or stop what is using this one") from None
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":  # python -m seqpack.faces.mcp.server [--root DIR ...]: stdio (`seqpack mcp` has the rest)
    import argparse

    _parser = argparse.ArgumentParser(prog="python -m seqpack.faces.mcp.server")
    _parser.add_argument("--root", action="append", default=None, metavar="DIR")
    serve(_parser.parse_args().root)
