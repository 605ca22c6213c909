"""Samples that are well-formed but cannot be trained on, with a machine-readable reason.

:class:`SampleRejected` is an :class:`~seqpack.core.errors.InputError`, so code that does not
care still stops on it; pipelines that skip such samples catch it and count ``err.reason``.
"""

from __future__ import annotations

from typing import Any

from seqpack.core.errors import InputError

EMPTY_COMPLETION = "empty_completion"
EMPTY_CONVERSATION = "empty_conversation"
NO_ASSISTANT_TURN = "no_assistant_turn"
NO_SUPERVISED_TOKENS = "no_supervised_tokens"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
TEMPLATE_ERROR = "template_error"

REASONS: dict[str, str] = {
    EMPTY_COMPLETION: "the completion is empty (after whitespace stripping)",
    EMPTY_CONVERSATION: "the conversation has no messages",
    NO_ASSISTANT_TURN: "the loss mode trains assistant turns but the conversation has none",
    NO_SUPERVISED_TOKENS: "no label would be trained (loss mask is 0 on every position after the first)",
    TOO_SHORT: "fewer than 2 tokens, so there is no next-token pair",
    TOO_LONG: "longer than max_length and the truncation policy is 'reject' (or no older turn is left to drop)",
    TEMPLATE_ERROR: "the model's chat template refused the conversation (on_template_error='skip')",
}


class SampleRejected(InputError):
    """A row that parses but yields no usable training sample; ``reason`` is a key of :data:`REASONS`."""

    def __init__(self, reason: str, message: str | None = None, **kwargs: Any) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}")
        super().__init__(f"sample rejected ({reason}): {message or REASONS[reason]}", **kwargs)
        self.reason = reason
        #: For ``no_supervised_tokens`` of a prompt/completion row under completion loss: whether its
        #: completion was non-empty (its supervised tokens were all truncated away or encode to nothing;
        #: Megatron-Bridge main refuses such a sample, PR #5737).
        self.completion_nonempty = False

    def to_dict(self) -> dict[str, Any]:
        """The base error fields plus ``reason``."""
        return {**super().to_dict(), "reason": self.reason}
