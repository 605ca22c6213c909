"""What an agent did, read from its output: tool events, the final answer, and the transcript file.

Agents differ in what they print. :func:`parse_agent_output` understands three shapes and falls
back to plain text:

* **JSON lines with Anthropic-style content blocks** (Claude Code ``-p --output-format stream-json
  --verbose``): ``{"type": "assistant", "message": {"content": [{"type": "tool_use", "name":
  "Bash", "input": {"command": ...}}, {"type": "text", ...}]}}`` and a final ``{"type": "result",
  "result": "..."}``; MCP tools appear as ``mcp__<server>__<tool>``.
* **JSON lines with item events** (Codex ``exec --json``): ``{"type": "item.completed", "item":
  {"type": "command_execution" | "mcp_tool_call" | "file_change" | "agent_message", ...}}``.
* **One JSON object** with a ``result`` string (Claude Code ``--output-format json``).
* Anything else: the whole stdout is the answer and no tool events are known.

These shapes are what the vendors document today; the parser ignores fields it does not know, so
a format change loses detail rather than crashing. Tool events are normalised to
:class:`ToolEvent` (tool name, shell command, file path, MCP tool name) together with the tool's
*result* as the agent received it (Claude ``tool_result`` blocks, matched by ``tool_use_id``;
Codex ``aggregated_output`` and MCP ``result``). The scorer credits a seqpack call only when its
result carries the run's nonce (:mod:`seqpack.core.nonce`), so the results are what make a
tool call count, not the agent's claim that it made one.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from seqpack.core.errors import InputError

READ_TOOLS = frozenset({"read", "view", "grep", "glob", "ls", "notebookread", "read_file", "list_dir"})
WRITE_TOOLS = frozenset({"write", "edit", "multiedit", "notebookedit", "create", "str_replace_based_edit_tool",
                         "write_file", "apply_patch"})
SHELL_TOOLS = frozenset({"bash", "shell", "command_execution", "exec_command", "terminal", "run_command"})


@dataclass(frozen=True)
class ToolEvent:
    """One tool call made by the agent, normalised across agent formats."""

    tool: str
    command: str | None = None
    path: str | None = None
    mcp_tool: str | None = None
    skill: str | None = None
    writes: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    id: str | None = None
    output: str | None = field(default=None, compare=False)

    @property
    def kind(self) -> str:
        """``shell``, ``read``, ``write``, ``mcp``, ``skill`` or ``other``."""
        name = self.tool.lower()
        if self.mcp_tool:
            return "mcp"
        if self.skill is not None:
            return "skill"
        if self.command is not None or name in SHELL_TOOLS:
            return "shell"
        if name in WRITE_TOOLS or self.writes:
            return "write"
        if name in READ_TOOLS:
            return "read"
        return "other"

    def signature(self) -> str:
        """Identity of the call, for spotting repeats."""
        return json.dumps([self.tool, self.command, self.path, self.mcp_tool, self.skill], sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the raw payload is kept, it is what the agent printed)."""
        out = asdict(self)
        out["writes"] = list(self.writes)
        out["kind"] = self.kind
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ToolEvent":
        """Inverse of :meth:`to_dict`."""
        return cls(tool=data["tool"], command=data.get("command"), path=data.get("path"),
                   mcp_tool=data.get("mcp_tool"), skill=data.get("skill"), writes=tuple(data.get("writes", ())),
                   raw=dict(data.get("raw", {})), id=data.get("id"), output=data.get("output"))


@dataclass
class ParsedOutput:
    """Result of :func:`parse_agent_output`."""

    answer: str
    events: list[ToolEvent]
    format: str
    usage: dict[str, Any] = field(default_factory=dict)


def _mcp_name(name: str) -> str | None:
    """``mcp__seqpack__validate_config`` -> ``validate_config``; ``seqpack.validate_config`` too."""
    if name.startswith("mcp__"):
        parts = name.split("__")
        return parts[-1] if len(parts) >= 3 else None
    return None


