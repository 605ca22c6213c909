"""``align``: the per-sequence alignment of a topology, plus equal token-slot candidates on request."""

from __future__ import annotations

from dataclasses import dataclass

from seqpack.core.alignment import (
    DEFAULT_PACK_LENGTHS,
    Alignment,
    SlotCandidate,
    derive_alignment,
    equal_slot_candidates,
)
from seqpack.core.arguments import positive_int
from seqpack.core.limits import MAX_CANDIDATES, MAX_DATA_PARALLEL_SIZE, MAX_PACK_LEN, MAX_TOKEN_SLOTS
from seqpack.verbs.common import int_list

__all__ = ["DEFAULT_TOKEN_SLOTS", "AlignOptions", "AlignmentReport", "align"]

DEFAULT_TOKEN_SLOTS = 65536


@dataclass(frozen=True, kw_only=True)
class AlignOptions:
    """Topology, and (any of the last three set) the equal-token-slot table to add."""

    tp: int = 1
    cp: int = 1
    sp: bool = False
    eval_cp: int | None = None
    token_slots: int | None = None
    pack_lengths: tuple[int, ...] | None = None
    dp: int | None = None

    @property
    def wants_candidates(self) -> bool:
        """Whether the table of pack length / global batch size pairs was asked for."""
        return self.token_slots is not None or self.pack_lengths is not None or self.dp is not None


@dataclass(frozen=True)
class AlignmentReport(Alignment):
    """:class:`~seqpack.core.alignment.Alignment` plus the equal-token-slot candidates (None unless asked)."""

    candidates: list[SlotCandidate] | None = None


def align(options: AlignOptions) -> AlignmentReport:
    """Derive ``pad_seq_to_mult`` for the topology (and list equal-token-slot candidates when asked).

    >>> align(AlignOptions(tp=4, cp=2, sp=True)).pad_seq_to_mult
    8
    """
    al = derive_alignment(options.tp, options.cp, options.sp, options.eval_cp)
    candidates = None
    if options.wants_candidates:
        slots = positive_int("token_slots", options.token_slots, allow_none=True, maximum=MAX_TOKEN_SLOTS)
        lengths = int_list("pack_lengths", options.pack_lengths or DEFAULT_PACK_LENGTHS, maximum=MAX_PACK_LEN,
                           most=MAX_CANDIDATES)
        dp = positive_int("dp", options.dp, allow_none=True, maximum=MAX_DATA_PARALLEL_SIZE)
        candidates = equal_slot_candidates(slots or DEFAULT_TOKEN_SLOTS, lengths, dp)
    return AlignmentReport(**{k: getattr(al, k) for k in al.__dataclass_fields__}, candidates=candidates)
