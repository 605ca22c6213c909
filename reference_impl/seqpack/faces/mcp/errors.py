"""Map library errors to MCP tool errors the model can act on (one line, never a traceback).

A tool error's text is ``Error executing tool <name>: <the error in one line>`` (rule id,
location, fix). The same error as data (class, message, rule id, file/line/row/field, fix) rides
along in the result's ``_meta`` under :data:`ERROR_META_KEY`, for clients that act on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from seqpack.core.errors import SeqpackError

log = logging.getLogger("seqpack.mcp")

#: ``_meta`` key of a tool error result that carries the error as data.
ERROR_META_KEY = "seqpack/error"

__all__ = ["ERROR_META_KEY", "error_result", "tool_errors"]


@contextmanager
def tool_errors() -> Iterator[None]:
    """Re-raise :class:`SeqpackError` (with its rule id, location and fix) and ``OSError`` as ``ToolError``.

    The original error stays the ``ToolError``'s ``__cause__``. Any other exception is left to
    the SDK, which answers "Error executing tool <name>" and logs the traceback on stderr: an
    unexpected failure is a bug, not something the model can fix.
    """
    try:
        yield
    except ToolError:
        raise
    except SeqpackError as err:
        log.info("tool error: %s", err)
        raise ToolError(str(err)) from err
    except OSError as err:
        raise ToolError(_os_text(err)) from err


def _os_text(err: OSError) -> str:
    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    return f"{type(err).__name__}: {err.strerror or err}{where}"


def error_result(tool: str, exc: BaseException) -> CallToolResult | None:
    """The tool error result for ``exc`` (a SeqpackError, an OSError or a ToolError), else None."""
    data: dict[str, Any]
    if isinstance(exc, SeqpackError):
        text, data = str(exc), exc.to_dict()
    elif isinstance(exc, OSError):
        text = _os_text(exc)
        data = {"error": type(exc).__name__, "message": text}
    elif isinstance(exc, ToolError):
        text = str(exc)
        cause = exc.__cause__
        data = cause.to_dict() if isinstance(cause, SeqpackError) else {"error": "ToolError", "message": text}
    else:
        return None
    log.info("tool %s failed: %s", tool, text)
    return CallToolResult(
        content=[TextContent(type="text", text=f"Error executing tool {tool}: {text}")],
        is_error=True,
        _meta={ERROR_META_KEY: data},
    )
