"""Which characters and tokens of a rendered chat each message owns, without rendering prefixes.

The chat template is a black box that turns message dicts into one string. To know which tokens
an assistant turn owns, the conversation is rendered twice, each exactly once:

1. **Real rendering** ``R`` of the messages as given.
2. **Sentinel rendering** ``S`` of a copy (:func:`sentinel_messages`) in which every text run of
   every field (content, reasoning, tool-call names and string arguments, tool results) is replaced
   by a unique marker ``\\ue000<n>\\ue001``. Tags such as ``<think>``/``</think>`` or
   ``<tool_response>`` and the whitespace around each run are kept, so templates that split on
   ``</think>``, strip newlines or test ``startswith('<tool_response>')`` take the same branches.

:func:`align` walks ``S``: its literal text must equal ``R`` character for character, and each
marker stands for its run (verbatim or JSON-escaped, as ``tojson`` writes it). The result is the
exact character span of every run in ``R``; a run the template dropped (Qwen3 strips the reasoning
of earlier turns) has no marker in ``S`` and no span. A run the template writes twice is its
message's at its first place only; the copy belongs to no message (GPT-OSS repeats the called
tool's name in the header of the tool-result message, which must not be trained with the call). When the template rewrites text in a way the
markers cannot follow, :func:`search_pieces` locates each run in order in ``R`` instead.

:func:`assistant_spans` turns the runs of each assistant message into its **trained span**: from
the end of the turn header (the generation prompt the template appends for a new assistant turn)
to the end of the turn's end-of-turn marker (the EOS token or the special token that closes a
turn). Markup between the header and the end (``<tool_call>`` tags, a ``<think>`` block with
reasoning) is inside the span; a reasoning block the template inserts with no reasoning in it
(``<think>\\n\\n</think>``) is treated as header. The reasoning part of a span is reported
separately so a loss policy can keep or mask it. Templates with ``{% generation %}`` blocks give
the trained spans directly (see :mod:`seqpack.data.chat_render`).

:func:`token_ownership` maps character spans to tokens from their offsets: a token belongs to an
assistant span if any of its characters does (a byte-level token that glues the header's last
space to the first answer word is trained), otherwise to a non-assistant message whose run it
overlaps, otherwise to nobody (-1). Everything here is pure: no jinja, no tokenizer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SENTINEL_OPEN, SENTINEL_CLOSE = "\ue000", "\ue001"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_SENTINEL_RE = re.compile(SENTINEL_OPEN + r"(\d+)" + SENTINEL_CLOSE)
_TAG_RE = re.compile(r"</?[A-Za-z][\w.\-]*>")
_RUN_RE = re.compile(r"^(\s*)(.*?)(\s*)$", re.S)


@dataclass(frozen=True)
class Piece:
    """One text run of one message: ``kind`` is ``content``, ``reasoning`` or ``tool_call``."""

    message: int
    kind: str
    text: str


@dataclass(frozen=True)
class PieceSpan:
    """Where a :class:`Piece` landed in the real rendering: characters ``[start, end)``."""

    start: int
    end: int
    message: int
    kind: str


@dataclass
class TurnSpan:
    """Characters ``[start, end)`` trained for assistant ``message``; ``reasoning`` lists its reasoning parts."""

    start: int
    end: int
    message: int
    reasoning: list[tuple[int, int]] = field(default_factory=list)


class _Sentinels:
    """Builds marker strings and remembers which piece each marker stands for."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = []

    def text(self, value: str, message: int, kind: str, *, think: bool = False) -> str:
        """``value`` with each run between tags replaced by a marker (tags and outer whitespace kept).

        With ``think``, runs inside ``<think>...</think>`` (or before a lone ``</think>``) are
        ``reasoning`` pieces.
        """
        out: list[str] = []
        pos = 0
        in_think = think and THINK_CLOSE in value and THINK_OPEN not in value.split(THINK_CLOSE, 1)[0]
        for m in _TAG_RE.finditer(value):
            out.append(self._run(value[pos : m.start()], message, "reasoning" if in_think else kind))
            tag = m.group(0)
            if think and tag == THINK_OPEN:
                in_think = True
            elif think and tag == THINK_CLOSE:
                in_think = False
            out.append(tag)
            pos = m.end()
        out.append(self._run(value[pos:], message, "reasoning" if in_think else kind))
        return "".join(out)

    def _run(self, run: str, message: int, kind: str) -> str:
        lead, core, trail = _RUN_RE.match(run).groups()  # type: ignore[union-attr]
        if not core:
            return run
        self.pieces.append(Piece(message, kind, core))
        return f"{lead}{SENTINEL_OPEN}{len(self.pieces) - 1}{SENTINEL_CLOSE}{trail}"


