"""The seqpack MCP server class: the SDK's ``MCPServer`` plus the eval nonce on every tool result.

The override :meth:`StampedMCPServer.call_tool` sees the result of every tool after the SDK
converted it. While ``SEQPACK_EVAL_NONCE`` is set (see :mod:`seqpack.core.nonce`) it appends a
text block ``seqpack-nonce: <value>`` and sets ``_meta["seqpack/nonce"]``; the tool's own
structured content and its JSON text are left exactly as they were. Without the variable the
result is returned untouched.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from seqpack.core.nonce import current_nonce, nonce_line

META_KEY = "seqpack/nonce"


def stamp_result(result: Any) -> Any:
    """``result`` with the eval nonce added (a CallToolResult only; anything else is returned as is)."""
    nonce = current_nonce()
    if nonce is None or not isinstance(result, CallToolResult):
        return result
    meta = {**(result.meta or {}), META_KEY: nonce}
    content = [*result.content, TextContent(type="text", text=str(nonce_line()))]
    return result.model_copy(update={"content": content, "meta": meta})


class StampedMCPServer(MCPServer):
    """``MCPServer`` whose tool results carry the eval nonce when the harness set one, and whose stdio
    transport answers malformed JSON-RPC with JSON-RPC errors (:mod:`seqpack.faces.mcp.wire`)."""

    async def run_stdio_async(self) -> None:
        """Serve on stdin/stdout as the SDK does, through :func:`~seqpack.faces.mcp.wire.checked_stdio`."""
        from seqpack.faces.mcp.wire import checked_stdio

        low = self._lowlevel_server
        async with checked_stdio() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, low.create_initialization_options())

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:  # type: ignore[override]
        """Run the tool as the SDK does, complete it (:meth:`finish_result`), then stamp it (:func:`stamp_result`)."""
        return stamp_result(self.finish_result(name, await super().call_tool(name, arguments, context)))

    def finish_result(self, name: str, result: Any) -> Any:
        """A subclass's last word on a tool's converted result, before the stamp (here: unchanged)."""
        return result


__all__ = ["META_KEY", "StampedMCPServer", "stamp_result"]
