"""``align``: the per-sequence alignment of a topology, plus equal token-slot candidates on request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seqpack.core.alignment import (
    DEFAULT_PACK_LENGTHS,
    Alignment,
    SlotCandidate,
    derive_alignment,
    equal_slot_candidates,
)
from seqpack.core.limits import MAX_CANDIDATES, MAX_DATA_PARALLEL_SIZE, MAX_PACK_LEN, MAX_TOKEN_SLOTS
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import parallel_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["ALIGN", "DEFAULT_TOKEN_SLOTS", "AlignOptions", "AlignmentReport", "align", "render_alignment"]

DEFAULT_TOKEN_SLOTS = 65536


@verb_options
class AlignOptions:
    """Topology, and (any of the last three set) the equal-token-slot table to add. ``pack_sizes`` was called
    ``pack_lengths`` (the old name is accepted, with a deprecation warning, for one release)."""

    tp: int = parallel_option(1, "tensor-parallel size")
    cp: int = parallel_option(1, "context-parallel size")
    sp: bool = option(False, help="sequence parallelism on")
    eval_cp: int | None = parallel_option(None, "a distinct evaluation CP size")
    token_slots: int | None = option(None, help="also list pack length / global batch size pairs with this many "
                                     "token slots per step", minimum=1, maximum=MAX_TOKEN_SLOTS)
    pack_sizes: Sequence[int] | None = option(
        None, help="candidate pack sizes (default 2048,4096,8192)", item_minimum=1, item_maximum=MAX_PACK_LEN,
        max_items=MAX_CANDIDATES, renamed_from=("pack_lengths",))
    dp: int | None = option(None, help="data-parallel size for the candidate check", minimum=1,
                            maximum=MAX_DATA_PARALLEL_SIZE)

    @property
    def wants_candidates(self) -> bool:
        """Whether the table of pack length / global batch size pairs was asked for."""
        return self.token_slots is not None or self.pack_sizes is not None or self.dp is not None


@dataclass(frozen=True)
class AlignmentReport(Alignment):
    """:class:`~seqpack.core.alignment.Alignment` plus the equal-token-slot candidates (None unless asked)."""

    candidates: list[SlotCandidate] | None = None


def align(options: AlignOptions) -> AlignmentReport:
    """Derive ``pad_seq_to_mult`` for the topology (and list equal-token-slot candidates when asked).

    >>> align(AlignOptions(tp=4, cp=2, sp=True)).pad_seq_to_mult
    8
    """
    check_options(options)
    al = derive_alignment(options.tp, options.cp, options.sp, options.eval_cp)
    candidates = None
    if options.wants_candidates:
        candidates = equal_slot_candidates(options.token_slots or DEFAULT_TOKEN_SLOTS,
                                           tuple(options.pack_sizes or DEFAULT_PACK_LENGTHS), options.dp)
    return AlignmentReport(**{k: getattr(al, k) for k in al.__dataclass_fields__}, candidates=candidates)


def render_alignment(al: AlignmentReport, options: AlignOptions) -> str:
    """The CLI's text: the factors, the explanation and the candidates."""
    topo = f"TP{al.tp} / CP{al.cp} / SP {'on' if al.sp else 'off'}" + (f" / eval CP{al.eval_cp}" if al.eval_cp else "")
    out = [topo, text_table(["value", "n", "why"], [
        ["cp_multiple", al.cp_multiple, "2*CP when CP>1, else 1"],
        ["sp_multiple", al.sp_multiple, "CP*TP when SP and TP>1, else 1"],
        ["pad_seq_to_mult", al.pad_seq_to_mult, "lcm over train/eval CP of both multiples"],
        ["seq_length_multiple", al.seq_length_multiple, "seq_length and fixed pack widths"],
    ]), al.explanation]
    if al.candidates is not None:
        out += ["", text_table(["pack_size", "global_batch_size", "token_slots", "valid", "reason"],
                               [[c.pack_size, c.global_batch_size, c.token_slots, "yes" if c.valid else "no", c.reason]
                                for c in al.candidates])]
    return "\n".join(out)


ALIGN = Verb(
    name="align", options=AlignOptions, function=align, render=render_alignment,
    help="derive the per-sequence alignment (pad_seq_to_mult) for TP/CP/SP, and equal token-slot candidates",
    tools=(Tool(
        "derive_alignment", title="Derive pad_seq_to_mult for TP/CP/SP",
        description="""Per-sequence alignment multiple (pad_seq_to_mult) every packed sequence must have.

pad_seq_to_mult = lcm(2*CP when CP>1, CP*TP when SP and TP>1) over the training and the
evaluation CP size; the explanation shows each factor. Example: TP4/CP2/SP gives 8. With
token_slots, pack_sizes or dp, candidates lists equal-token-slot pack size / global batch
size pairs and whether DP allows them (else it is null). (`pack_lengths`, the old name of
pack_sizes, is still accepted for one release.)""",
    ),),
)