def sentinel_messages(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Piece]] | None:
    """A marker copy of template-ready message dicts and the pieces its markers stand for.

    ``None`` when a text already contains the private-use marker characters (then only
    :func:`search_pieces` applies). Tool-call arguments given as JSON objects keep their keys,
    numbers and booleans; their string values are marked like any other run.
    """
    marks = _Sentinels()
    out: list[dict[str, Any]] = []
    for k, msg in enumerate(messages):
        if any(SENTINEL_OPEN in s or SENTINEL_CLOSE in s for s in _strings(msg)):
            return None
        role = msg.get("role")
        copy = dict(msg)
        content = msg.get("content")
        if isinstance(content, str):
            copy["content"] = marks.text(content, k, "content", think=role == "assistant")
        reasoning = msg.get("reasoning_content", msg.get("thinking"))
        if isinstance(reasoning, str):
            marked = marks.text(reasoning, k, "reasoning")
            for key in ("reasoning_content", "thinking"):
                if key in msg:
                    copy[key] = marked
        if isinstance(msg.get("tool_calls"), list):
            copy["tool_calls"] = [_marked_call(call, k, marks) for call in msg["tool_calls"]]
        out.append(copy)
    return out, marks.pieces


def _marked_call(call: dict[str, Any], k: int, marks: _Sentinels) -> dict[str, Any]:
    fn = dict(call.get("function", {}))
    if isinstance(fn.get("name"), str):
        fn["name"] = marks.text(fn["name"], k, "tool_call")
    if isinstance(fn.get("arguments"), str):
        fn["arguments"] = marks.text(fn["arguments"], k, "tool_call")
    elif isinstance(fn.get("arguments"), dict):
        fn["arguments"] = _marked_values(fn["arguments"], k, marks)
    return {**call, "function": fn}


def _marked_values(value: Any, k: int, marks: _Sentinels) -> Any:
    """``value`` (JSON-like arguments) with every string value marked; keys, numbers and booleans kept.

    The markers locate the arguments, so a turn whose template writes its closing marker after
    them (GPT-OSS: ``...<|message|>{"city": "Paris"}<|call|>``) ends there, not at the first
    special token after the tool's name.
    """
    if isinstance(value, str):
        return marks.text(value, k, "tool_call")
    if isinstance(value, dict):
        return {key: _marked_values(v, k, marks) for key, v in value.items()}
    if isinstance(value, list):
        return [_marked_values(v, k, marks) for v in value]
    return value


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def message_pieces(messages: Sequence[dict[str, Any]]) -> list[Piece]:
    """The pieces of ``messages`` in order (what :func:`sentinel_messages` would mark)."""
    marks = _Sentinels()
    for k, msg in enumerate(messages):
        if isinstance(msg.get("content"), str):
            marks.text(msg["content"], k, "content", think=msg.get("role") == "assistant")
        reasoning = msg.get("reasoning_content", msg.get("thinking"))
        if isinstance(reasoning, str):
            marks.text(reasoning, k, "reasoning")
        for call in msg.get("tool_calls") or []:
            _marked_call(call, k, marks)
    return marks.pieces


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def align(sentinel_text: str, real_text: str, pieces: Sequence[Piece]) -> list[PieceSpan] | None:
    """Spans of the marked pieces in ``real_text``, or ``None`` if the two renderings disagree."""
    spans: list[PieceSpan] = []
    marks = list(_SENTINEL_RE.finditer(sentinel_text))
    seen: set[int] = set()
    pos = 0
    last = 0
    for i, m in enumerate(marks):
        literal = sentinel_text[last : m.start()]
        if not real_text.startswith(literal, pos):
            return None
        pos += len(literal)
        n = int(m.group(1))
        if n >= len(pieces):
            return None
        piece = pieces[n]
        following = sentinel_text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(sentinel_text)]
        for form in (piece.text, _escaped(piece.text)):
            if real_text.startswith(form, pos) and real_text.startswith(following, pos + len(form)):
                break
        else:
            return None
        if n not in seen:  # a later copy (GPT-OSS names the tool-result message after the call) is nobody's run
            spans.append(PieceSpan(pos, pos + len(form), piece.message, piece.kind))
            seen.add(n)
        pos += len(form)
        last = m.end()
    if sentinel_text[last:] != real_text[pos:]:
        return None
    return spans