def _content_event(block: Mapping[str, Any]) -> ToolEvent:
    name = str(block.get("name", "tool"))
    inp = block.get("input") if isinstance(block.get("input"), Mapping) else {}
    path = inp.get("file_path") or inp.get("path") or inp.get("notebook_path")
    command = inp.get("command") if isinstance(inp.get("command"), str) else None
    skill = None
    if name.lower() == "skill":
        skill = str(inp.get("skill") or inp.get("name") or inp.get("command") or "")
        command = None
    writes: tuple[str, ...] = ()
    if name.lower() in WRITE_TOOLS and path:
        writes = (str(path),)
    tool_id = block.get("id")
    return ToolEvent(tool=name, command=command, path=None if path is None else str(path), mcp_tool=_mcp_name(name),
                     skill=skill, writes=writes, raw=dict(block), id=None if tool_id is None else str(tool_id))


def _result_text(content: Any) -> str:
    """The text of a tool result: a string, or the text parts of a content list (JSON for the rest)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(json.dumps(part, sort_keys=True, default=str))
        return "\n".join(parts)
    if content is None:
        return ""
    return json.dumps(content, sort_keys=True, default=str)


def _item_event(item: Mapping[str, Any]) -> ToolEvent | None:
    kind = str(item.get("type", ""))
    if kind in ("command_execution", "local_shell_call", "exec_command"):
        command = item.get("command")
        if isinstance(command, list):
            command = shlex.join(str(c) for c in command)
        output = item.get("aggregated_output", item.get("output"))
        return ToolEvent(tool=kind, command=None if command is None else str(command), raw=dict(item),
                         output=None if output is None else _result_text(output))
    if kind == "mcp_tool_call":
        result = item.get("result")
        output = None if result is None else _result_text(
            result.get("content") if isinstance(result, Mapping) and "content" in result else result)
        if isinstance(result, Mapping) and result.get("_meta") is not None:
            output = (output or "") + "\n" + json.dumps(result["_meta"], sort_keys=True)
        return ToolEvent(tool=f"mcp:{item.get('server', '')}", mcp_tool=str(item.get("tool", "")), raw=dict(item),
                         output=output)
    if kind == "file_change":
        paths = tuple(str(c.get("path")) for c in item.get("changes", []) if isinstance(c, Mapping) and c.get("path"))
        return ToolEvent(tool=kind, writes=paths, raw=dict(item))
    if kind in ("function_call", "custom_tool_call"):
        name = str(item.get("name", kind))
        args = item.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"command": args}
        block = {"name": name, "input": args if isinstance(args, Mapping) else {}}
        return _content_event(block)
    return None


def _blocks(message: Any) -> list[Mapping[str, Any]]:
    if isinstance(message, Mapping):
        content = message.get("content")
        if isinstance(content, list):
            return [b for b in content if isinstance(b, Mapping)]
    return []


def parse_agent_output(stdout: str) -> ParsedOutput:
    """Tool events and the final answer from an agent's stdout (see the module docstring)."""
    text = stdout.strip()
    if text.startswith("{") and text.endswith("}") and "\n{" not in text:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, Mapping) and isinstance(obj.get("result"), str):
            return ParsedOutput(obj["result"], [], "json-result", dict(obj.get("usage") or {}))
    events: list[ToolEvent] = []
    results: dict[str, str] = {}
    texts: list[str] = []
    final: str | None = None
    usage: dict[str, Any] = {}
    json_lines = 0
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, Mapping):
            continue
        json_lines += 1
        kind = obj.get("type")
        if kind == "result" and isinstance(obj.get("result"), str):
            final = obj["result"]
            usage = dict(obj.get("usage") or {})
        elif kind == "user":
            for block in _blocks(obj.get("message")):
                if block.get("type") == "tool_result" and block.get("tool_use_id") is not None:
                    results[str(block["tool_use_id"])] = _result_text(block.get("content"))
        elif kind == "assistant":
            for block in _blocks(obj.get("message")):
                if block.get("type") == "tool_use":
                    events.append(_content_event(block))
                elif block.get("type") == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
        elif kind in ("item.completed", "item.started", "item.updated") and isinstance(obj.get("item"), Mapping):
            item = obj["item"]
            if kind == "item.completed" and item.get("type") in ("agent_message", "assistant_message"):
                if isinstance(item.get("text"), str):
                    texts.append(item["text"])
                continue
            if kind != "item.completed":
                continue  # a started item is reported again when it completes
            event = _item_event(item)
            if event is not None:
                events.append(event)
        elif kind == "turn.completed" and isinstance(obj.get("usage"), Mapping):
            usage = dict(obj["usage"])
    if json_lines == 0:
        return ParsedOutput(stdout, [], "text")
    if results:
        events = [replace(e, output=results[e.id]) if e.id is not None and e.id in results else e for e in events]
    answer = final if final is not None else (texts[-1] if texts else "")
    return ParsedOutput(answer, events, "jsonl", usage)


