"""Workflow signals read from tool events: skill activation, seqpack tools used, wasted calls.

* **Activation** (the skill was found and used): a ``Skill`` tool call naming the skill, a read of
  any file under ``skills/<name>/`` (``SKILL.md``, ``references/...``), a shell command that
  touches that folder, a ``seqpack`` CLI call, or a call to one of the seqpack MCP tools.
* **Tools used**: ``seqpack <subcommand>`` (also ``python -m reference_impl <subcommand>`` and a
  skill script ``scripts/<x>.py <subcommand>``) and MCP tool names (``mcp__<server>__<tool>`` or a
  Codex ``mcp_tool_call``).
* **Waste**: the same call repeated three times or more, more than :data:`MAX_TOOL_CALLS` calls,
  ``SKILL.md`` read more than twice, the skill loaded on a near-miss task.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

from reference_impl.evaluation.tasks import CLI_COMMANDS, MCP_TOOLS, SCRIPTS
from reference_impl.evaluation.transcript import ToolEvent

MAX_TOOL_CALLS = 40
REPEAT_LIMIT = 3

_SUB = "|".join(CLI_COMMANDS)
CLI_CALL = re.compile(
    rf"(?:^|[\s;&|(/'\"])(?:seqpack|python3?\s+-m\s+reference_impl(?:\.cli)?|\S*scripts/[\w.-]+\.py)"
    rf"(?:\s+--?[\w-]+(?:[= ]\S+)?)*?\s+({_SUB})\b"
)


def cli_subcommands(events: Iterable[ToolEvent]) -> list[str]:
    """seqpack subcommands run in shell commands, in order (with repeats)."""
    out = []
    for e in events:
        if e.command:
            out.extend(m.group(1) for m in CLI_CALL.finditer(e.command))
    return out


def mcp_tools(events: Iterable[ToolEvent]) -> list[str]:
    """seqpack MCP tools called, in order (with repeats)."""
    return [e.mcp_tool for e in events if e.mcp_tool in MCP_TOOLS]  # type: ignore[misc]


def skill_evidence(events: Sequence[ToolEvent], skill_name: str) -> list[str]:
    """Why we think the skill was used (empty: it was not)."""
    marker = f"skills/{skill_name}"
    out: list[str] = []
    for i, e in enumerate(events):
        if e.skill is not None and skill_name in e.skill:
            out.append(f"event {i}: Skill tool loaded {e.skill}")
        elif e.path and marker in e.path.replace("\\", "/"):
            out.append(f"event {i}: read {e.path}")
        elif e.command and marker in e.command:
            out.append(f"event {i}: shell touched {marker}")
    subs = cli_subcommands(events)
    if subs:
        out.append(f"seqpack CLI used: {', '.join(dict.fromkeys(subs))}")
    tools = mcp_tools(events)
    if tools:
        out.append(f"seqpack MCP tools used: {', '.join(dict.fromkeys(tools))}")
    return out


def script_used(expected: str | None, events: Sequence[ToolEvent]) -> bool | None:
    """Whether the task's ``expected_script`` (or an equivalent MCP tool) was used; None if none expected."""
    if expected is None:
        return None
    spec = SCRIPTS[expected]
    return bool(set(cli_subcommands(events)) & set(spec["cli"]) or set(mcp_tools(events)) & set(spec["mcp"]))


def skill_md_reads(events: Iterable[ToolEvent], skill_name: str) -> int:
    """How many times ``SKILL.md`` of the skill was read (tool reads, shell commands, Skill tool)."""
    n = 0
    marker = f"skills/{skill_name}/SKILL.md"
    for e in events:
        if e.skill is not None and skill_name in e.skill:
            n += 1
        elif (e.path and e.path.replace("\\", "/").endswith(marker)) or (e.command and marker in e.command):
            n += 1
    return n


def waste(events: Sequence[ToolEvent], skill_name: str, *, near_miss: bool, activated: bool) -> list[str]:
    """Wasted effort found in the events (each item costs efficiency points)."""
    out: list[str] = []
    repeats = [sig for sig, n in Counter(e.signature() for e in events).items() if n >= REPEAT_LIMIT]
    if repeats:
        out.append(f"{len(repeats)} call(s) repeated {REPEAT_LIMIT}+ times")
    if len(events) > MAX_TOOL_CALLS:
        out.append(f"{len(events)} tool calls (more than {MAX_TOOL_CALLS})")
    reads = skill_md_reads(events, skill_name)
    if reads > 2:
        out.append(f"SKILL.md read {reads} times")
    if near_miss and activated:
        out.append("skill loaded for a task it does not cover")
    return out


__all__ = ["MAX_TOOL_CALLS", "cli_subcommands", "mcp_tools", "script_used", "skill_evidence", "skill_md_reads",
           "waste"]
