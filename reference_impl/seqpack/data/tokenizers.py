"""Tokenizers: the protocol the data layer needs, a download-free byte tokenizer, and an adapter
for a local Hugging Face ``tokenizer.json``.

Chat rendering returns a :class:`ChatRendering`: the token ids plus, for every token, which
message *owns* it and whether it is reasoning. An assistant message owns exactly the tokens that
are trained when that message is trained: from the end of its turn header to its end-of-turn
marker (its content, its tool calls, its rendered reasoning and the markup between them; not the
header). Other messages own their own text; ``-1`` marks tokens owned by nobody (BOS, headers,
template text). Loss modes (``assistant``, ``last_turn``, ``full``) and the reasoning policy are
applied to that ownership in :mod:`seqpack.data.tokenize`.

**Byte tokenizer chat format** (our own, deterministic)::

    <bos> [<|system|> utf8(json(tools)) <|end|>]  then, for every message:
    <|role|> [utf8("<think>" reasoning "</think>")] utf8(content) [utf8("<tool_call>" json(call) "</tool_call>")...] <|end|>

with ``<|role|>`` one of ``<|system|>``, ``<|user|>``, ``<|assistant|>``, ``<|tool|>``. There is
no separator between messages and no trailing EOS; ``<|end|>`` (distinct from EOS, so Megatron's
"last non-EOS token" length rule never shortens a chat) closes every turn. An assistant message
owns everything after its role marker, ``<|end|>`` included; its reasoning block (a
``reasoning_content`` field or an inline ``<think>`` block of its content) is flagged as reasoning.

**Hugging Face chat templates** are rendered with jinja2 as ``transformers`` does
(:mod:`seqpack.data.chat_render`), and token ownership comes from
:mod:`seqpack.data.chat_masks`: the conversation is rendered once as is and once with marker
texts, the markers give each message's text spans in the real rendering, the real rendering is
tokenized once with offsets, and each token is owned by the span its characters touch. No prefix
of the conversation is rendered, so templates that rewrite earlier turns (Qwen3 drops the
reasoning of past turns and writes an empty reasoning block into the last one) are handled.
Templates with ``{% generation %}`` blocks define the trained spans themselves. When the marker
rendering cannot be matched, each message's text is searched in order instead; a conversation is
refused only when an assistant text is found by neither. :meth:`HFTokenizer.prefix_regions` keeps
the old prefix-rendering method as a cross-check for prefix-stable templates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from seqpack.data import chat_masks as cm
from seqpack.data.chat_masks import THINK_CLOSE, THINK_OPEN
from seqpack.data.schemas import Message
from seqpack.core.errors import InputError, UsageError, is_foreign_panic

log = logging.getLogger(__name__)

CHAT_MASK_VERSION = "spans2"  # bump when chat ownership changes for the same template and data


@dataclass(frozen=True, eq=False)
class ChatRendering:
    """Token ids of a rendered conversation; per token the owning message (-1: none) and a reasoning flag.

    The three per-token sequences are lists or numpy arrays of equal length.

    ``method`` tells how ownership was found: ``byte`` (the byte tokenizer's own format),
    ``sentinel``, ``search`` or ``generation`` (:mod:`seqpack.data.chat_masks`).
    """

    ids: Sequence[int]
    owner: Sequence[int]
    roles: tuple[str, ...]
    reasoning: Sequence[bool] | None = None
    method: str = ""
    text: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.owner):
            raise UsageError(f"ChatRendering: {len(self.ids)} ids but {len(self.owner)} owners")
        if self.reasoning is None:
            object.__setattr__(self, "reasoning", [False] * len(self.ids))
        elif len(self.reasoning) != len(self.ids):
            raise UsageError(f"ChatRendering: {len(self.ids)} ids but {len(self.reasoning)} reasoning flags")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChatRendering):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "ids": [int(i) for i in self.ids],
            "owner": [int(k) for k in self.owner],
            "reasoning": [bool(r) for r in (self.reasoning if self.reasoning is not None else [])],
            "roles": list(self.roles),
            "method": self.method,
        }


@runtime_checkable
class Tokenizer(Protocol):
    """What the data layer needs from a tokenizer."""

    name: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    pad_id: int
    space_sensitive: bool

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens written as their strings)."""
        ...

    def fingerprint(self) -> str:
        """A stable string that changes whenever tokenization or chat rendering would change."""
        ...

    def apply_chat_template(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> ChatRendering:
        """Render a conversation (and the tools offered to it) into ids with per-token message ownership."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, special tokens above (see the module docstring for chat)."""

    BOS, EOS, PAD = 256, 257, 258
    ROLE_IDS: dict[str, int] = {"system": 259, "user": 260, "assistant": 261, "tool": 262}
    END_OF_TURN = 263
    SPECIAL_TEXT: dict[int, str] = {
        256: "<s>",
        257: "</s>",
        258: "<pad>",
        259: "<|system|>",
        260: "<|user|>",
        261: "<|assistant|>",
        262: "<|tool|>",
        263: "<|end|>",
    }
    FORMAT_VERSION = "byte-chat-v2"

    name = "byte"
    vocab_size = 264
    bos_id: int | None = BOS
    eos_id: int | None = EOS
    pad_id = PAD
    space_sensitive = True

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes of ``text``."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        """Bytes back to text (invalid UTF-8 replaced); special ids written as their strings."""
        out: list[str] = []
        run = bytearray()
        for t in ids:
            t = int(t)
            if 0 <= t < 256:
                run.append(t)
                continue
            if run:
                out.append(run.decode("utf-8", errors="replace"))
                run.clear()
            if t not in self.SPECIAL_TEXT:
                raise UsageError(f"id {t} is outside the byte tokenizer's vocabulary (0..{self.vocab_size - 1})")
            out.append(self.SPECIAL_TEXT[t])
        if run:
            out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def fingerprint(self) -> str:
        """``byte:<format version>``."""
        return f"byte:{self.FORMAT_VERSION}"

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of each text."""
        return [self.encode(t) for t in texts]

    def encode_batch_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' UTF-8 bytes as one flat ``uint8`` id array, plus the per-text lengths."""
        data = [t.encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
        return np.frombuffer(b"".join(data), dtype=np.uint8), lengths

    def apply_chat_template(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> ChatRendering:
        """The byte chat format of the module docstring; assistants own everything after their role marker."""
        ids = [self.BOS]
        owner = [-1]
        reasoning = [False]
        if tools:
            block = [self.ROLE_IDS["system"], *self.encode(json.dumps(list(tools), ensure_ascii=False)), self.END_OF_TURN]
            ids += block
            owner += [-1] * len(block)
            reasoning += [False] * len(block)
        for k, msg in enumerate(messages):
            role_id = self.ROLE_IDS.get(msg.role)
            if role_id is None:
                raise InputError(f"role {msg.role!r} has no byte-tokenizer marker", field=f"messages[{k}].role")
            ids.append(role_id)
            owner.append(-1)
            reasoning.append(False)
            for text, is_reasoning in _byte_parts(msg):
                body = self.encode(text)
                ids += body
                owner += [k] * len(body)
                reasoning += [is_reasoning] * len(body)
            ids.append(self.END_OF_TURN)
            owner.append(k)
            reasoning.append(False)
        return ChatRendering(ids=ids, owner=owner, roles=tuple(m.role for m in messages), reasoning=reasoning, method="byte")

    def __repr__(self) -> str:
        return "ByteTokenizer()"


def _byte_parts(msg: Message) -> list[tuple[str, bool]]:
    """(text, is_reasoning) parts of one message in the byte chat format."""
    parts: list[tuple[str, bool]] = []
    if msg.reasoning is not None and msg.role == "assistant":
        parts.append((f"{THINK_OPEN}{msg.reasoning}{THINK_CLOSE}", True))
    content = msg.content or ""
    if msg.role == "assistant" and THINK_CLOSE in content:
        head, tail = content.split(THINK_CLOSE, 1)
        parts.append((head + THINK_CLOSE, True))
        content = tail
    if content:
        parts.append((content, False))
    for call in msg.tool_calls or ():
        parts.append((f"<tool_call>{json.dumps(call.to_dict()['function'], ensure_ascii=False)}</tool_call>", False))
    return parts


# --------------------------------------------------------------------------- Hugging Face adapter
def _require_hf() -> tuple[Any, Any]:
    try:
        import jinja2  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"HFTokenizer needs the optional 'hf' extra (packages tokenizers and jinja2); missing: {exc.name}",
            fix="pip install 'seqpack[hf]'",
        ) from None
    import jinja2
    import tokenizers

    return tokenizers, jinja2


def _token_text(value: Any, cfg_file: Path, attr: str) -> str | None:
    """A special token from tokenizer_config.json: a string, or an AddedToken-like dict with 'content'."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise InputError(f"{attr} must be a string or an object with a string 'content', got {_kind(value)}",
                     file=str(cfg_file), field=attr)


def _pick_template(value: Any, cfg_file: Path) -> str | None:
    """``chat_template`` of tokenizer_config.json: a string, or a list whose ``"default"`` entry is used."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default")
        if isinstance(chosen, str):
            return chosen
        raise InputError("chat_template is a list of named templates without a 'default' entry holding a string",
                         file=str(cfg_file), field="chat_template")
    raise InputError(f"chat_template must be a string or a list of named templates, got {_kind(value)}",
                     file=str(cfg_file), field="chat_template")


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def _utf8(raw: bytes, file: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{file.name} is not UTF-8 (byte {exc.start})", file=str(file)) from None


def _read_config(cfg_file: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` read like user JSON (size, UTF-8, depth, integer length)."""
    from seqpack.core import limits
    from seqpack.config.yaml_bounded import read_text
    from seqpack.data import jsontext

    text = read_text(cfg_file, what="tokenizer_config.json", error=InputError,
                     max_bytes=limits.MAX_TOKENIZER_CONFIG_BYTES)
    try:
        cfg = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"tokenizer_config.json is not valid JSON: {exc.msg} (column {exc.colno})",
                         file=str(cfg_file), line=exc.lineno) from None
    except jsontext.JsonProblem as exc:
        raise InputError(f"tokenizer_config.json: {exc.message}", file=str(cfg_file), field=exc.field) from None
    if not isinstance(cfg, dict):
        raise InputError("tokenizer_config.json must hold a JSON object", file=str(cfg_file))
    return cfg


def library_call(file: str | os.PathLike[str], what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` of the ``tokenizers`` library, any failure of it an :class:`InputError` naming ``file``.

    The library raises plain ``Exception`` for what it refuses and, for some inputs, panics in Rust;
    pyo3 raises a panic as ``PanicException``, which derives from ``BaseException`` and would pass
    every ``except Exception`` up to the process (an MCP server would die of it).
    """
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        if not isinstance(exc, Exception) and not is_foreign_panic(exc):
            raise
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        kind = "panicked" if is_foreign_panic(exc) else "failed"
        raise InputError(f"{what}: the tokenizers library {kind}: {detail}", file=str(file),
                         fix="check the tokenizer files (a tokenizer.json that transformers loads too)") from None


@dataclass
class HFTokenizer:
    """Adapter over a local ``tokenizers.Tokenizer`` (+ optional ``tokenizer_config.json``)."""

    backend: Any
    name: str
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    source_hash: str = ""
    template_variables: dict[str, Any] = field(default_factory=dict)
    file: str | None = None  # the tokenizer.json, named in errors
    template_file: str | None = None  # where the chat template was read, named in errors
    _template: Any = field(default=None, repr=False)
    _space_sensitive: bool | None = field(default=None, repr=False)
    _chat_info: Any = field(default=None, repr=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizer:
        """Load ``tokenizer.json`` (a file, or a folder holding it) and the config files next to it.

        Read from ``tokenizer_config.json`` when present: ``chat_template`` (a string, or a list
        whose ``"default"`` entry is used) and ``bos_token``/``eos_token``/``pad_token``. A
        ``chat_template.jinja`` file next to it is used when the config has no template.

        The files are read with the bounded readers of user input (sizes of
        :mod:`seqpack.core.limits`, UTF-8, JSON depth and integer length); the truncation and
        padding settings of ``tokenizer.json`` are switched off, as ``transformers`` does when it
        is not asked to truncate or pad (ids are never cut or padded behind the packer's back).
        Every failure of the ``tokenizers`` library, a Rust panic included, is an
        :class:`InputError` naming the file.
        """
        from seqpack.core import limits
        from seqpack.config.yaml_bounded import read_bytes

        tokenizers, _ = _require_hf()
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not os.path.lexists(file):
            raise UsageError(f"tokenizer file not found: {file}", fix="pass a tokenizer.json or a folder holding one")
        raw = read_bytes(file, what="tokenizer file", error=InputError, max_bytes=limits.MAX_TOKENIZER_FILE_BYTES)
        digest = hashlib.sha256(raw)
        text = _utf8(raw, file)
        backend = library_call(file, "cannot load the tokenizer", tokenizers.Tokenizer.from_str, text)
        library_call(file, "cannot load the tokenizer", backend.no_truncation)
        library_call(file, "cannot load the tokenizer", backend.no_padding)
        cfg: dict[str, Any] = {}
        cfg_file = file.parent / "tokenizer_config.json"
        if os.path.lexists(cfg_file):  # a FIFO or a symlink is refused by the file layer, not skipped
            cfg = _read_config(cfg_file)
        template = _pick_template(cfg.get("chat_template"), cfg_file)
        template_file = str(cfg_file) if template is not None else None
        jinja_file = file.parent / "chat_template.jinja"
        if template is None and os.path.lexists(jinja_file):
            raw_template = read_bytes(jinja_file, what="chat template", error=InputError,
                                      max_bytes=limits.MAX_TOKENIZER_CONFIG_BYTES)
            template, template_file = _utf8(raw_template, jinja_file), str(jinja_file)
        tok = cls(
            backend=backend,
            name=f"hf:{file.parent.name or file.stem}",
            chat_template=template,
            bos_token=_token_text(cfg.get("bos_token"), cfg_file, "bos_token"),
            eos_token=_token_text(cfg.get("eos_token"), cfg_file, "eos_token"),
            pad_token=_token_text(cfg.get("pad_token"), cfg_file, "pad_token"),
            file=str(file),
            template_file=template_file,
        )
        for attr in ("bos_token", "eos_token", "pad_token"):
            text = getattr(tok, attr)
            if text is not None and tok._id(text) is None:
                raise InputError(f"{attr} {text!r} is not in the vocabulary", file=str(cfg_file), field=attr)
        digest.update(json.dumps([template, tok.bos_token, tok.eos_token, tok.pad_token]).encode())
        tok.source_hash = digest.hexdigest()[:16]
        return tok

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return library_call(self.file or self.name, what, fn, *args, **kwargs)

    def with_atomic_texts(self, texts: Sequence[str]) -> HFTokenizer:
        """A twin of this tokenizer that reads each of ``texts`` as one token of its own, split out of the
        text before the model's pre-tokenizer runs, as special tokens are (the text around it is tokenized
        as if the marker were a special token: a BPE merge can never join the marker with a neighbour).
        The twin's extra ids lie past the vocabulary; everything else (template, special tokens,
        fingerprint) is this tokenizer's. Built once per tuple of texts and kept."""
        key = tuple(texts)
        twins = self.__dict__.setdefault("_twins", {})
        if key not in twins:
            tokenizers, _ = _require_hf()
            backend = self._call("cannot copy the tokenizer", tokenizers.Tokenizer.from_str, self.backend.to_str())
            self._call("cannot copy the tokenizer", backend.no_truncation)
            self._call("cannot copy the tokenizer", backend.no_padding)
            added = [tokenizers.AddedToken(t, special=True, normalized=False, single_word=False, lstrip=False,
                                           rstrip=False) for t in key]
            self._call("cannot add a marker token", backend.add_special_tokens, added)
            twins[key] = replace(self, backend=backend, _space_sensitive=None, _chat_info=None)
            twins[key].__dict__["_twins"] = {key: twins[key]}
        return twins[key]

    # ------------------------------------------------------------ protocol
    def _id(self, text: str | None) -> int | None:
        return None if text is None else self._call("cannot look up a token", self.backend.token_to_id, text)

    @property
    def bos_id(self) -> int | None:
        """Id of ``bos_token`` from the config, else ``None``."""
        return self._id(self.bos_token)

    @property
    def eos_id(self) -> int | None:
        """Id of ``eos_token`` from the config, else ``None``."""
        return self._id(self.eos_token)

    @property
    def pad_id(self) -> int:
        """Id of ``pad_token``; falls back to the EOS id, then to 0."""
        for candidate in (self._id(self.pad_token), self.eos_id):
            if candidate is not None:
                return candidate
        return 0

    @property
    def vocab_size(self) -> int:
        """Vocabulary size including added tokens."""
        return int(self._call("cannot read the vocabulary size", self.backend.get_vocab_size, with_added_tokens=True))

    @property
    def space_sensitive(self) -> bool:
        """Whether a space between words changes the ids: ``enc("x y") != enc("x") + enc("y")``."""
        if self._space_sensitive is None:
            self._space_sensitive = self.encode("x y") != self.encode("x") + self.encode("y")
        return self._space_sensitive

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without the post-processor's special tokens."""
        return list(self._call("cannot encode", self.backend.encode, text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens kept."""
        return str(self._call("cannot decode", self.backend.decode, [int(i) for i in ids], skip_special_tokens=False))

    def fingerprint(self) -> str:
        """``hf:<sha256 of tokenizer.json, template, special tokens>:<mask method version>[:<template variables>]``."""
        out = f"hf:{self.source_hash}:{CHAT_MASK_VERSION}"
        if self.template_variables:
            blob = json.dumps(self.template_variables, sort_keys=True, default=str).encode()
            out += ":" + hashlib.sha256(blob).hexdigest()[:8]
        return out

    def _encodings(self, texts: list[str]) -> list[Any]:
        # ``encode_batch_fast`` (tokenizers >= 0.21) skips the character offsets: same ids, about 30 % less time
        fast = getattr(self.backend, "encode_batch_fast", None)
        return self._call("cannot encode", fast or self.backend.encode_batch, texts, add_special_tokens=False)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, encoded together by the Rust tokenizer (parallel, outside the GIL)."""
        return [e.ids for e in self._encodings(list(texts))]

    def encode_batch_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_batch` as one flat id array (int64) plus the per-text lengths (an empty text has no ids)."""
        texts = list(texts)
        wanted = [t for t in texts if t]
        encoded = iter([e.ids for e in self._encodings(wanted)] if wanted else [])
        parts = [next(encoded) if t else [] for t in texts]
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        return np.fromiter(chain.from_iterable(parts), dtype=np.int64, count=int(lengths.sum())), lengths

    # ------------------------------------------------------------ chat
    def _compiled(self) -> Any:
        if self._template is None:
            if not self.chat_template:
                raise UsageError(f"tokenizer {self.name} has no chat_template", fix="add one to tokenizer_config.json")
            _require_hf()
            from seqpack.data.chat_render import compile_template

            self._template = compile_template(self.chat_template, self.name, self.template_file)
        return self._template

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_template"] = None  # compiled jinja templates do not pickle; recompiled on use
        state["_chat_info"] = None
        return state

    def _variables(self) -> dict[str, Any]:
        return {
            "bos_token": self.bos_token or "",
            "eos_token": self.eos_token or "",
            "pad_token": self.pad_token or "",
            **self.template_variables,
        }

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The chat template's text for ``messages`` (and ``tools``)."""
        from seqpack.data.chat_render import render

        dicts = [m.to_dict() for m in messages]
        return render(self._compiled(), dicts, self._variables(), tools=tools, add_generation_prompt=add_generation_prompt)[0]

    def chat_info(self) -> _ChatInfo:
        """What ownership needs to know about the template, found once by rendering two tiny probes."""
        if self._chat_info is None:
            from seqpack.data.chat_render import has_generation_blocks, render

            template, variables = self._compiled(), self._variables()
            source = self.chat_template or ""
            added = [t.content for t in self._call("cannot list the added tokens", self.backend.get_added_tokens_decoder).values()]
            specials = sorted(
                {t for t in added if t.strip() and (t in source or t in variables.values())}, key=len, reverse=True
            )
            header = ""
            end_markers = [self.eos_token] if self.eos_token else []
            probe = [{"role": "user", "content": f"{cm.SENTINEL_OPEN}0{cm.SENTINEL_CLOSE}"}]
            try:
                plain = render(template, probe, variables)[0]
                prompted = render(template, probe, variables, add_generation_prompt=True)[0]
                if prompted.startswith(plain):
                    header = prompted[len(plain) :]
                answer = f"{cm.SENTINEL_OPEN}1{cm.SENTINEL_CLOSE}"
                full = render(template, [*probe, {"role": "assistant", "content": answer}], variables)[0]
                tail = full[full.index(answer) + len(answer) :] if answer in full else ""
                first = min(((tail.find(t), t) for t in specials if t in tail), default=None)
                if first is not None and first[1] not in end_markers:
                    end_markers.append(first[1])
            except InputError:
                log.debug("chat template of %s refuses the probe conversation; no header/end marker learned", self.name)
            self._chat_info = _ChatInfo(
                header=header, end_markers=tuple(end_markers), specials=tuple(specials),
                generation=has_generation_blocks(source),
            )
        return self._chat_info

    def apply_chat_template(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> ChatRendering:
        """Render once (plus once with markers), tokenize once, own tokens by character spans (module docstring)."""
        result = self.apply_chat_templates([(messages, tools)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def apply_chat_templates(
        self, conversations: Sequence[tuple[Sequence[Message], Sequence[dict[str, Any]] | None]]
    ) -> list[ChatRendering | InputError]:
        """:meth:`apply_chat_template` for many conversations with one batched encode.

        A conversation that cannot be rendered or attributed yields its :class:`InputError` in its
        place, so the caller can name the row.
        """
        from seqpack.data.chat_render import render

        info = self.chat_info()
        template, variables = self._compiled(), self._variables()
        staged: list[tuple[str, list[cm.TurnSpan], list[cm.PieceSpan], tuple[str, ...], str] | InputError] = []
        for messages, tools in conversations:
            try:
                staged.append(self._attribute(template, variables, info, messages, tools, render))
            except InputError as err:
                staged.append(err)
        texts = [x[0] for x in staged if not isinstance(x, InputError)]
        encodings = iter(self._call("cannot encode", self.backend.encode_batch, texts, add_special_tokens=False) if texts else [])
        out: list[ChatRendering | InputError] = []
        for item in staged:
            if isinstance(item, InputError):
                out.append(item)
                continue
            text, turns, spans, roles, method = item
            enc = next(encodings)
            offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            owner, reasoning = cm.token_ownership(offsets, len(text), turns, spans)
            out.append(ChatRendering(
                ids=np.asarray(enc.ids, dtype=np.int64), owner=owner, roles=roles, reasoning=reasoning, method=method, text=text
            ))
        return out

    def _attribute(
        self, template: Any, variables: dict[str, Any], info: _ChatInfo, messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None, render: Any,
    ) -> tuple[str, list[cm.TurnSpan], list[cm.PieceSpan], tuple[str, ...], str]:
        dicts = [m.to_dict() for m in messages]
        roles = tuple(m.role for m in messages)
        text, blocks = render(template, dicts, variables, tools=tools, track=info.generation)
        spans: list[cm.PieceSpan] | None = None
        method = "sentinel"
        marked = cm.sentinel_messages(dicts)
        if marked is not None:
            try:
                marked_text = render(template, marked[0], variables, tools=tools)[0]
                spans = cm.align(marked_text, text, marked[1])
            except InputError:
                spans = None
        if spans is None:
            method = "search"
            spans, missing = cm.search_pieces(text, cm.message_pieces(dicts))
            lost = [p for p in missing if roles[p.message] == "assistant" and p.kind == "content"]
            if lost and not info.generation:
                k = lost[0].message
                raise InputError(
                    f"cannot attribute the tokens of assistant message {k}: the chat template rewrites its text "
                    f"({lost[0].text[:40]!r} is in neither the marker rendering nor the rendered chat)",
                    field=f"messages[{k}].content",
                    fix="use a template that renders message text unchanged, or add {% generation %} blocks to it",
                )
        if info.generation:
            method = "generation"
            turns = cm.generation_turns(blocks, spans, roles)
        else:
            try:
                spans = cm.string_free_arguments(text, spans, dicts)
            except cm.UnlocatedArguments as exc:
                raise InputError(str(exc), field=f"messages[{exc.message}].tool_calls",
                                 fix="give the tool call a string-valued argument, or use a template with "
                                 "{% generation %} blocks") from None
            turns = cm.assistant_spans(
                text, spans, roles, header=info.header, end_markers=info.end_markers, specials=info.specials
            )
        return text, turns, spans, roles, method

    def prefix_regions(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[tuple[int, int]] | None:
        """Cross-check only: the characters each message adds when the conversation is rendered prefix by prefix.

        ``None`` when the template is not prefix-stable (a prefix does not render as a prefix of
        the whole), which is where the marker method is needed. Costs one render per message.
        """
        full = self.render(messages, tools=tools)
        regions: list[tuple[int, int]] = []
        prev = 0
        for k in range(1, len(messages) + 1):
            try:
                cur = self.render(messages[:k], tools=tools)
            except InputError:
                return None
            if not full.startswith(cur) or len(cur) < prev:
                return None
            regions.append((prev, len(cur)))
            prev = len(cur)
        return regions


@dataclass(frozen=True)
class _ChatInfo:
    """Per-template facts: the assistant turn header, end-of-turn markers, special tokens it writes."""

    header: str
    end_markers: tuple[str, ...]
    specials: tuple[str, ...]
    generation: bool


def load_tokenizer(spec: str | os.PathLike[str] | Tokenizer | None = None) -> Tokenizer:
    """``None``/``"byte"`` -> :class:`ByteTokenizer`; a path -> :class:`HFTokenizer`; a tokenizer is returned as is."""
    if spec is None or (isinstance(spec, str) and spec == "byte"):
        return ByteTokenizer()
    if isinstance(spec, (str, os.PathLike)):
        return HFTokenizer.from_file(spec)
    if isinstance(spec, Tokenizer):
        return spec
    raise UsageError(f"cannot make a tokenizer from {type(spec).__name__}; pass None, 'byte' or a path")


#: How summaries and JSON name the embedded byte tokenizer when no tokenizer was given.
BYTE_DEFAULT_LABEL = "byte (default)"


def tokenizer_label(spec: str | os.PathLike[str] | Tokenizer | None) -> str:
    """How every summary and JSON names a tokenizer: ``byte (default)``, or the file or folder given."""
    if spec is None or (isinstance(spec, str) and spec == "byte"):
        return BYTE_DEFAULT_LABEL if spec is None else "byte"
    if isinstance(spec, (str, os.PathLike)):
        return str(spec)
    return str(getattr(spec, "file", None) or getattr(spec, "name", type(spec).__name__))


def byte_tokenizer_warning(tokenizer: Any, schema_kind: str | None) -> str | None:
    """The warning for natural-language rows measured or packed in bytes (None for a real tokenizer).

    The byte tokenizer counts one token per UTF-8 byte (3 to 5 times a BPE tokenizer's count on
    English text) and renders chats with seqpack's own template, so lengths, packs and masks are not
    the model's."""
    if getattr(tokenizer, "name", None) != "byte" and tokenizer is not None and tokenizer != "byte":
        return None
    what = "chat" if schema_kind == "chat" else "text"
    template = " and its own chat template, not the model's" if schema_kind == "chat" else ""
    return (f"{what} rows are tokenized with the byte tokenizer (one token per UTF-8 byte{template}); lengths "
            "and packs are not the model's: pass the model's tokenizer file or folder (--tokenizer DIR)")

