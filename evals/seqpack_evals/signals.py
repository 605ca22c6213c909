"""Workflow signals read from tool events: skill activation, seqpack tools used, wasted calls.

Credit needs evidence from the tool *results* the agent received, not only its calls:

* a seqpack CLI or MCP call counts when its result contains the run's printed nonce
  (:mod:`seqpack.core.nonce`; the harness sets the seed, seqpack prints the digest);
* a read of a skill or task file counts when its result contains a line of that file;
* a ``Skill`` tool call counts when its result names the skill.

A claimed call without that evidence earns nothing (:func:`verified`). Penalties (the skill or a
seqpack tool used on a near-miss task, wasted calls) count claimed calls too.

* **Activation** (the skill was found and used): a ``Skill`` tool call naming the skill, a read of
  any file under ``skills/<name>/`` (``SKILL.md``, ``references/...``), a shell command that
  touches that folder, a ``seqpack`` CLI call, or a call to one of the seqpack MCP tools.
* **Tools used**: ``seqpack <subcommand>`` (also ``python -m seqpack <subcommand>`` and a
  skill script ``scripts/<x>.py <subcommand>``) and MCP tool names (``mcp__<server>__<tool>`` or a
  Codex ``mcp_tool_call``).
* **Waste**: the same call repeated three times or more, more than :data:`MAX_TOOL_CALLS` calls,
  ``SKILL.md`` read more than twice, the skill loaded on a near-miss task.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from seqpack_evals.tasks import CLI_COMMANDS, MCP_TOOLS, SCRIPTS
from seqpack_evals.transcript import FileView, ToolEvent, as_view

MAX_TOOL_CALLS = 40
REPEAT_LIMIT = 3

_SUB = "|".join(CLI_COMMANDS)
CLI_CALL = re.compile(
    rf"(?:^|[\s;&|(/'\"])(?:seqpack|python3?\s+-m\s+seqpack(?:\.cli)?|\S*scripts/[\w.-]+\.py)"
    rf"(?:\s+--?[\w-]+(?:[= ]\S+)?)*?\s+({_SUB})\b"
)


MAX_EVIDENCE_BYTES = 1 << 20


def _is_seqpack_call(e: ToolEvent) -> bool:
    return bool(e.command and CLI_CALL.search(e.command)) or e.mcp_tool in MCP_TOOLS


def verified(e: ToolEvent, nonce: str | None) -> bool:
    """True when the event's recorded result carries the run's printed nonce."""
    return nonce is not None and e.output is not None and nonce in e.output


def _lines(path: Path) -> list[str]:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_EVIDENCE_BYTES:
            return []
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    long = [ln for ln in lines if len(ln) >= 12]
    return long or lines


def content_seen(e: ToolEvent, path: Path) -> bool:
    """True when the event's result shows at least one line of the file at ``path``."""
    if not e.output:
        return False
    return any(line in e.output for line in _lines(path))


def cli_subcommands(events: Iterable[ToolEvent], nonce: str | None = None, *, claimed: bool = False) -> list[str]:
    """seqpack subcommands run in shell commands, in order (with repeats); only verified ones unless ``claimed``."""
    out = []
    for e in events:
        if e.command and (claimed or verified(e, nonce)):
            out.extend(m.group(1) for m in CLI_CALL.finditer(e.command))
    return out


def mcp_tools(events: Iterable[ToolEvent], nonce: str | None = None, *, claimed: bool = False) -> list[str]:
    """seqpack MCP tools called, in order (with repeats); only verified ones unless ``claimed``."""
    return [e.mcp_tool for e in events  # type: ignore[misc]
            if e.mcp_tool in MCP_TOOLS and (claimed or verified(e, nonce))]


def _skill_files(command: str, marker: str, view: FileView) -> list[Path]:
    names = re.findall(r"[\w./~-]*" + re.escape(marker) + r"[\w./-]*", command)
    out = []
    for name in names:
        rel = name[name.index(marker):]
        for prefix in (".claude/", ".agents/", ""):
            cand = view.local(prefix + rel)
            if cand is not None and cand.is_file():
                out.append(cand)
                break
    return out


def skill_evidence(events: Sequence[ToolEvent], skill_name: str, nonce: str | None = None,
                   workdir: str | Path | FileView | None = None, *, claimed: bool = False) -> list[str]:
    """Why we think the skill was used (empty: it was not); only verified uses unless ``claimed``.
    ``workdir``: the agent's working directory, or a :class:`~seqpack_evals.transcript.FileView` of a run."""
    marker = f"skills/{skill_name}"
    base = as_view(workdir)
    out: list[str] = []
    for i, e in enumerate(events):
        if e.skill is not None and skill_name in e.skill:
            if claimed or (e.output is not None and skill_name in e.output):
                out.append(f"event {i}: Skill tool loaded {e.skill}")
        elif e.path and marker in e.path.replace("\\", "/"):
            path = base.local(e.path)
            if claimed or (path is not None and content_seen(e, path)):
                out.append(f"event {i}: read {e.path}")
        elif e.command and marker in e.command and not CLI_CALL.search(e.command):
            if claimed or any(content_seen(e, p) for p in _skill_files(e.command, marker, base)):
                out.append(f"event {i}: shell touched {marker}")
    subs = cli_subcommands(events, nonce, claimed=claimed)
    if subs:
        out.append(f"seqpack CLI used: {', '.join(dict.fromkeys(subs))}")
    tools = mcp_tools(events, nonce, claimed=claimed)
    if tools:
        out.append(f"seqpack MCP tools used: {', '.join(dict.fromkeys(tools))}")
    return out


def script_used(expected: str | None, events: Sequence[ToolEvent], nonce: str | None = None) -> bool | None:
    """Whether the task's ``expected_script`` (or an equivalent MCP tool) was used and verified; None if none."""
    if expected is None:
        return None
    spec = SCRIPTS[expected]
    return bool(set(cli_subcommands(events, nonce)) & set(spec["cli"]) or set(mcp_tools(events, nonce)) & set(spec["mcp"]))


def unverified_calls(events: Sequence[ToolEvent], nonce: str | None) -> int:
    """seqpack CLI/MCP calls the agent claims whose results do not carry the nonce."""
    return sum(1 for e in events if _is_seqpack_call(e) and not verified(e, nonce))


def task_files_read(events: Sequence[ToolEvent], candidates: Sequence[str], workdir: str | Path | FileView,
                    nonce: str | None) -> list[str]:
    """Task files (workdir-relative; folders allowed) an event read with evidence: the result shows a line of
    the file, or a verified seqpack call names it."""
    from seqpack_evals.transcript import files_read

    base = as_view(workdir)
    out: list[str] = []
    for e in events:
        named = files_read([e], candidates)
        for cand in named:
            if cand in out:
                continue
            target = base.local(cand)
            if (_is_seqpack_call(e) and verified(e, nonce)) or (target is not None and target.is_file()
                                                                 and content_seen(e, target)):
                out.append(cand)
    return out


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


__all__ = ["MAX_TOOL_CALLS", "cli_subcommands", "content_seen", "mcp_tools", "script_used", "skill_evidence",
           "skill_md_reads", "task_files_read", "unverified_calls", "verified", "waste"]
