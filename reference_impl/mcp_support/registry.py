"""The MCP tool registry: module-level tool functions, registered with the :func:`tool` decorator.

A tool is a plain function of its module (``tools_config``, ``tools_packing``, ``tools_smoke``,
``mcp_server``) that parses its arguments into the verb's options, calls the verb and returns the
verb's result dataclass; the SDK derives the output schema from that return annotation. A tool
that touches files takes ``ctx: Context`` and confines every path with :func:`roots_of`. Errors:
a :class:`~reference_impl.errors.SeqpackError`, an ``OSError`` or a ``ToolError`` becomes a tool
error result (:func:`reference_impl.mcp_support.errors.error_result`).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from reference_impl.mcp_support.errors import error_result
from reference_impl.mcp_support.hints import READ_ONLY
from reference_impl.mcp_support.roots import AllowedRoots

__all__ = ["TOOLS", "ToolSpec", "register_tools", "roots_of", "tool"]


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool: the wrapped function, its title and its annotations."""

    name: str
    fn: Callable[..., Any]
    title: str
    annotations: ToolAnnotations


#: Every tool, in registration order (importing a tools module registers its tools).
TOOLS: dict[str, ToolSpec] = {}


def _error_or_raise(name: str, exc: Exception) -> Any:
    result = error_result(name, exc)
    if result is None:
        raise exc  # unexpected: the SDK answers "Error executing tool" and logs the traceback
    return result


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with library errors turned into tool error results (same signature, sync or async)."""
    name = fn.__name__
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - sorted by _error_or_raise
                return _error_or_raise(name, exc)

        return guarded_async

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - sorted by _error_or_raise
            return _error_or_raise(name, exc)

    return guarded


def tool(*, title: str, annotations: ToolAnnotations = READ_ONLY) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a module-level function as an MCP tool (its name is the function's name)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if fn.__name__ in TOOLS:
            raise ValueError(f"an MCP tool named {fn.__name__!r} is already registered")
        TOOLS[fn.__name__] = ToolSpec(fn.__name__, _guarded(fn), title, annotations)
        return fn

    return register


def roots_of(ctx: Context) -> AllowedRoots:
    """The allowed roots of the server handling this request."""
    return ctx.mcp_server.seqpack_roots  # type: ignore[attr-defined]


def register_tools(server: MCPServer) -> None:
    """Add every registered tool to ``server``."""
    from reference_impl.mcp_support import tools_config, tools_packing, tools_smoke  # noqa: F401 - they register

    with warnings.catch_warnings():
        # a result field called ``schema`` shadows a deprecated BaseModel method in the SDK's output model
        warnings.filterwarnings("ignore", message='Field name "schema" in .* shadows an attribute',
                                category=UserWarning)
        for spec in TOOLS.values():
            server.add_tool(spec.fn, name=spec.name, title=spec.title, annotations=spec.annotations)
