"""Tool annotations (hints to clients; they grant nothing)."""

from __future__ import annotations

from mcp.types import ToolAnnotations

#: Computes an answer from its arguments; touches nothing (a JSONL line-index cache aside).
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
#: Writes files inside an allowed root; the same call again reuses what it wrote, but
#: ``overwrite=true`` replaces an existing output directory.
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