def shell_words(command: str) -> list[str]:
    """Words of a shell command (shlex, falling back to whitespace splitting on bad quoting)."""
    try:
        return shlex.split(command, posix=True)
    except ValueError:
        return command.split()


def files_read(events: Iterable[ToolEvent], candidates: Iterable[str]) -> list[str]:
    """Which of ``candidates`` (workdir-relative paths) a read tool opened or a shell command named.

    A command names a file when the path appears as a whole token (``cat config.yaml``,
    ``bash -lc 'head -5 ./pack.log'``, ``seqpack inspect packs/``), so ``config.yaml.bak`` does not
    count for ``config.yaml``.
    """
    cands = list(candidates)
    out: list[str] = []
    for event in events:
        texts = []
        if event.kind == "read" and event.path:
            texts.append(event.path)
        if event.command:
            texts.append(event.command)
        for cand in cands:
            if cand in out:
                continue
            pattern = re.compile(r"(?:^|[\s'\"=/])" + re.escape(cand) + r"(?:$|[\s'\";|&)/])")
            if any(pattern.search(t) for t in texts):
                out.append(cand)
    return out


@dataclass
class Transcript:
    """Everything recorded about one task attempt (``transcripts/<task_id>.json`` in a run dir)."""

    task_id: str
    mode: str
    command: list[str]
    workdir: str
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    answer: str
    output_format: str
    events: list[ToolEvent]
    files_created: list[str]
    files_modified: list[str]
    files_deleted: list[str]
    files_read: list[str]
    skill_installed: list[str]
    canary: str | None = None
    nonce: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Where the harness kept the working directory's files after the agent exited (relative to the run directory
    #: in the file; absolute once read); None: the files are still in ``workdir`` (an older run, a test).
    kept: str | None = None
    #: Whether the agent ran in the bubblewrap sandbox (None: not recorded, an older run).
    sandboxed: bool | None = None
    #: Per stream: bytes received, bytes kept of the head and tail, bytes dropped (the harness's read bound).
    streams: dict[str, Any] = field(default_factory=dict)
    #: Processes still running after the agent's main process exited (killed by the harness).
    leftovers: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = asdict(self)
        out["events"] = [e.to_dict() for e in self.events]
        return out

    def files(self, skill_copy: str | Path | None = None, skill_name: str = "") -> "FileView":
        """How the scorer finds the files a path of this run names (:class:`FileView`)."""
        return FileView(Path(self.workdir), Path(self.kept) if self.kept else Path(self.workdir),
                        Path(skill_copy) if skill_copy else None, skill_name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Transcript":
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["events"] = [ToolEvent.from_dict(e) for e in data.get("events", [])]
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})


@dataclass(frozen=True)
class FileView:
    """Where the scorer reads a file the agent named: paths under the working directory the agent ran in map to the
    copy the harness kept; paths under an installed skill folder (``.claude/skills/<name>``,
    ``.agents/skills/<name>``) map to the run's copy of the skill; anything else is not read."""

    workdir: Path
    kept: Path
    skill: Path | None = None
    skill_name: str = ""

    def local(self, path: str | Path) -> Path | None:
        """The file to read for ``path`` as the agent wrote it (relative to its working directory or absolute)."""
        p = Path(path)
        rel: Path | None
        if p.is_absolute():
            try:
                rel = p.relative_to(self.workdir)
            except ValueError:
                rel = None
            if rel is None and self.kept != self.workdir:
                return None
            if rel is None:
                return p
        else:
            rel = p
        parts = rel.parts
        if self.skill is not None and self.skill_name and len(parts) >= 3 and parts[0] in (".claude", ".agents") \
                and parts[1] == "skills" and parts[2] == self.skill_name:
            return self.skill.joinpath(*parts[3:])
        if ".." in parts:
            return None
        return self.kept.joinpath(*parts)


