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

**Chat**: the tokenizer renders the conversation (:mod:`reference_impl.data.tokenizers`), no EOS is
added on top of the template. Loss mask: ``"assistant"`` -> tokens owned by any assistant turn,
``"last_turn"`` -> tokens owned by the last assistant turn, ``"full"`` -> every token.
Unlike Megatron-Bridge (which never truncates chats at tokenization, quirk Q10), an over-long
chat is handled explicitly: ``"right"`` keeps the first ``max_length`` tokens and flags
``truncated``; ``"reject"`` rejects it; ``"left"`` is refused (it would cut the template head).

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

**Shift** (:func:`to_training_example`): ``tokens = ids[:-1]``, ``labels = ids[1:]``,
``loss_mask = mask[1:]`` (the mask is aligned to the labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from reference_impl.choices import TRUNCATION_MODES
from reference_impl.data import rejections as rj
from reference_impl.data.location import RowLocation, at_row
from reference_impl.data.rejections import SampleRejected
from reference_impl.data.schemas import ChatSchema, PromptCompletionSchema, Schema
from reference_impl.data.tokenizers import ChatRendering, Tokenizer
from reference_impl.errors import UsageError

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


def _check_args(max_length: int, truncation: str) -> None:
    if truncation not in TRUNCATION_POLICIES:
        raise UsageError(f"unknown truncation {truncation!r}; choose one of {', '.join(TRUNCATION_POLICIES)}")
    if not isinstance(max_length, int) or max_length < 2:
        raise UsageError(f"max_length must be an integer >= 2, got {max_length!r}")


def _cut(ids: list[int], n: int, truncation: str) -> list[int]:
    """Remove ``n`` tokens: from the end (``right``, head kept) or the start (``left``, tail kept)."""
    if n <= 0:
        return ids
    return ids[: len(ids) - n] if truncation == "right" else ids[n:]


def _finish(ids: list[int], mask: list[int], schema: str, prompt_length: int, original: int) -> TokenizedSample:
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


def tokenize_prompt_completion(
    row: dict[str, Any],
    schema: PromptCompletionSchema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
) -> TokenizedSample:
    """Tokenize a prompt/completion row (module docstring, steps 1-4)."""
    _check_args(max_length, truncation)
    prompt_text, completion = schema.extract(row)
    if not completion and not schema.allow_empty_completion:
        raise SampleRejected(rj.EMPTY_COMPLETION, field=schema.completion_column)
    sep = schema.separator
    if sep.startswith(" ") and not tokenizer.space_sensitive:
        sep = sep[1:]
    prompt = tokenizer.encode(prompt_text) if prompt_text else []
    completion_text = sep + completion
    answer = tokenizer.encode(completion_text) if completion_text else []
    head = [_special(tokenizer, "bos_id")] if schema.add_bos else []
    tail = [_special(tokenizer, "eos_id")] if schema.add_eos else []
    n_special = len(head) + len(tail)
    if n_special >= max_length:
        raise UsageError(f"max_length={max_length} leaves no room next to {n_special} special token(s)")
    original = len(prompt) + len(answer) + n_special
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
    return _finish(ids, mask, schema.kind, n_context, original)


def chat_loss_mask(rendering: ChatRendering, loss_mode: str) -> list[int]:
    """Unshifted 0/1 mask of a rendered chat for ``assistant``, ``last_turn`` or ``full``."""
    if loss_mode == "full":
        return [1] * len(rendering.ids)
    assistants = [k for k, role in enumerate(rendering.roles) if role == "assistant"]
    if loss_mode == "assistant":
        wanted = set(assistants)
    elif loss_mode == "last_turn":
        wanted = set(assistants[-1:])
    else:
        raise UsageError(f"unknown chat loss_mode {loss_mode!r}")
    return [1 if k in wanted else 0 for k in rendering.owner]


def tokenize_chat(
    row: dict[str, Any],
    schema: ChatSchema,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    truncation: str = "right",
) -> TokenizedSample:
    """Tokenize a chat row with the tokenizer's chat rendering (module docstring)."""
    _check_args(max_length, truncation)
    if truncation == "left":
        raise UsageError("left truncation is not supported for chat (it would cut the template head); use right or reject")
    messages = schema.extract(row)
    if not messages:
        raise SampleRejected(rj.EMPTY_CONVERSATION)
    roles = [m.role for m in messages]
    if schema.loss_mode != "full" and "assistant" not in roles:
        raise SampleRejected(rj.NO_ASSISTANT_TURN, f"roles are {roles}")
    rendering = tokenizer.apply_chat_template(messages)
    ids = list(rendering.ids)
    mask = chat_loss_mask(rendering, schema.loss_mode)
    last_assistant = max((k for k, r in enumerate(roles) if r == "assistant"), default=None)
    prompt_length = next((i for i, k in enumerate(rendering.owner) if k == last_assistant), len(ids))
    original = len(ids)
    if original > max_length:
        if truncation == "reject":
            raise SampleRejected(rj.TOO_LONG, f"{original} tokens > max_length {max_length}")
        ids, mask = ids[:max_length], mask[:max_length]
        prompt_length = min(prompt_length, max_length)
    return _finish(ids, mask, schema.kind, prompt_length, original)


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
