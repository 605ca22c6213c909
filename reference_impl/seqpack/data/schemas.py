"""The two input row schemas (prompt/completion and chat) and how to tell them apart.

Prompt/completion rows hold two strings, ``{"prompt": ..., "completion": ...}`` by default (the
column names are configurable; when a configured column is absent the canonical
``prompt``/``completion`` names are accepted as a fallback, as Megatron-Bridge does).

Chat rows hold a list of turns under exactly one of these keys:

* ``messages`` or ``conversation``: ``[{"role": ..., "content": ...}, ...]``, in the OpenAI /
  Hugging Face chat format: an assistant turn may carry ``reasoning_content`` (aliases ``reasoning``
  and ``thinking``) and ``tool_calls`` (``[{"type": "function", "id": ..., "function": {"name":
  ..., "arguments": <JSON string or object>}}]``, its ``content`` may then be ``null``); a ``tool``
  turn may carry ``tool_call_id`` and ``name``. A row-level ``tools`` list (JSON schemas of the
  functions) is passed to the chat template as ``tools``;
* ``conversations`` (ShareGPT): ``[{"from": ..., "value": ...}, ...]`` with an optional top-level
  ``"system"`` string, which becomes a leading system message. ShareGPT speaker names map to roles:
  ``human``/``user`` -> user, ``gpt``/``assistant`` -> assistant, ``system``, ``tool``/``observation``
  -> tool.

Schema objects only *extract and check* fields; turning text into tokens is
:mod:`seqpack.data.tokenize`. A missing or wrong-typed field raises
:class:`~seqpack.core.errors.InputError` naming the field (``completion``,
``messages[3].content``, ...); wrap calls in :func:`seqpack.data.location.at_row` to add
the file and line.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass
from typing import Any, Literal

from seqpack.core.choices import CHAT_LOSS_MODES, PC_LOSS_MODES, REASONING_POLICIES, SCHEMA_KINDS, TEMPLATE_ERROR_POLICIES
from seqpack.core.errors import ConfigError, InputError

SchemaKind = Literal[SCHEMA_KINDS]  # type: ignore[valid-type]
CHAT_KEYS: tuple[str, ...] = ("messages", "conversation", "conversations")
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES: dict[str, str] = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
    "observation": "tool",
}


REASONING_KEYS: tuple[str, ...] = ("reasoning_content", "reasoning", "thinking")


@dataclass(frozen=True)
class ToolCall:
    """One function call made by an assistant turn; ``arguments`` is a JSON string or a JSON object."""

    name: str
    arguments: Any
    id: str | None = None
    type: str = "function"

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI form chat templates read: ``{"type", "function": {"name", "arguments"}, "id"?}``."""
        out: dict[str, Any] = {"type": self.type, "function": {"name": self.name, "arguments": self.arguments}}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class Message:
    """One chat turn after normalization: a role from :data:`ROLES`, its text and optional tool/reasoning fields.

    ``content`` is ``None`` only for an assistant turn that makes tool calls without text.
    ``reasoning`` is the turn's reasoning text (read from ``reasoning_content``, ``reasoning`` or
    ``thinking``); an inline ``<think>...</think>`` block stays inside ``content``.
    """

    role: str
    content: str | None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The dict a chat template sees: ``role`` and ``content``, plus only the optional keys that are set.

        Reasoning is given under both ``reasoning_content`` (Qwen, DeepSeek templates) and
        ``thinking`` (GPT-OSS templates); absent fields stay absent, since templates test for them
        with ``is defined`` or ``in message``.
        """
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
            out["thinking"] = self.reasoning
        if self.tool_calls is not None:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class PromptCompletionSchema:
    """How to read and supervise a prompt/completion row.

    ``prompt_template`` must contain the ``{prompt}`` placeholder and no other field. The
    ``separator`` is put in front of the completion (its leading space is dropped for tokenizers
    that are not space-sensitive). ``strip_whitespace`` strips ASCII spaces (only ``" "``) from
    both ends of both values. ``loss_mode="completion"`` trains on the completion (separator
    included) and EOS; ``"full"`` trains on every token. An empty completion is a rejected sample
    unless ``allow_empty_completion``.
    """

    prompt_column: str = "prompt"
    completion_column: str = "completion"
    prompt_template: str = "{prompt}"
    separator: str = " "
    loss_mode: str = "completion"
    strip_whitespace: bool = True
    add_bos: bool = False
    add_eos: bool = True
    allow_empty_completion: bool = False

    kind = "prompt_completion"

    def __post_init__(self) -> None:
        if self.loss_mode not in PC_LOSS_MODES:
            raise ConfigError(
                f"unknown loss_mode {self.loss_mode!r} for prompt/completion; choose one of {', '.join(PC_LOSS_MODES)}",
                field="loss_mode",
            )
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.prompt_template) if f is not None}
        except ValueError as exc:
            raise ConfigError(f"prompt_template is not a valid format string: {exc}", field="prompt_template") from None
        if fields != {"prompt"}:
            raise ConfigError(
                f"prompt_template must use the single placeholder {{prompt}}, found {sorted(fields) or 'none'}",
                field="prompt_template",
            )
        for name in ("prompt_column", "completion_column"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"{name} must be a non-empty string", field=name)

    def _field(self, row: dict[str, Any], column: str, canonical: str) -> str:
        key = column if column in row else canonical if canonical in row else None
        if key is None:
            raise InputError(f"missing field {column!r} (row keys: {sorted(row)})", field=column)
        value = row[key]
        if not isinstance(value, str):
            raise InputError(f"field must be a string, got {type(value).__name__}", field=key)
        return value.strip(" ") if self.strip_whitespace else value

    def require_columns(self, row: dict[str, Any]) -> None:
        """Refuse a configured column that ``row`` (the file's first row) lacks.

        The canonical-name fallback of :meth:`extract` stays for single rows; a column that is not
        even in the first row was most likely misspelled, and packing the fallback column while
        the manifest records the configured one would be silently wrong.
        """
        for column, canonical in ((self.prompt_column, "prompt"), (self.completion_column, "completion")):
            if column != canonical and column not in row:
                raise InputError(
                    f"column {column!r} is not in the first row (row keys: {sorted(row)})", field=column,
                    fix=f"check the column name; the default is {canonical!r}",
                )

    def extract(self, row: dict[str, Any]) -> tuple[str, str]:
        """``(prompt_text, completion)``: the prompt already put through ``prompt_template``."""
        present = [k for k in CHAT_KEYS if k in row]
        if present:
            raise InputError(
                f"row carries the chat key {present[0]!r}; it is a chat row, not prompt/completion",
                field=present[0],
                fix="use ChatSchema for this file",
            )
        prompt = self._field(row, self.prompt_column, "prompt")
        completion = self._field(row, self.completion_column, "completion")
        return self.prompt_template.format(prompt=prompt), completion

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (used in cache keys and manifests)."""
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class ChatSchema:
    """How to read and supervise a chat row.

    ``loss_mode``: ``"assistant"`` trains every assistant turn, ``"last_turn"`` only the last
    assistant turn, ``"full"`` every token. ``reasoning`` decides whether the reasoning of an
    assistant turn (a ``reasoning_content`` field or an inline ``<think>`` block, whichever the
    template renders) is trained with the turn (``"train"``, the default) or kept as context only
    (``"mask"``, which under ``full`` masks it too). ``roles`` lists the accepted roles for
    ``messages``/``conversation`` rows. ``on_template_error``: a conversation the model's chat template
    refuses stops the run (``"error"``, the default, naming the row) or is skipped and counted as
    rejected with reason ``template_error`` (``"skip"``).
    """

    loss_mode: str = "assistant"
    roles: tuple[str, ...] = ROLES
    reasoning: str = "train"
    on_template_error: str = "error"

    kind = "chat"

    def __post_init__(self) -> None:
        if self.loss_mode not in CHAT_LOSS_MODES:
            raise ConfigError(
                f"unknown loss_mode {self.loss_mode!r} for chat; choose one of {', '.join(CHAT_LOSS_MODES)}",
                field="loss_mode",
            )
        if self.reasoning not in REASONING_POLICIES:
            raise ConfigError(
                f"unknown reasoning policy {self.reasoning!r}; choose one of {', '.join(REASONING_POLICIES)}",
                field="reasoning",
            )
        if self.on_template_error not in TEMPLATE_ERROR_POLICIES:
            raise ConfigError(f"unknown on_template_error {self.on_template_error!r}; choose one of "
                              f"{', '.join(TEMPLATE_ERROR_POLICIES)}", field="on_template_error")

    def extract_tools(self, row: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The row's ``tools`` list (function schemas handed to the chat template), or None."""
        tools = row.get("tools")
        if tools is None:
            return None
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise InputError("must be a list of JSON objects (function schemas)", field="tools")
        return tools

    def extract(self, row: dict[str, Any]) -> list[Message]:
        """The row's turns as :class:`Message` objects (ShareGPT ``system`` first when present)."""
        present = [k for k in CHAT_KEYS if k in row]
        if not present:
            raise InputError(f"chat row needs one of {', '.join(CHAT_KEYS)} (row keys: {sorted(row)})", field="messages")
        if len(present) > 1:
            raise InputError(f"chat row has several conversation keys {present}; keep exactly one", field=present[1])
        key = present[0]
        turns = row[key]
        if not isinstance(turns, list):
            raise InputError(f"must be a list of turns, got {type(turns).__name__}", field=key)
        if key == "conversations":
            return self._sharegpt(row, turns)
        out: list[Message] = []
        for i, turn in enumerate(turns):
            role = _turn_str(turn, key, i, "role")
            if role not in self.roles:
                raise InputError(f"unknown role {role!r}; expected one of {', '.join(self.roles)}", field=f"{key}[{i}].role")
            out.append(_message(turn, key, i, role))
        return out

    def _sharegpt(self, row: dict[str, Any], turns: list[Any]) -> list[Message]:
        out: list[Message] = []
        if "system" in row and row["system"] is not None:
            if not isinstance(row["system"], str):
                raise InputError(f"must be a string, got {type(row['system']).__name__}", field="system")
            if row["system"]:
                out.append(Message("system", row["system"]))
        for i, turn in enumerate(turns):
            speaker = _turn_str(turn, "conversations", i, "from")
            role = SHAREGPT_ROLES.get(speaker)
            if role is None:
                raise InputError(
                    f"unknown speaker {speaker!r}; expected one of {', '.join(SHAREGPT_ROLES)}",
                    field=f"conversations[{i}].from",
                )
            out.append(Message(role, _turn_str(turn, "conversations", i, "value")))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (used in cache keys and manifests)."""
        out = {"kind": self.kind, "loss_mode": self.loss_mode, "roles": list(self.roles), "reasoning": self.reasoning}
        if self.on_template_error != "error":  # only when set: packs made before the option keep their fingerprint
            out["on_template_error"] = self.on_template_error
        return out


Schema = PromptCompletionSchema | ChatSchema


def _turn_str(turn: Any, key: str, i: int, name: str) -> str:
    if not isinstance(turn, dict):
        raise InputError(f"turn must be an object, got {type(turn).__name__}", field=f"{key}[{i}]")
    if name not in turn:
        raise InputError(f"missing {name!r} (turn keys: {sorted(turn)})", field=f"{key}[{i}].{name}")
    value = turn[name]
    if not isinstance(value, str):
        what = "null" if value is None else type(value).__name__
        raise InputError(f"must be a string, got {what}", field=f"{key}[{i}].{name}")
    return value


def _opt_str(turn: dict[str, Any], key: str, i: int, name: str) -> str | None:
    value = turn.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}", field=f"{key}[{i}].{name}")
    return value


def _tool_calls(turn: dict[str, Any], key: str, i: int) -> tuple[ToolCall, ...] | None:
    calls = turn.get("tool_calls")
    if calls is None:
        return None
    where = f"{key}[{i}].tool_calls"
    if not isinstance(calls, list):
        raise InputError(f"must be a list of calls, got {type(calls).__name__}", field=where)
    out = []
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            raise InputError(f"call must be an object, got {type(call).__name__}", field=f"{where}[{j}]")
        fn = call.get("function", call)  # {"function": {...}} (OpenAI) or the function itself
        if not isinstance(fn, dict):
            raise InputError(f"must be an object, got {type(fn).__name__}", field=f"{where}[{j}].function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InputError("must be a non-empty string", field=f"{where}[{j}].function.name")
        args = fn.get("arguments", {})
        if not isinstance(args, (str, dict)):
            raise InputError(
                f"must be a JSON string or object, got {type(args).__name__}", field=f"{where}[{j}].function.arguments"
            )
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise InputError(f"must be a string, got {type(call_id).__name__}", field=f"{where}[{j}].id")
        kind = call.get("type", "function")
        out.append(ToolCall(name=name, arguments=args, id=call_id, type=kind if isinstance(kind, str) else "function"))
    return tuple(out)


def _message(turn: Any, key: str, i: int, role: str) -> Message:
    """A ``messages``/``conversation`` turn; content may be null only beside tool calls."""
    calls = _tool_calls(turn, key, i) if role == "assistant" else None
    if calls and turn.get("content") is None:
        content = None
    else:
        content = _turn_str(turn, key, i, "content")
    reasoning = None
    if role == "assistant":
        present = [k for k in REASONING_KEYS if turn.get(k) is not None]
        if len({str(turn[k]) for k in present}) > 1:
            raise InputError(f"carries different reasoning under {present}; keep one", field=f"{key}[{i}].{present[1]}")
        reasoning = _opt_str(turn, key, i, present[0]) if present else None
    return Message(
        role,
        content,
        reasoning=reasoning,
        tool_calls=calls,
        tool_call_id=_opt_str(turn, key, i, "tool_call_id") if role == "tool" else None,
        name=_opt_str(turn, key, i, "name") if role == "tool" else None,
    )


def detect_schema(
    row: dict[str, Any], *, prompt_column: str = "prompt", completion_column: str = "completion"
) -> SchemaKind:
    """Tell whether ``row`` is a chat row or a prompt/completion row; :class:`InputError` if neither or both."""
    if not isinstance(row, dict):
        raise InputError(f"a row must be a JSON object, got {type(row).__name__}")
    chat = [k for k in CHAT_KEYS if k in row]
    pc = prompt_column in row and completion_column in row
    if chat and pc:
        raise InputError(
            f"row has both chat key {chat[0]!r} and {prompt_column!r}/{completion_column!r}; cannot tell its schema",
            field=chat[0],
        )
    if chat:
        return "chat"
    if pc:
        return "prompt_completion"
    hint = ""
    if "input" in row and "output" in row:
        hint = " (legacy {input, output} rows: use PromptCompletionSchema(prompt_column='input', completion_column='output'))"
    raise InputError(
        f"row is neither chat (needs one of {', '.join(CHAT_KEYS)}) nor prompt/completion "
        f"(needs {prompt_column!r} and {completion_column!r}); row keys: {sorted(row)}{hint}"
    )


def default_schema(kind: str) -> Schema:
    """The default schema object for ``"prompt_completion"`` or ``"chat"``."""
    if kind == "prompt_completion":
        return PromptCompletionSchema()
    if kind == "chat":
        return ChatSchema()
    raise ConfigError(f"unknown schema kind {kind!r}; choose prompt_completion or chat", field="schema")


def schema_from_options(
    kind: str = "auto",
    *,
    prompt_column: str = "prompt",
    completion_column: str = "completion",
    loss_mode: str | None = None,
    reasoning: str | None = None,
    on_template_error: str | None = None,
) -> Schema | None:
    """The schema object for command-line style options; None means "detect from the first row".

    ``kind`` is ``auto``, ``prompt_completion`` or ``chat``; custom column names imply
    prompt/completion; a ``loss_mode`` needs an explicit kind; ``reasoning`` (``train`` or
    ``mask``, default ``train``) applies to chat only and needs ``kind="chat"``.
    """
    if kind == "chat":
        return ChatSchema(loss_mode=loss_mode or "assistant", reasoning=reasoning or "train",
                          on_template_error=on_template_error or "error")
    if reasoning is not None:
        raise ConfigError("a reasoning policy applies to chat data: pass the chat schema (--schema chat)",
                          field="reasoning")
    if on_template_error not in (None, "error"):
        raise ConfigError("skipping rows a chat template refuses applies to chat data: pass the chat schema "
                          "(--schema chat)", field="on_template_error")
    if kind == "prompt_completion" or prompt_column != "prompt" or completion_column != "completion":
        return PromptCompletionSchema(
            prompt_column=prompt_column, completion_column=completion_column, loss_mode=loss_mode or "completion"
        )
    if kind != "auto":
        raise ConfigError(f"unknown schema kind {kind!r}; choose auto, prompt_completion or chat", field="schema")
    if loss_mode:
        raise ConfigError("a loss mode needs an explicit schema (prompt_completion or chat)", field="loss_mode")
    return None

