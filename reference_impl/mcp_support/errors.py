"""Map library errors to MCP tool errors the model can act on (one line, never a traceback)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from reference_impl.errors import SeqpackError

log = logging.getLogger("reference_impl.mcp")


@contextmanager
def tool_errors() -> Iterator[None]:
    """Re-raise :class:`SeqpackError` (with its rule id, location and fix) and ``OSError`` as ``ToolError``.

    Any other exception is left to the SDK, which answers "Error executing tool <name>" and logs
    the traceback on stderr: an unexpected failure is a bug, not something the model can fix.
    """
    try:
        yield
    except ToolError:
        raise
    except SeqpackError as err:
        log.info("tool error: %s", err)
        raise ToolError(str(err)) from None
    except OSError as err:
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        raise ToolError(f"{type(err).__name__}: {err.strerror or err}{where}") from None
