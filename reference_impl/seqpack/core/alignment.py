"""Alignment multiples for packed THD sequences, and token-slot arithmetic.

Pure Python (no torch, no numpy): an agent asking "what is pad_seq_to_mult for TP4/CP2/SP" gets an
answer in microseconds.

Why the multiples exist:

* Context parallelism (CP > 1) splits every packed sequence into ``2*CP`` equal chunks (rank ``r``
  keeps chunks ``r`` and ``2*CP-1-r`` to balance causal attention), so each physical sequence length
  must be a multiple of ``2*CP``.
* Sequence parallelism with TP > 1 splits the tokens a CP rank holds across the TP ranks, so the
  tokens of every sequence must also divide by ``CP*TP``.
* When evaluation runs with a different CP size than training, a sequence must satisfy both, hence
  the least common multiple over the train and eval CP sizes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_PAD_SEQ_TO_MULT, MAX_PARALLEL_SIZE
from seqpack.core.results import Result


def _positive_int(name: str, value: Any) -> int:
    return positive_int(name, value)


def _parallel_size(name: str, value: Any) -> int:
    return positive_int(name, value, maximum=MAX_PARALLEL_SIZE)


def cp_multiple(cp: int) -> int:
    """Per-sequence multiple required by context parallelism: ``2*CP`` when CP > 1, else 1."""
    return 2 * cp if cp > 1 else 1


def sp_multiple(tp: int, cp: int, sp: bool) -> int:
    """Per-sequence multiple required by sequence parallelism: ``CP*TP`` when SP is on and TP > 1, else 1."""
    return cp * tp if sp and tp > 1 else 1


@dataclass(frozen=True)
class Alignment(Result):
    """Result of :func:`derive_alignment`.

    ``pad_seq_to_mult`` is the multiple every packed sequence's physical length must have.
    ``seq_length_multiple`` is the multiple the model/dataset ``seq_length`` (and a fixed pack width)
    must have; it equals ``pad_seq_to_mult`` because a fixed-width row is itself one physical run of
    whole aligned sequences.
    """

    tp: int
    cp: int
    sp: bool
    eval_cp: int | None
    cp_multiple: int
    sp_multiple: int
    pad_seq_to_mult: int
    seq_length_multiple: int
    explanation: str


def derive_alignment(tp: int = 1, cp: int = 1, sp: bool = False, eval_cp: int | None = None) -> Alignment:
    """Derive the per-sequence alignment multiple for a TP/CP/SP topology (and an optional eval CP).

    ``cp_multiple`` and ``sp_multiple`` describe the training CP size; ``pad_seq_to_mult`` is the lcm
    of both multiples over the training CP size and, when given, the evaluation CP size.

    >>> derive_alignment(tp=4, cp=2, sp=True).pad_seq_to_mult
    8
    """
    tp = _parallel_size("tp", tp)
    cp = _parallel_size("cp", cp)
    if not isinstance(sp, bool):
        raise UsageError(f"sp must be true or false, got {sp!r}", field="sp")
    if eval_cp is not None:
        eval_cp = _parallel_size("eval_cp", eval_cp)
    cp_sizes = [cp] if eval_cp is None or eval_cp == cp else [cp, eval_cp]
    multiples = [cp_multiple(c) for c in cp_sizes] + [sp_multiple(tp, c, sp) for c in cp_sizes]
    pad = math.lcm(*multiples)
    train_cp_mult = cp_multiple(cp)
    train_sp_mult = sp_multiple(tp, cp, sp)

    parts = []
    for c in cp_sizes:
        label = "eval CP" if (eval_cp is not None and c == eval_cp and c != cp) else "CP"
        cpm, spm = cp_multiple(c), sp_multiple(tp, c, sp)
        cp_text = f"2*{label}={cpm}" if c > 1 else f"{label}={c} needs no CP padding (1)"
        if sp and tp > 1:
            sp_text = f"SP with TP={tp}: {label}*TP={spm}"
        elif sp:
            sp_text = "SP with TP=1 needs nothing (1)"
        else:
            sp_text = "SP off (1)"
        parts.append(f"{cp_text}; {sp_text}")
    explanation = f"pad_seq_to_mult = lcm({', '.join(str(m) for m in multiples)}) = {pad} [{' | '.join(parts)}]"
    return Alignment(
        tp=tp,
        cp=cp,
        sp=sp,
        eval_cp=eval_cp,
        cp_multiple=train_cp_mult,
        sp_multiple=train_sp_mult,
        pad_seq_to_mult=pad,
        seq_length_multiple=pad,
        explanation=explanation,
    )


def alignment_multiple(
    pad_seq_to_mult: int | None = None, tp: int = 1, cp: int = 1, sp: bool = False, eval_cp: int | None = None
) -> int:
    """The per-sequence multiple to use: ``pad_seq_to_mult`` when given, else derived from TP/CP/SP.

    Every verb that takes both resolves them here, so no face can write packs the topology breaks.
    As in the rule registry, an explicit value must be a multiple of what context parallelism
    enforces (2*CP over train and eval CP; rule ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``); a value that
    only misses the recommended sequence-parallel term is used with a logged warning
    (``PACK-OFFLINE-PAD-MULT-RECOMMENDED``).

    >>> alignment_multiple(None, tp=4, cp=2, sp=True), alignment_multiple(16, tp=4, cp=2, sp=True)
    (8, 16)
    """
    derived = derive_alignment(tp, cp, sp, eval_cp)
    if pad_seq_to_mult is None:
        return derived.pad_seq_to_mult
    pad = positive_int("pad_seq_to_mult", pad_seq_to_mult, maximum=MAX_PAD_SEQ_TO_MULT)
    required = derive_alignment(1, cp, False, eval_cp).pad_seq_to_mult
    if pad % required:
        raise UsageError(
            f"pad_seq_to_mult={pad} is not a multiple of {required}, which context parallelism needs "
            f"({derived.explanation})",
            rule_id="PACK-OFFLINE-PAD-MULT-TOPOLOGY",
            field="pad_seq_to_mult",
            fix=f"use pad_seq_to_mult={derived.pad_seq_to_mult} (or a multiple of it), or leave it out to derive it",
        )
    if pad % derived.pad_seq_to_mult:
        logging.getLogger(__name__).warning(
            "[PACK-OFFLINE-PAD-MULT-RECOMMENDED] pad_seq_to_mult=%d is not a multiple of the recommended %d (%s)",
            pad, derived.pad_seq_to_mult, derived.explanation,
        )
    return pad


@dataclass(frozen=True)
class Topology:
    """A TP/CP/SP topology (and an optional evaluation CP size), the input every alignment comes from."""

    tp: int = 1
    cp: int = 1
    sp: bool = False
    eval_cp: int | None = None

    def alignment(self) -> Alignment:
        """The derived alignment."""
        return derive_alignment(self.tp, self.cp, self.sp, self.eval_cp)

    def multiple(self, pad_seq_to_mult: int | None = None) -> int:
        """:func:`alignment_multiple` for this topology."""
        return alignment_multiple(pad_seq_to_mult, self.tp, self.cp, self.sp, self.eval_cp)


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value`` (``multiple`` >= 1)."""
    multiple = positive_int("multiple", multiple)
    return -(-value // multiple) * multiple


def token_slots_per_step(pack_len: int, gbs: int) -> int:
    """Token slots one optimizer step offers: ``pack_len * global_batch_size`` (MBS1 packed rows)."""
    return _positive_int("pack_len", pack_len) * _positive_int("gbs", gbs)


@dataclass(frozen=True)
class SlotCandidate(Result):
    """One row of an equal-token-slot table (``pack_len`` repeats ``pack_size`` under its old name for one
    release; deprecated)."""

    pack_size: int
    global_batch_size: int
    token_slots: int
    dp: int | None
    valid: bool
    reason: str
    pack_len: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pack_len", self.pack_size)


DEFAULT_PACK_LENGTHS: tuple[int, ...] = (2048, 4096, 8192)


def equal_slot_candidates(
    token_slots: int = 65536,
    pack_lengths: tuple[int, ...] | list[int] = DEFAULT_PACK_LENGTHS,
    dp: int | None = None,
) -> list[SlotCandidate]:
    """Pack length / global batch size pairs that keep ``token_slots`` per step constant.

    A candidate is invalid when ``token_slots`` is not a multiple of the pack length, or (given a
    data-parallel size) when the global batch size is not divisible by DP (which also makes it
    smaller than DP). 2K/GBS32, 4K/GBS16 and 8K/GBS8 all give 65,536 slots.
    """
    token_slots = _positive_int("token_slots", token_slots)
    if dp is not None:
        dp = _positive_int("dp", dp)
    rows = []
    for pack_len in pack_lengths:
        pack_len = _positive_int("pack_len", pack_len)
        if token_slots % pack_len:
            rows.append(SlotCandidate(pack_len, 0, 0, dp, False, f"{token_slots} is not a multiple of {pack_len}"))
            continue
        gbs = token_slots // pack_len
        if dp is not None and gbs % dp:
            reason = f"global_batch_size {gbs} is not divisible by DP={dp}"
            if gbs < dp:
                reason = f"global_batch_size {gbs} is smaller than DP={dp}"
            rows.append(SlotCandidate(pack_len, gbs, token_slots, dp, False, reason))
            continue
        rows.append(SlotCandidate(pack_len, gbs, pack_len * gbs, dp, True, "ok"))
    return rows
