"""One row -> one tokenized sample (unshifted ids + loss mask) -> one training example (shifted).

**Prompt/completion** (same budget and order as Megatron-Bridge's prompt/completion mode):

1. ``prompt_text = prompt_template.format(prompt=...)`` and ``completion_text = separator +
   completion`` (the separator's leading space is dropped when the tokenizer is not
   space-sensitive); both are tokenized separately, without special tokens.
2. Special tokens: ``[bos]`` if ``add_bos``, ``[eos]`` if ``add_eos``. The content budget is
   ``max_length - #special``; ``max_length`` bounds ``len(input_ids)`` (the *runtime* length of a
   sample is ``len(input_ids) - 1``).
3. Overflow is removed from the prompt first, then from what remains of the completion:
   ``truncation="right"`` keeps the head of each part, ``"left"`` keeps the tail,
   ``"reject"`` raises :class:`SampleRejected` (``too_long``). EOS is appended after
   truncation, so a truncated completion still ends in EOS.
4. ``input_ids = [bos]? + prompt + completion + [eos]?``; unshifted loss mask: ``"completion"``
   mode 1 on completion (separator included) and EOS, 0 on BOS and prompt; ``"full"`` all 1.

**Chat**: the tokenizer renders the conversation and the row's ``tools``
(:mod:`seqpack.data.tokenizers`), no EOS is added on top of the template. Loss mask:
``"assistant"`` -> tokens owned by any assistant turn (content, tool calls, end-of-turn marker;
not the header), ``"last_turn"`` -> tokens owned by the last assistant turn, ``"full"`` -> every
token. Reasoning tokens that the template renders (a ``reasoning_content`` field or an inline
``<think>`` block) follow ``ChatSchema.reasoning``: ``"train"`` keeps them in the mask of their
turn, ``"mask"`` removes them (in ``full`` too). Reasoning the template strips (e.g. Qwen3 drops
it from turns before the last user message) is not in the tokens at all.
Unlike Megatron-Bridge (which never truncates chats at tokenization, quirk Q10), an over-long
chat is handled explicitly: ``"right"`` keeps the first ``max_length`` tokens and flags
``truncated``; ``"reject"`` rejects it; ``"oldest_turns"`` drops whole exchanges from the front
(each from a user turn up to the next user turn; a leading system prompt stays) and renders the
conversation again until it fits, so the system prompt and the last exchange, with the last
assistant turn, are kept whole; when even those do not fit, the row is rejected (``too_long``);
``"left"`` is refused (it would cut the template head). ``"oldest_turns"`` is refused for
prompt/completion rows (they have no turns).

**Rejections** (:class:`SampleRejected`, counted by ``reason``): empty completion, empty
conversation, no assistant turn when the loss mode needs one, fewer than 2 tokens, no supervised
label (``loss_mask[1:]`` all 0, e.g. a chat truncated before its first assistant token), too long
under ``"reject"``.

**Megatron-Bridge quirks, on purpose not copied.** Q3: Bridge's legacy ``"{input} {output}"``
template mode emits no loss mask, and offline pre-padding then trains on alignment padding; here
legacy rows are read as prompt/completion (``prompt_column="input", completion_column="output"``)
and every sample carries an explicit mask. Q4: Bridge infers a segment's length from its last
non-EOS token; here the length is explicit (``num_tokens``), and the byte tokenizer's chat
end-of-turn token is distinct from EOS, so content ending in EOS-valued ids is never shortened.

**Batches** (:func:`tokenize_batch`): many rows at once, the form offline packing consumes. All
texts of a batch go through the tokenizer's batch encoding in one call (the Rust tokenizer runs
it in parallel, outside the GIL), each chat is rendered twice (as is and with markers), and the
result is one flat ``int32`` id array and one ``uint8`` mask array with ``int64`` offsets, plus
per-sample lengths and flags: ready to be written to disk or concatenated without per-sample
objects. Prompt/completion rows never become per-row arrays: truncation, special tokens and masks
are computed for the whole batch on the flat encoding (a tokenizer may offer
``encode_batch_flat(texts) -> (ids, lengths)``; the byte tokenizer does), with exactly the
per-row rules above. Rejections are listed with their position in the batch; any other input
error stops the batch, naming its row.

**Shift** (:func:`to_training_example`): ``tokens = ids[:-1]``, ``labels = ids[1:]``,
``loss_mask = mask[1:]`` (the mask is aligned to the labels).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack.core.choices import TRUNCATION_BY_SCHEMA, TRUNCATION_MODES
from seqpack.data import rejections as rj
from seqpack.data.ranges import concat_ranges, offsets_of
from seqpack.data.location import RowLocation, at_row, out_of_memory, stamp, text_size
from seqpack.data.rejections import SampleRejected
from seqpack.data.schemas import CHAT_KEYS, ChatSchema, Message, PromptCompletionSchema, Schema
from seqpack.data.chat_render import TemplateRefused
from seqpack.data.tokenizers import ChatRendering, Tokenizer
from seqpack.core.errors import InputError, SeqpackError, UsageError

TRUNCATION_POLICIES: tuple[str, ...] = TRUNCATION_MODES


@dataclass(frozen=True, eq=False)
class TokenizedSample:
    """A tokenized row before the shift.

    ``input_ids`` int64 ``[n]`` and ``loss_mask`` int8 ``[n]`` (1 = this token is a trained target).
    ``prompt_length``: tokens before the first completion token (chat: before the last assistant
    turn's first owned token; ``n`` when there is none). ``original_length`` is the length before
    truncation; ``truncated`` tells whether tokens were removed.
    """

    input_ids: np.ndarray
    loss_mask: np.ndarray
    schema: str
    prompt_length: int
    original_length: int
    truncated: bool

    @property
    def num_tokens(self) -> int:
        """``len(input_ids)``."""
        return int(self.input_ids.shape[0])

    @property
    def num_supervised(self) -> int:
        """Trained labels after the shift: ``loss_mask[1:].sum()``."""
        return int(self.loss_mask[1:].sum())

    @property
    def num_truncated(self) -> int:
        """Tokens removed by truncation."""
        return self.original_length - self.num_tokens

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "input_ids": self.input_ids.tolist(),
            "loss_mask": self.loss_mask.tolist(),
            "schema": self.schema,
            "prompt_length": self.prompt_length,
            "original_length": self.original_length,
            "truncated": self.truncated,
            "num_tokens": self.num_tokens,
            "num_supervised": self.num_supervised,
        }


@dataclass(frozen=True, eq=False)
class TrainingExample:
    """A shifted sample: ``tokens``/``labels`` int64 ``[n-1]``, ``loss_mask`` float32 ``[n-1]``."""

    tokens: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"tokens", "labels", "loss_mask"}`` as numpy arrays."""
        return {"tokens": self.tokens, "labels": self.labels, "loss_mask": self.loss_mask}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {k: v.tolist() for k, v in self.arrays().items()}


def _check_args(max_length: int, truncation: str, schema: Any = None) -> None:
    if truncation not in TRUNCATION_POLICIES:
        raise UsageError(f"unknown truncation {truncation!r}; choose one of {', '.join(TRUNCATION_POLICIES)}")
    check_truncation(truncation, getattr(schema, "kind", None))
    if not isinstance(max_length, int) or max_length < 2:
        raise UsageError(f"max_length must be an integer >= 2, got {max_length!r}")


def check_truncation(truncation: str, schema_kind: str | None) -> None:
    """Refuse a truncation mode the row schema cannot take (the same words wherever it is chosen)."""
    allowed = TRUNCATION_BY_SCHEMA.get(schema_kind or "", TRUNCATION_POLICIES)
    if truncation in allowed:
        return
    if truncation == "left":
        raise UsageError("left truncation is not supported for chat (it would cut the template head); use right, "
                         "reject or oldest_turns", field="truncation")
    raise UsageError(f"{truncation} truncation drops whole chat turns, and {schema_kind} rows have none; use "
                     f"{', '.join(allowed)}", field="truncation")


def _cut(ids: list[int], n: int, truncation: str) -> list[int]:
    """Remove ``n`` tokens: from the end (``right``, head kept) or the start (``left``, tail kept)."""
    if n <= 0:
        return ids
    return ids[: len(ids) - n] if truncation == "right" else ids[n:]


def _finish(ids: Any, mask: Any, schema: str, prompt_length: int, original: int) -> TokenizedSample:
    if len(ids) < 2:
        raise SampleRejected(rj.TOO_SHORT, f"{len(ids)} token(s); at least 2 are needed")
    sample = TokenizedSample(
        input_ids=np.asarray(ids, dtype=np.int64),
        loss_mask=np.asarray(mask, dtype=np.int8),
        schema=schema,
        prompt_length=prompt_length,
        original_length=original,
        truncated=original > len(ids),
    )
    if sample.num_supervised == 0:
        raise SampleRejected(rj.NO_SUPERVISED_TOKENS)
    return sample


def _special(tokenizer: Tokenizer, attr: str) -> int:
    value = getattr(tokenizer, attr)
    if value is None:
        raise UsageError(f"the schema asks for {attr[:-3]} but tokenizer {tokenizer.name} has no {attr}")
    return int(value)


#: Row fields that carry images and videos (the VLM sample contract, :mod:`seqpack.data.vlm.sample`).
VISUAL_FIELDS: tuple[str, ...] = ("images", "videos")


def _refuse_visuals(row: dict[str, Any]) -> None:
    """Text tokenization of a row that carries images would silently drop them: refuse it."""
    for name in VISUAL_FIELDS:
        if row.get(name):
            raise InputError(
                f"the row carries {name}, which text tokenization would drop", field=name,
                fix="use a VLM path with a vision spec (in-batch or Energon: --vision qwen2_vl), or remove the field",
            )


def _pc_texts(row: dict[str, Any], schema: PromptCompletionSchema, tokenizer: Tokenizer) -> tuple[str, str]:
    """(prompt text, completion text with its separator) of a row (module docstring, step 1)."""
    _refuse_visuals(row)
    prompt_text, completion = schema.extract(row)
    if not completion and not schema.allow_empty_completion:
        raise SampleRejected(rj.EMPTY_COMPLETION, field=schema.completion_column)
    sep = schema.separator
    if sep.startswith(" ") and not tokenizer.space_sensitive:
        sep = sep[1:]
    return prompt_text, sep + completion


def _pc_texts_batch(rows: Sequence[dict[str, Any]], schema: PromptCompletionSchema, tokenizer: Tokenizer,
                    guarded: Any) -> dict[int, tuple[str, str] | None]:
    """:func:`_pc_texts` of every row (``guarded`` runs it where a row needs more than the common case).

    The common row (both columns present as strings under their configured names, no chat key, no
    images or videos, a completion left after stripping) is read inline, without a call per row: about a
    third of the per-row cost of packing plain prompt/completion data. Every other row goes through
    :func:`_pc_texts` itself, so its errors and rejections are exactly the row-by-row ones.
    """
    pc, cc = schema.prompt_column, schema.completion_column
    template = None if schema.prompt_template == "{prompt}" else schema.prompt_template
    strip, sep = schema.strip_whitespace, schema.separator
    if sep.startswith(" ") and not tokenizer.space_sensitive:
        sep = sep[1:]
    unusual = frozenset((*CHAT_KEYS, *VISUAL_FIELDS))  # a row with any of these keys takes the full path
    out: dict[int, tuple[str, str] | None] = {}
    for pos, row in enumerate(rows):
        p, c = row.get(pc), row.get(cc)
        if type(p) is str and type(c) is str and unusual.isdisjoint(row):
            if strip:
                p, c = p.strip(" "), c.strip(" ")
            if c or schema.allow_empty_completion:
                out[pos] = (p if template is None else template.format(prompt=p), sep + c)
                continue
        out[pos] = guarded(pos, _pc_texts, row, schema, tokenizer)
    return out


def _pc_sample(
    prompt: list[int], answer: list[int], schema: PromptCompletionSchema, tokenizer: Tokenizer, max_length: int, truncation: str
) -> TokenizedSample:
    """Specials, truncation and mask of a tokenized prompt/completion pair (module docstring, steps 2-4)."""
    head = [_special(tokenizer, "bos_id")] if schema.add_bos else []
    tail = [_special(tokenizer, "eos_id")] if schema.add_eos else []
    n_special = len(head) + len(tail)
    if n_special >= max_length:
        raise UsageError(f"max_length={max_length} leaves no room next to {n_special} special token(s)")
    original = len(prompt) + len(answer) + n_special
    completion_nonempty = bool(answer) or not schema.allow_empty_completion
    overflow = original - max_length
    if overflow > 0:
        if truncation == "reject":
            raise SampleRejected(rj.TOO_LONG, f"{original} tokens > max_length {max_length}")
        from_prompt = min(overflow, len(prompt))
        prompt = _cut(prompt, from_prompt, truncation)
        answer = _cut(answer, overflow - from_prompt, truncation)
    ids = head + prompt + answer + tail
    n_context = len(head) + len(prompt)
    if schema.loss_mode == "full":
        mask = [1] * len(ids)
    else:
        mask = [0] * n_context + [1] * (len(answer) + len(tail))
    try:
        return _finish(ids, mask, schema.kind, n_context, original)
    except SampleRejected as err:
        if err.reason == rj.NO_SUPERVISED_TOKENS and schema.loss_mode != "full":
            err.completion_nonempty = completion_nonempty
        raise


def tokenize_prompt_completion(
    row: dict[str, Any],
    schema: PromptCompletionSchema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
) -> TokenizedSample:
    """Tokenize a prompt/completion row (module docstring, steps 1-4)."""
    _check_args(max_length, truncation, schema)
    prompt_text, completion_text = _pc_texts(row, schema, tokenizer)
    prompt = tokenizer.encode(prompt_text) if prompt_text else []
    answer = tokenizer.encode(completion_text) if completion_text else []
    return _pc_sample(prompt, answer, schema, tokenizer, max_length, truncation)


def chat_loss_mask(rendering: ChatRendering, loss_mode: str, reasoning: str = "train") -> list[int]:
    """Unshifted 0/1 mask of a rendered chat for ``assistant``, ``last_turn`` or ``full`` and a reasoning policy."""
    return _chat_mask(rendering, loss_mode, reasoning).tolist()


def _chat_mask(rendering: ChatRendering, loss_mode: str, reasoning: str) -> np.ndarray:
    owner = np.asarray(rendering.owner, dtype=np.int64)
    if loss_mode == "full":
        mask = np.ones(owner.shape[0], dtype=np.int8)
    else:
        assistants = [k for k, role in enumerate(rendering.roles) if role == "assistant"]
        if loss_mode == "assistant":
            wanted = assistants
        elif loss_mode == "last_turn":
            wanted = assistants[-1:]
        else:
            raise UsageError(f"unknown chat loss_mode {loss_mode!r}")
        mask = np.isin(owner, np.asarray(wanted, dtype=np.int64)).astype(np.int8)
    if reasoning == "mask":
        mask[np.asarray(rendering.reasoning, dtype=bool)] = 0
    return mask


def _chat_input(row: dict[str, Any], schema: ChatSchema, truncation: str) -> tuple[list[Message], list[dict[str, Any]] | None]:
    check_truncation(truncation, "chat")
    _refuse_visuals(row)
    messages = schema.extract(row)
    tools = schema.extract_tools(row)
    if not messages:
        raise SampleRejected(rj.EMPTY_CONVERSATION)
    roles = [m.role for m in messages]
    if schema.loss_mode != "full" and "assistant" not in roles:
        raise SampleRejected(rj.NO_ASSISTANT_TURN, f"roles are {roles}")
    return messages, tools


def _chat_sample(rendering: ChatRendering, schema: ChatSchema, max_length: int, truncation: str,
                 original: int | None = None) -> TokenizedSample:
    ids = np.asarray(rendering.ids, dtype=np.int64)
    mask = _chat_mask(rendering, schema.loss_mode, schema.reasoning)
    last_assistant = max((k for k, r in enumerate(rendering.roles) if r == "assistant"), default=-2)
    owned = np.flatnonzero(np.asarray(rendering.owner) == last_assistant)
    prompt_length = int(owned[0]) if owned.size else len(ids)
    original = len(ids) if original is None else original
    if len(ids) > max_length:
        if truncation in ("reject", "oldest_turns"):
            raise SampleRejected(rj.TOO_LONG, f"{original} tokens > max_length {max_length}"
                                 + ("; the system prompt and the last exchange alone do not fit"
                                    if truncation == "oldest_turns" else ""))
        ids, mask = ids[:max_length], mask[:max_length]
        prompt_length = min(prompt_length, max_length)
    return _finish(ids, mask, schema.kind, prompt_length, original)


def _exchange_starts(messages: Sequence[Message]) -> list[int]:
    """Where the conversation may start once older turns are dropped: every user turn after the first
    non-system message, up to the last user turn before the last assistant turn (that exchange stays)."""
    last_assistant = max((k for k, m in enumerate(messages) if m.role == "assistant"), default=len(messages))
    users = [k for k, m in enumerate(messages) if m.role == "user" and k < last_assistant]
    first = next((k for k, m in enumerate(messages) if m.role != "system"), 0)
    return [k for k in users if k > first]


def _drop_oldest_turns(tokenizer: Tokenizer, messages: list[Message], tools: Any, rendering: ChatRendering,
                       max_length: int) -> ChatRendering:
    """The rendering of the conversation with its oldest exchanges dropped until it fits ``max_length``
    (the system prompt kept), or the last try (still too long: the caller rejects it)."""
    head = [m for m in messages if m.role == "system"][:1] if messages and messages[0].role == "system" else []
    for start in _exchange_starts(messages):
        if len(rendering.ids) <= max_length:
            break
        rendering = tokenizer.apply_chat_template(head + list(messages[start:]), tools)
    return rendering


def tokenize_chat(
    row: dict[str, Any],
    schema: ChatSchema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
) -> TokenizedSample:
    """Tokenize a chat row with the tokenizer's chat rendering (module docstring)."""
    _check_args(max_length, truncation, schema)
    messages, tools = _chat_input(row, schema, truncation)
    try:
        rendering = tokenizer.apply_chat_template(messages, tools)
        original = len(rendering.ids)
        if truncation == "oldest_turns" and original > max_length:
            rendering = _drop_oldest_turns(tokenizer, messages, tools, rendering, max_length)
    except TemplateRefused as err:
        raise _refused(err, schema) from None
    return _chat_sample(rendering, schema, max_length, truncation, original)


def _refused(err: TemplateRefused, schema: ChatSchema) -> InputError:
    """The error a refused conversation raises: itself, or a ``template_error`` rejection when skipped."""
    if schema.on_template_error != "skip":
        return err
    return SampleRejected(rj.TEMPLATE_ERROR, err.message, field=err.field)


def tokenize_row(
    row: dict[str, Any],
    schema: Schema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
    location: RowLocation | None = None,
) -> TokenizedSample:
    """Tokenize one row by its schema; errors get ``location`` (file, line, row) added."""
    with at_row(location):
        if isinstance(schema, PromptCompletionSchema):
            return tokenize_prompt_completion(row, schema, tokenizer, max_length=max_length, truncation=truncation)
        if isinstance(schema, ChatSchema):
            return tokenize_chat(row, schema, tokenizer, max_length=max_length, truncation=truncation)
        raise UsageError(f"unknown schema object {type(schema).__name__}")


def check_row(row: dict[str, Any], schema: Schema, *, location: RowLocation | None = None) -> None:
    """The checks :func:`tokenize_row` makes before it needs a tokenizer: fields present and typed,
    roles known, and the rejections that do not depend on tokens (empty completion, empty
    conversation, no assistant turn). Raises what :func:`tokenize_row` would (an
    :class:`InputError`, or a :class:`SampleRejected` with its reason)."""
    with at_row(location):
        if isinstance(schema, PromptCompletionSchema):
            _, completion = schema.extract(row)
            if not completion and not schema.allow_empty_completion:
                raise SampleRejected(rj.EMPTY_COMPLETION, field=schema.completion_column)
        elif isinstance(schema, ChatSchema):
            _chat_input(row, schema, "right")
        else:
            raise UsageError(f"unknown schema object {type(schema).__name__}")


@dataclass(frozen=True, eq=False)
class TokenizedBatch:
    """Rows tokenized together, as flat arrays (see "Batches" in the module docstring).

    Sample ``i`` is ``ids[offsets[i]:offsets[i+1]]`` (``int32``) with mask ``loss_mask[...]``
    (``uint8``, unshifted, 1 = trained target), taken from input row ``positions[i]`` of the batch.
    ``prompt_lengths``, ``original_lengths`` (``int64``) and ``truncated`` (``bool``) are per
    sample; ``rejected`` lists ``(position, error)`` for rows that yield no sample.
    """

    ids: np.ndarray
    loss_mask: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray
    prompt_lengths: np.ndarray
    original_lengths: np.ndarray
    truncated: np.ndarray
    rejected: list[tuple[int, SampleRejected]]
    schema: str

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """``int64 [n]`` tokens per sample."""
        return np.diff(self.offsets)

    def sample(self, i: int) -> TokenizedSample:
        """Sample ``i`` as a :class:`TokenizedSample` (int64 ids, int8 mask)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return TokenizedSample(
            input_ids=self.ids[a:b].astype(np.int64),
            loss_mask=self.loss_mask[a:b].astype(np.int8),
            schema=self.schema,
            prompt_length=int(self.prompt_lengths[i]),
            original_length=int(self.original_lengths[i]),
            truncated=bool(self.truncated[i]),
        )


def tokenize_batch(
    rows: Sequence[dict[str, Any]],
    schema: Schema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
    locations: Sequence[RowLocation | None] | None = None,
) -> TokenizedBatch:
    """Tokenize many rows with one batched encode (module docstring, "Batches").

    Gives the same samples as :func:`tokenize_row` row by row. ``locations[i]`` names row ``i`` in
    errors. A :class:`SampleRejected` row is listed in ``rejected``; other errors are raised.
    """
    _check_args(max_length, truncation, schema)
    where = locations if locations is not None else [None] * len(rows)
    if len(where) != len(rows):
        raise UsageError(f"{len(rows)} rows but {len(where)} locations")
    try:
        return _tokenize_batch(rows, schema, tokenizer, max_length, truncation, where)
    except MemoryError:
        # the rows are tokenized together: name the largest, the one that made the batch too big
        sizes = [text_size(row) for row in rows]
        k = max(range(len(rows)), key=sizes.__getitem__)
        detail = f" ({sizes[k]} characters, the largest of the {len(rows)} rows tokenized with it)"
        raise out_of_memory(where[k], detail) from None


def _tokenize_batch(
    rows: Sequence[dict[str, Any]], schema: Schema, tokenizer: Tokenizer, max_length: int, truncation: str,
    where: Sequence[RowLocation | None],
) -> TokenizedBatch:
    rejected: list[tuple[int, SampleRejected]] = []

    def guarded(pos: int, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except SampleRejected as err:
            rejected.append((pos, stamp(err, where[pos])))
            return None
        except SeqpackError as err:
            raise stamp(err, where[pos])

    if isinstance(schema, PromptCompletionSchema):
        texts = _pc_texts_batch(rows, schema, tokenizer, guarded)
        ok = [pos for pos, t in texts.items() if t is not None]
        return _pc_batch(ok, [part for pos in ok for part in texts[pos]], schema, tokenizer, max_length, truncation,
                         where, rejected)
    samples: list[tuple[int, TokenizedSample]] = []
    if isinstance(schema, ChatSchema):
        inputs = {pos: guarded(pos, _chat_input, row, schema, truncation) for pos, row in enumerate(rows)}
        ok = [pos for pos, x in inputs.items() if x is not None]
        renderings = _render_batch(tokenizer, [inputs[pos] for pos in ok])
        for pos, rendering in zip(ok, renderings):
            try:
                if isinstance(rendering, Exception):
                    raise rendering
                original = len(rendering.ids)
                if truncation == "oldest_turns" and original > max_length:
                    rendering = _drop_oldest_turns(tokenizer, *inputs[pos], rendering, max_length)
            except TemplateRefused as err:
                if schema.on_template_error == "skip":
                    rejected.append((pos, stamp(_refused(err, schema), where[pos])))
                    continue
                with at_row(where[pos]):
                    raise
            except InputError:
                with at_row(where[pos]):
                    raise
            sample = guarded(pos, _chat_sample, rendering, schema, max_length, truncation, original)
            if sample is not None:
                samples.append((pos, sample))
    else:
        raise UsageError(f"unknown schema object {type(schema).__name__}")
    rejected.sort(key=lambda item: item[0])
    return _pack_batch(samples, rejected, schema.kind)


def _encode_flat(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """All ``texts`` encoded: ``(ids int64, lengths int64)`` with the ids of text ``i`` at
    ``ids[sum(lengths[:i]):...]`` (an empty text has no ids)."""
    flat = getattr(tokenizer, "encode_batch_flat", None)
    if callable(flat):
        ids, lengths = flat(texts)
        return np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    wanted = [t for t in texts if t]
    encoded = iter(_encode_batch(tokenizer, wanted))
    parts = [next(encoded) if t else [] for t in texts]
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return np.fromiter(chain.from_iterable(parts), dtype=np.int64, count=int(lengths.sum())), lengths


def _pc_batch(
    ok: list[int], texts: list[str], schema: PromptCompletionSchema, tokenizer: Tokenizer, max_length: int,
    truncation: str, where: Sequence[RowLocation | None], rejected: list[tuple[int, SampleRejected]],
) -> TokenizedBatch:
    """:func:`_pc_sample` for many rows at once, on flat arrays (same samples, same rejections).

    ``texts`` holds ``prompt, completion`` of every row in ``ok``, in turn.
    """
    values, lengths = _encode_flat(tokenizer, texts)
    n = len(ok)
    head = int(schema.add_bos and n > 0)
    tail = int(schema.add_eos and n > 0)
    bos = _special(tokenizer, "bos_id") if head else 0
    eos = _special(tokenizer, "eos_id") if tail else 0
    if n and head + tail >= max_length:
        raise UsageError(f"max_length={max_length} leaves no room next to {head + tail} special token(s)")
    text_start = offsets_of(lengths)[:-1]
    prompt, answer = lengths[0::2], lengths[1::2]
    original = prompt + answer + head + tail
    overflow = np.maximum(original - max_length, 0)
    from_prompt = np.minimum(overflow, prompt)
    from_answer = overflow - from_prompt
    kept_prompt, kept_answer = prompt - from_prompt, answer - from_answer
    left = truncation == "left"
    prompt_src = text_start[0::2] + (from_prompt if left else 0)
    answer_src = text_start[1::2] + (from_answer if left else 0)
    size = head + kept_prompt + kept_answer + tail
    if schema.loss_mode == "full":
        trained, first_trained = size, np.ones(n, dtype=bool)
    else:
        trained = kept_answer + tail
        first_trained = (head + kept_prompt == 0) & (trained > 0)
    supervised = trained - first_trained
    reasons = np.full(n, "", dtype=object)
    if truncation == "reject":
        reasons[overflow > 0] = rj.TOO_LONG
    reasons[(reasons == "") & (size < 2)] = rj.TOO_SHORT
    reasons[(reasons == "") & (supervised == 0)] = rj.NO_SUPERVISED_TOKENS
    for k in np.flatnonzero(reasons != "").tolist():
        detail = {
            rj.TOO_LONG: f"{int(original[k])} tokens > max_length {max_length}",
            rj.TOO_SHORT: f"{int(size[k])} token(s); at least 2 are needed",
        }.get(reasons[k])
        err = SampleRejected(reasons[k], detail)
        if reasons[k] == rj.NO_SUPERVISED_TOKENS and schema.loss_mode != "full":
            # a non-empty completion left nothing supervised (an empty one is only kept when allowed)
            err.completion_nonempty = bool(answer[k] > 0 or not schema.allow_empty_completion)
        rejected.append((ok[k], stamp(err, where[ok[k]])))
    rejected.sort(key=lambda item: item[0])
    keep = np.flatnonzero(reasons == "")
    # four pieces per sample: [bos], kept prompt, kept completion, [eos]; the specials sit after the texts
    source = np.concatenate([values, np.array([bos, eos], dtype=np.int64)])
    piece_start = np.stack([np.full(keep.size, values.size), prompt_src[keep], answer_src[keep],
                            np.full(keep.size, values.size + 1)], axis=1).ravel()
    piece_len = np.stack([np.full(keep.size, head), kept_prompt[keep], kept_answer[keep], np.full(keep.size, tail)],
                         axis=1).ravel()
    piece_mask = np.tile(np.array([1, 1, 1, 1] if schema.loss_mode == "full" else [0, 0, 1, 1], dtype=np.uint8),
                         keep.size)
    return TokenizedBatch(
        ids=source[concat_ranges(piece_start, piece_len)].astype(np.int32),
        loss_mask=np.repeat(piece_mask, piece_len),
        offsets=offsets_of(size[keep]),
        positions=np.asarray(ok, dtype=np.int64)[keep],
        prompt_lengths=(head + kept_prompt[keep]).astype(np.int64),
        original_lengths=original[keep].astype(np.int64),
        truncated=original[keep] > size[keep],
        rejected=rejected,
        schema=schema.kind,
    )


def _encode_batch(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    batch = getattr(tokenizer, "encode_batch", None)
    if callable(batch):
        return list(batch(texts))
    return [tokenizer.encode(t) for t in texts]


def _render_batch(tokenizer: Tokenizer, inputs: list[tuple[list[Message], Any]]) -> list[Any]:
    batch = getattr(tokenizer, "apply_chat_templates", None)
    if callable(batch):
        return list(batch(inputs))
    out: list[Any] = []
    for messages, tools in inputs:
        try:
            out.append(tokenizer.apply_chat_template(messages, tools))
        except InputError as err:
            out.append(err)
    return out


def _pack_batch(samples: list[tuple[int, TokenizedSample]], rejected: list[tuple[int, SampleRejected]], kind: str) -> TokenizedBatch:
    lengths = np.asarray([s.num_tokens for _, s in samples], dtype=np.int64)
    offsets = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty_ids, empty_mask = np.zeros(0, np.int32), np.zeros(0, np.uint8)
    return TokenizedBatch(
        ids=np.concatenate([s.input_ids for _, s in samples]).astype(np.int32) if samples else empty_ids,
        loss_mask=np.concatenate([s.loss_mask for _, s in samples]).astype(np.uint8) if samples else empty_mask,
        offsets=offsets,
        positions=np.asarray([pos for pos, _ in samples], dtype=np.int64),
        prompt_lengths=np.asarray([s.prompt_length for _, s in samples], dtype=np.int64),
        original_lengths=np.asarray([s.original_length for _, s in samples], dtype=np.int64),
        truncated=np.asarray([s.truncated for _, s in samples], dtype=bool),
        rejected=rejected,
        schema=kind,
    )


def to_training_example(sample: TokenizedSample) -> TrainingExample:
    """Apply the next-token shift: ``tokens = ids[:-1]``, ``labels = ids[1:]``, ``loss_mask = mask[1:]``."""
    ids = np.asarray(sample.input_ids, dtype=np.int64)
    if ids.shape[0] < 2:
        raise UsageError(f"a training example needs at least 2 tokens, got {ids.shape[0]}")
    return TrainingExample(
        tokens=ids[:-1].copy(),
        labels=ids[1:].copy(),
        loss_mask=np.asarray(sample.loss_mask[1:], dtype=np.float32),
    )
