"""Tokenizers: the protocol the data layer needs, a download-free byte tokenizer, and an adapter
for a local Hugging Face ``tokenizer.json``.

Chat rendering returns a :class:`ChatRendering`: the token ids plus, for every token, which
message *owns* it. An assistant message owns exactly the tokens that are trained when that
message is trained (its content and its end-of-turn marker, not its role header). Other messages
own their content (the HF adapter also gives them their header, which no loss mode looks at);
``-1`` marks tokens owned by nobody, such as BOS. Loss modes (``assistant``, ``last_turn``,
``full``) are computed from that ownership in :mod:`reference_impl.data.tokenize`.

**Byte tokenizer chat format** (our own, deterministic)::

    <bos> then, for every message:  <|role|> utf8(content) <|end|>

with ``<|role|>`` one of ``<|system|>``, ``<|user|>``, ``<|assistant|>``, ``<|tool|>``. There is
no separator between messages and no trailing EOS; ``<|end|>`` (distinct from EOS, so Megatron's
"last non-EOS token" length rule never shortens a chat) closes every turn. An assistant message
owns its content bytes and its ``<|end|>``.

**Hugging Face chat templates** are rendered with jinja2 (sandboxed, ``trim_blocks`` and
``lstrip_blocks`` on, ``loopcontrols``, a ``raise_exception`` helper, ``bos_token``/``eos_token``
variables). The assistant mask is derived by *prefix rendering plus character offsets*: the
conversation is rendered once per prefix ``messages[:k]``; message ``k`` spans the characters that
``messages[:k+1]`` adds to ``messages[:k]``, and for an assistant message the span starts after
the generation prompt (``messages[:k]`` rendered with ``add_generation_prompt=True``). The full
rendering is tokenized once, and each token is owned by the message span its characters overlap.
Limits: (1) the template must be *prefix-stable* (rendering a prefix yields a prefix of the full
rendering); templates that rewrite earlier turns depending on later ones (e.g. drop reasoning
from past assistant turns) are refused with an error; (2) a token that straddles a span boundary
goes to the assistant span when it touches one (e.g. a byte-level ``"Ġword"`` that merges the
header's trailing space with the first answer word is trained), otherwise to the first span it
overlaps; (3) ``{% generation %}`` blocks are not supported; (4) rendering is quadratic in the
number of turns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from reference_impl.data.schemas import Message
from reference_impl.errors import ConfigError, InputError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatRendering:
    """Token ids of a rendered conversation and, per token, the index of the message owning it (-1: none)."""

    ids: list[int]
    owner: list[int]
    roles: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.owner):
            raise UsageError(f"ChatRendering: {len(self.ids)} ids but {len(self.owner)} owners")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"ids": list(self.ids), "owner": list(self.owner), "roles": list(self.roles)}


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

    def apply_chat_template(self, messages: Sequence[Message]) -> ChatRendering:
        """Render a conversation into ids with per-token message ownership."""
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
    FORMAT_VERSION = "byte-chat-v1"

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

    def apply_chat_template(self, messages: Sequence[Message]) -> ChatRendering:
        """``<bos>`` then ``<|role|> content <|end|>`` per message; assistants own content + ``<|end|>``."""
        ids = [self.BOS]
        owner = [-1]
        for k, msg in enumerate(messages):
            role_id = self.ROLE_IDS.get(msg.role)
            if role_id is None:
                raise InputError(f"role {msg.role!r} has no byte-tokenizer marker", field=f"messages[{k}].role")
            body = self.encode(msg.content) + [self.END_OF_TURN]
            ids.append(role_id)
            owner.append(-1)
            ids.extend(body)
            owner.extend([k] * len(body))
        return ChatRendering(ids=ids, owner=owner, roles=tuple(m.role for m in messages))

    def __repr__(self) -> str:
        return "ByteTokenizer()"


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


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string, or an AddedToken-like dict with 'content'."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _pick_template(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default")
        return chosen if isinstance(chosen, str) else None
    return None


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
    _template: Any = field(default=None, repr=False)
    _space_sensitive: bool | None = field(default=None, repr=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizer:
        """Load ``tokenizer.json`` (a file, or a folder holding it) and the config files next to it.

        Read from ``tokenizer_config.json`` when present: ``chat_template`` (a string, or a list
        whose ``"default"`` entry is used) and ``bos_token``/``eos_token``/``pad_token``. A
        ``chat_template.jinja`` file next to it is used when the config has no template.
        """
        tokenizers, _ = _require_hf()
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise UsageError(f"tokenizer file not found: {file}", fix="pass a tokenizer.json or a folder holding one")
        digest = hashlib.sha256(file.read_bytes())
        try:
            backend = tokenizers.Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise InputError(f"cannot load tokenizer: {exc}", file=str(file)) from None
        cfg: dict[str, Any] = {}
        cfg_file = file.parent / "tokenizer_config.json"
        if cfg_file.is_file():
            try:
                cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InputError(f"tokenizer_config.json is not valid JSON: {exc}", file=str(cfg_file)) from None
            if not isinstance(cfg, dict):
                raise InputError("tokenizer_config.json must hold a JSON object", file=str(cfg_file))
        template = _pick_template(cfg.get("chat_template"))
        jinja_file = file.parent / "chat_template.jinja"
        if template is None and jinja_file.is_file():
            template = jinja_file.read_text(encoding="utf-8")
        tok = cls(
            backend=backend,
            name=f"hf:{file.parent.name or file.stem}",
            chat_template=template,
            bos_token=_token_text(cfg.get("bos_token")),
            eos_token=_token_text(cfg.get("eos_token")),
            pad_token=_token_text(cfg.get("pad_token")),
        )
        for attr in ("bos_token", "eos_token", "pad_token"):
            text = getattr(tok, attr)
            if text is not None and backend.token_to_id(text) is None:
                raise InputError(f"{attr} {text!r} is not in the vocabulary", file=str(cfg_file), field=attr)
        digest.update(json.dumps([template, tok.bos_token, tok.eos_token, tok.pad_token]).encode())
        tok.source_hash = digest.hexdigest()[:16]
        return tok

    # ------------------------------------------------------------ protocol
    def _id(self, text: str | None) -> int | None:
        return None if text is None else self.backend.token_to_id(text)

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
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def space_sensitive(self) -> bool:
        """Whether a space between words changes the ids: ``enc("x y") != enc("x") + enc("y")``."""
        if self._space_sensitive is None:
            self._space_sensitive = self.encode("x y") != self.encode("x") + self.encode("y")
        return self._space_sensitive

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without the post-processor's special tokens."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens kept."""
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=False))

    def fingerprint(self) -> str:
        """``hf:<sha256 of tokenizer.json, template and special tokens>``."""
        return f"hf:{self.source_hash}"

    # ------------------------------------------------------------ chat
    def _compiled(self) -> Any:
        if self._template is None:
            if not self.chat_template:
                raise UsageError(f"tokenizer {self.name} has no chat_template", fix="add one to tokenizer_config.json")
            _, jinja2 = _require_hf()
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            env.globals["raise_exception"] = raise_exception
            # jinja2's own tojson HTML-escapes; chat templates expect plain JSON
            env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
            try:
                self._template = env.from_string(self.chat_template)
            except jinja2.exceptions.TemplateSyntaxError as exc:
                raise ConfigError(
                    f"chat_template of {self.name} does not compile (template line {exc.lineno}): {exc.message}",
                    field="chat_template",
                ) from None
        return self._template

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_template"] = None  # compiled jinja templates do not pickle; recompiled on use
        return state

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        """The chat template's text for ``messages``."""
        import jinja2

        template = self._compiled()
        try:
            return str(
                template.render(
                    messages=[m.to_dict() for m in messages],
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token or "",
                    eos_token=self.eos_token or "",
                    pad_token=self.pad_token or "",
                )
            )
        except jinja2.exceptions.TemplateError as exc:
            raise InputError(f"chat template failed on {len(messages)} message(s): {exc}", field="messages") from None

    def apply_chat_template(self, messages: Sequence[Message]) -> ChatRendering:
        """Render, tokenize once, and own tokens by prefix-rendered character spans (module docstring)."""
        full = self.render(messages)
        # bounds[k] = (start, end, k): characters owned by message k
        bounds: list[tuple[int, int, int]] = []
        prev = self._prefix(messages, 0, full)
        for k, msg in enumerate(messages):
            cur = self._prefix(messages, k + 1, full)
            start = len(prev)
            if msg.role == "assistant":
                gen = self.render(messages[:k], add_generation_prompt=True)
                if full.startswith(gen) and len(prev) <= len(gen) <= len(cur):
                    start = len(gen)
                else:
                    log.debug("generation prompt is not a prefix before message %d; its header is owned too", k)
            bounds.append((start, len(cur), k))
            prev = cur
        enc = self.backend.encode(full, add_special_tokens=False)
        roles = [m.role for m in messages]
        starts = [a for a, _, _ in bounds]
        owner = [_owner_of(start, end, bounds, starts, roles) for start, end in enc.offsets]
        return ChatRendering(ids=list(enc.ids), owner=owner, roles=tuple(m.role for m in messages))

    def _prefix(self, messages: Sequence[Message], k: int, full: str) -> str:
        if k == 0:
            try:
                text = self.render([])
            except InputError:  # some templates refuse an empty conversation
                return ""
        else:
            text = self.render(messages[:k])
        if not full.startswith(text):
            raise InputError(
                f"chat template is not prefix-stable: rendering the first {k} message(s) is not a prefix of the "
                "whole conversation, so per-turn loss masks cannot be derived",
                field=f"messages[{max(k - 1, 0)}]",
                fix="use a prefix-stable chat template",
            )
        return text


def _owner_of(start: int, end: int, spans: list[tuple[int, int, int]], starts: list[int], roles: list[str]) -> int:
    """Message owning a token with characters ``[start, end)``: a span it overlaps, an assistant one first."""
    end = max(end, start + 1)  # zero-width tokens are placed by their start
    j = max(bisect_right(starts, start) - 1, 0)
    overlapping = []
    while j < len(spans) and spans[j][0] < end:
        a, b, k = spans[j]
        if start < b:
            overlapping.append(k)
        j += 1
    for k in overlapping:
        if roles[k] == "assistant":
            return k
    return overlapping[0] if overlapping else -1


def load_tokenizer(spec: str | os.PathLike[str] | Tokenizer | None = None) -> Tokenizer:
    """``None``/``"byte"`` -> :class:`ByteTokenizer`; a path -> :class:`HFTokenizer`; a tokenizer is returned as is."""
    if spec is None or (isinstance(spec, str) and spec == "byte"):
        return ByteTokenizer()
    if isinstance(spec, (str, os.PathLike)):
        return HFTokenizer.from_file(spec)
    if isinstance(spec, Tokenizer):
        return spec
    raise UsageError(f"cannot make a tokenizer from {type(spec).__name__}; pass None, 'byte' or a path")
