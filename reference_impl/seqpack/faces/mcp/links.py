"""``resource_link`` content items for what a writing tool wrote (MCP ``server/tools``: resource links).

A tool declared with ``links=`` (a verb's :class:`~seqpack.verbs.declare.Tool`, e.g. ``pack_dataset``'s
:func:`seqpack.verbs.packing.pack_links`) keeps returning its result
dataclass (structured content plus its JSON text); after a successful call the server appends one
``resource_link`` per directory, manifest and data file the result names, as ``file://`` URIs with
a MIME type and, for a file, its size. A path that is gone, or that lies outside the allowed
roots, gets no link.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mcp.types import CallToolResult, ResourceLink

from seqpack.faces.mcp.roots import AllowedRoots

#: Turns a tool's structured result into (path, name, description, MIME type) of what it wrote.
LinkSpec = Callable[[dict[str, Any]], Iterable[tuple[str, str, str, str]]]
__all__ = ["LinkSpec", "add_links"]


def _link(path: Path, name: str, description: str, mime_type: str) -> ResourceLink:
    size = path.stat().st_size if path.is_file() else None
    return ResourceLink(type="resource_link", uri=path.as_uri(), name=name, description=description,
                        mime_type=mime_type, size=size)


def add_links(result: Any, spec: LinkSpec, roots: AllowedRoots) -> Any:
    """``result`` (a successful CallToolResult with structured content) plus its resource links; else as is."""
    if not isinstance(result, CallToolResult) or result.is_error or not isinstance(result.structured_content, dict):
        return result
    links = []
    for raw, name, description, mime_type in spec(result.structured_content):
        path = Path(raw).resolve()
        if path.exists() and roots.contains(path):
            links.append(_link(path, name, description, mime_type))
    if not links:
        return result
    return result.model_copy(update={"content": [*result.content, *links]})