def as_view(where: "str | Path | FileView | None") -> FileView:
    """A :class:`FileView` from a working directory (whose files are where the agent left them) or a view."""
    if isinstance(where, FileView):
        return where
    base = Path(where) if where is not None else Path(".")
    return FileView(base, base)


def write_transcript(transcript: Transcript, path: str | Path) -> Path:
    """Write a transcript as pretty JSON (atomically, never through a link; a full disk names the file)."""
    from seqpack.io import atomic

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(target, json.dumps(transcript.to_dict(), indent=2, ensure_ascii=False) + "\n",
                      what="the transcript")
    return target


#: Largest transcript or run.json read, in bytes.
MAX_TRANSCRIPT_BYTES = 32 << 20
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_task_id(value: Any, *, file: str, field: str) -> str:
    """A task id as it may name a transcript file (letters, digits, ``.``, ``_``, ``-``; no path parts)."""
    if not isinstance(value, str) or not _TASK_ID.fullmatch(value):
        raise InputError(f"not a task id: {value!r} (letters, digits, '.', '_' and '-')", file=file, field=field)
    return value


def read_json_object(path: str | Path, *, what: str) -> dict[str, Any]:
    """A JSON object from a file of a run directory, read like user JSON: bounded size, UTF-8, bounded
    depth, no lone surrogates or over-long numbers (:mod:`seqpack.data.jsontext`)."""
    from seqpack.config.yaml_bounded import read_bytes
    from seqpack.data import jsontext

    file = Path(path)
    raw = read_bytes(file, what=what, error=InputError, max_bytes=MAX_TRANSCRIPT_BYTES)
    try:
        data = jsontext.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 (byte {exc.start})", file=str(file)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON: {exc.msg}", file=str(file), line=exc.lineno) from None
    except jsontext.JsonProblem as exc:
        raise InputError(f"{what}: {exc.message}", file=str(file), field=exc.field) from None
    if not isinstance(data, dict):
        raise InputError(f"{what} must hold a JSON object, got {type(data).__name__}", file=str(file))
    return data


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's annotation (str, int, float, bool, None, list/tuple/dict of them)."""
    import types
    import typing

    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin in (list, tuple):
        item = typing.get_args(hint)[0] if typing.get_args(hint) else Any
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return True  # nested dataclasses (events) are checked on their own


def _check_fields(cls: type, data: Mapping[str, Any], *, file: str, prefix: str = "") -> None:
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name not in data:
            if required:
                raise InputError(f"transcript lacks {prefix}{f.name}", file=file, field=f"{prefix}{f.name}")
            continue
        if not _conforms(data[f.name], hints[f.name]):
            raise InputError(f"transcript field {prefix}{f.name} has the wrong type ({type(data[f.name]).__name__})",
                             file=file, field=f"{prefix}{f.name}")


def read_transcript(path: str | Path) -> Transcript:
    """Read a transcript; a clear error names the file (and field) when it is not one."""
    file = Path(path)
    data = read_json_object(file, what="transcript")
    _check_fields(Transcript, data, file=str(file))
    for k, event in enumerate(data["events"]):
        if not isinstance(event, dict):
            raise InputError(f"transcript event {k} is not an object", file=str(file), field=f"events[{k}]")
        _check_fields(ToolEvent, event, file=str(file), prefix=f"events[{k}].")
    tr = Transcript.from_dict(data)
    if tr.kept is not None:  # kept files live in the run directory: resolved against it, never outside it
        run_dir = file.resolve().parent.parent
        kept = (run_dir / tr.kept).resolve()
        if not kept.is_relative_to(run_dir):
            raise InputError(f"transcript field kept points outside the run directory: {tr.kept!r}", file=str(file),
                             field="kept")
        tr.kept = str(kept)
    return tr


__all__ = [
    "FileView",
    "ParsedOutput",
    "as_view",
    "ToolEvent",
    "Transcript",
    "files_read",
    "parse_agent_output",
    "read_transcript",
    "shell_words",
    "write_transcript",
]