def search_pieces(real_text: str, pieces: Sequence[Piece]) -> tuple[list[PieceSpan], list[Piece]]:
    """Fallback: find each piece in order (verbatim or JSON-escaped); returns (found spans, missing pieces)."""
    spans: list[PieceSpan] = []
    missing: list[Piece] = []
    cursor = 0
    for piece in pieces:
        best = None
        for form in dict.fromkeys((piece.text, _escaped(piece.text))):
            at = real_text.find(form, cursor)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, at + len(form))
        if best is None:
            missing.append(piece)
            continue
        spans.append(PieceSpan(best[0], best[1], piece.message, piece.kind))
        cursor = best[1]
    return spans, missing


def special_prefixes(text: str, specials: Sequence[str]) -> list[str]:
    """Prefixes of ``text`` that end where one of ``specials`` (or a newline) ends, longest first."""
    cuts = set()
    for tok in specials:
        start = text.find(tok)
        while start >= 0:
            cuts.add(start + len(tok))
            start = text.find(tok, start + 1)
    cuts.update(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return [text[:c] for c in sorted(cuts, reverse=True) if 0 < c <= len(text)]


def _header_end(
    real_text: str, lo: int, hi: int, header: str, header_prefixes: Sequence[str], specials: Sequence[str]
) -> int:
    """End of the turn header in ``real_text[lo:hi]``: the last generation prompt (or its longest found prefix).

    A template without a generation prompt (Mistral: ``[INST]q[/INST]a</s>``) closes the previous
    turn with a special token; the assistant turn starts after the first one in the region.
    """
    region = real_text[lo:hi]
    if not header:
        found = [region.find(tok) + len(tok) for tok in specials if tok and tok in region]
        return lo + min(found) if found else hi
    for candidate in (header, *header_prefixes):
        at = region.rfind(candidate)
        if at >= 0:
            return lo + at + len(candidate)
    return hi


def _turn_end(real_text: str, lo: int, hi: int, end_markers: Sequence[str], specials: Sequence[str]) -> int:
    """End of the end-of-turn marker in ``real_text[lo:hi]``: a known end marker, else the first special token."""
    region = real_text[lo:hi]
    for group in (end_markers, specials):
        found = [(region.find(tok), tok) for tok in group if tok and tok in region]
        if found:
            at, tok = min(found)
            return lo + at + len(tok)
    return lo


class UnlocatedArguments(ValueError):
    """Tool-call arguments the template renders but :func:`string_free_arguments` cannot find."""

    def __init__(self, message: int, text: str) -> None:
        super().__init__(text)
        self.message = message


def string_free_arguments(
    real_text: str, spans: Sequence[PieceSpan], messages: Sequence[dict[str, Any]]
) -> list[PieceSpan]:
    """Spans of tool-call arguments that hold no string value (``{}``, ``{"n": 3}``), added to ``spans``.

    Marked runs locate arguments through their string values; arguments without one would leave the
    call's trained span ending after the tool's name (GPT-OSS writes ``<|channel|>`` there and the
    arguments and ``<|call|>`` after it). Each such object is looked for, as the template's
    ``tojson`` writes it, between its call's name and the next message's first run. An object whose
    keys are rendered there but that matches no known JSON form raises :class:`UnlocatedArguments`
    (the caller refuses the row); one the template does not render at all adds nothing.
    """
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    added: list[PieceSpan] = []
    for k, msg in enumerate(messages):
        cursor = 0
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            name, args = fn.get("name"), fn.get("arguments")
            own = [s for s in ordered if s.message == k and s.kind == "tool_call" and s.start >= cursor]
            at_name = next((s for s in own if isinstance(name, str) and real_text[s.start : s.end] == name), None)
            if at_name is None:
                continue
            cursor = at_name.end
            if not isinstance(args, (dict, list)) or any(True for _ in _strings(args)):
                continue
            limit = min((s.start for s in ordered if s.message != k and s.start >= cursor), default=len(real_text))
            forms = dict.fromkeys(json.dumps(args, ensure_ascii=False, sort_keys=sort, separators=sep)
                                  for sort in (False, True) for sep in ((", ", ": "), (",", ":")))
            found = [(real_text.find(f, cursor, limit), f) for f in forms]
            found = [(at, f) for at, f in found if at >= 0]
            if found:
                at, form = min(found)
                added.append(PieceSpan(at, at + len(form), k, "tool_call"))
                cursor = at + len(form)
            elif isinstance(args, dict) and any(json.dumps(key) in real_text[cursor:limit] for key in args):
                raise UnlocatedArguments(k, f"the arguments of tool call {name!r} in message {k} are rendered "
                                         "in a form seqpack cannot locate, so the end of the call cannot be "
                                         "attributed")
    return [*spans, *added]


def assistant_spans(
    real_text: str,
    spans: Sequence[PieceSpan],
    roles: Sequence[str],
    *,
    header: str,
    end_markers: Sequence[str],
    specials: Sequence[str],
) -> list[TurnSpan]:
    """Trained character span of every assistant message that has a run in ``real_text`` (module docstring)."""
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    header_prefixes = special_prefixes(header, specials)[1:] if header else []
    turns: list[TurnSpan] = []
    for k, role in enumerate(roles):
        own = [s for s in ordered if s.message == k]
        if role != "assistant" or not own:
            continue
        first, last = own[0].start, max(s.end for s in own)
        prev_end = max((s.end for s in ordered if s.message != k and s.end <= first), default=0)
        next_start = min((s.start for s in ordered if s.message != k and s.start >= last), default=len(real_text))
        start = _header_end(real_text, prev_end, first, header, header_prefixes, specials)
        end = _turn_end(real_text, last, next_start, end_markers, specials)
        answer = [s for s in own if s.kind != "reasoning"]
        thoughts = [s for s in own if s.kind == "reasoning"]
        reasoning: list[tuple[int, int]] = []
        answer_start = answer[0].start if answer else last
        if thoughts:
            reasoning.append((start, _answer_header_end(real_text, thoughts, answer_start, header) if answer
                              else _reasoning_end(real_text, last, end)))
        elif THINK_CLOSE in real_text[start:answer_start]:
            # an empty reasoning block written by the template: part of the header, never trained
            close = real_text.rindex(THINK_CLOSE, start, answer_start) + len(THINK_CLOSE)
            while close < answer_start and real_text[close].isspace():
                close += 1
            start = close
        turns.append(TurnSpan(start, max(end, last), k, reasoning))
    return _clip(turns)


def _answer_header_end(real_text: str, thoughts: Sequence[PieceSpan], answer_start: int, header: str) -> int:
    """Where the reasoning part of a turn ends: the answer, or the end of the answer's own turn header.

    A template that writes reasoning as a message of its own (GPT-OSS: an ``analysis`` message,
    then ``<|start|>assistant`` and the ``final`` channel) puts a full turn header between the last
    reasoning run and the answer; the reasoning part runs through that header, and the channel
    markup after it belongs to the answer (the model emits it whether or not reasoning is trained).
    """
    before = [t.end for t in thoughts if t.end <= answer_start]
    if not header or not before:
        return answer_start
    at = real_text.rfind(header, max(before), answer_start)
    return at + len(header) if at >= 0 else answer_start


def _reasoning_end(real_text: str, last: int, end: int) -> int:
    """A turn that is all reasoning: its reasoning runs through the closing think tag, if any, else to the end marker."""
    close = real_text.find(THINK_CLOSE, last, end)
    return close + len(THINK_CLOSE) if close >= 0 else end


def generation_turns(
    blocks: Sequence[tuple[int, int]], spans: Sequence[PieceSpan] | None, roles: Sequence[str]
) -> list[TurnSpan]:
    """Trained spans from ``{% generation %}`` blocks, each given to the assistant message whose run it holds.

    Without spans (or for a block that holds no assistant run) blocks are given to the assistant
    messages in order. Reasoning runs inside a block are reported as its reasoning part.
    """
    assistants = [k for k, r in enumerate(roles) if r == "assistant"]
    turns: list[TurnSpan] = []
    for i, (a, b) in enumerate(blocks):
        inside = [s for s in spans or [] if a <= s.start and s.end <= b and roles[s.message] == "assistant"]
        if inside:
            k = inside[0].message
        elif i < len(assistants):
            k = assistants[i]
        else:
            k = assistants[-1] if assistants else -1
        thoughts = [s for s in inside if s.kind == "reasoning"]
        answer = [s for s in inside if s.kind != "reasoning"]
        reasoning = [(a, answer[0].start if answer else max(s.end for s in thoughts))] if thoughts else []
        turns.append(TurnSpan(a, b, k, reasoning))
    return _clip(turns)


def _clip(turns: list[TurnSpan]) -> list[TurnSpan]:
    turns.sort(key=lambda t: t.start)
    for prev, cur in zip(turns, turns[1:]):
        prev.end = min(prev.end, cur.start)
    return [t for t in turns if t.end > t.start]


def token_ownership(
    offsets: np.ndarray, text_len: int, turns: Sequence[TurnSpan], spans: Sequence[PieceSpan] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Per token: the owning message (int32, -1 none) and whether it is reasoning only (bool).

    ``offsets`` is ``[n, 2]`` character offsets. A token touching an assistant span belongs to it;
    it is "reasoning" when all its trained characters are reasoning. Other tokens belong to a
    non-assistant run they overlap (``spans``), else to nobody.
    """
    n = int(offsets.shape[0])
    owner = np.full(n, -1, dtype=np.int32)
    reasoning = np.zeros(n, dtype=bool)
    if n == 0:
        return owner, reasoning
    a = np.clip(offsets[:, 0].astype(np.int64), 0, text_len)
    b = np.clip(np.maximum(offsets[:, 1].astype(np.int64), a + 1), 0, text_len)
    a = np.minimum(a, b)
    char_owner = np.full(text_len, -1, dtype=np.int32)
    char_reason = np.zeros(text_len, dtype=bool)
    for t in turns:
        char_owner[t.start : t.end] = t.message
        for r0, r1 in t.reasoning:
            char_reason[max(r0, t.start) : min(r1, t.end)] = True
    trained = char_owner >= 0
    _assign(owner, a, b, char_owner, trained & ~char_reason)
    _assign(owner, a, b, char_owner, trained & char_reason, reasoning)
    if spans:
        other = np.full(text_len, -1, dtype=np.int32)
        for s in spans:
            if s.message not in {t.message for t in turns}:
                other[s.start : s.end] = s.message
        _assign(owner, a, b, other, other >= 0)
    return owner, reasoning


def _assign(
    owner: np.ndarray, a: np.ndarray, b: np.ndarray, char_owner: np.ndarray, chars: np.ndarray, flag: np.ndarray | None = None
) -> None:
    """Give still-unowned tokens that overlap ``chars`` the owner of their last such character."""
    idx = np.flatnonzero(chars)
    if idx.size == 0:
        return
    last = np.searchsorted(idx, b, side="left") - 1
    hit = (last >= 0) & (owner < 0)
    hit[hit] &= idx[last[hit]] >= a[hit]
    owner[hit] = char_owner[idx[last[hit]]]
    if flag is not None:
        flag[hit] = True
