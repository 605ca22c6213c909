"""MoE token-dispatch width rules: how wide each rank's dispatch input is, and what padding that implies.

Pure Python (base layer). A packed micro-batch of width ``W`` reaches an MoE layer as
``W / (CP * TP_sp)`` tokens per rank (``TP_sp`` = TP when sequence parallelism splits the
sequence, else 1). Expert parallelism then exchanges tokens between the ranks of an EP group,
which hold *different* micro-batches (EP groups are carved out of data parallelism). Whether
their token counts may differ depends on the dispatcher (Megatron-Core main at d98e8a64):

* ``alltoall``: exchanges per-rank split sizes, so counts may differ (``variable``);
* ``allgather``: gathers equal splits over the TP x EP group (``gather_from_sequence_parallel_region``
  without split sizes, ``token_dispatcher.py`` 289-301 and ``tensor_parallel/mappings.py`` 138-146),
  so with EP > 1 every rank must hold the same count: fixed-width packs (``fixed_required``);
* ``flex`` with the DeepEP backend: counts may differ (``variable``);
* ``flex`` with the HybridEP backend: the kernels expect equal per-rank inputs. Eager runs can
  pad them: ``moe_hybridep_pad_uneven_dispatch_inputs`` all-reduces the count, pads to the EP
  group's maximum rounded up to :data:`HYBRIDEP_TOKEN_ALIGNMENT` and trims after the combine
  (``token_dispatcher.py`` 1068-1083; Megatron-Bridge 067f987 turns it on for eager HybridEP,
  ``models/transformer_config.py`` 91-130). That padding does a host synchronisation CUDA graphs
  cannot capture, so graphed HybridEP needs equal shapes, i.e. fixed-width packs.

Padded positions are dispatched like real tokens (the padding mask only keeps them out of the
router statistics), so every padding token of a pack costs expert compute and communication.
:func:`dispatch_width` resolves the rule; :mod:`seqpack.verbs.planning` measures the overhead on
simulated packs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from seqpack.core.results import Result

__all__ = [
    "DISPATCHERS",
    "HYBRIDEP_GUIDE_CHUNK",
    "HYBRIDEP_TOKEN_ALIGNMENT",
    "WIDTH_RULES",
    "DispatchWidth",
    "dispatch_width",
    "dispatcher_name",
]

#: Megatron-Core's HybridEP token alignment: its dispatch/combine kernels use 64-token chunks
#: (``megatron/core/transformer/moe/fused_a2a.py`` line 282 at d98e8a64).
HYBRIDEP_TOKEN_ALIGNMENT = 64
#: The combine chunk of the Megatron-Bridge packed-sequences guide's example (a width divisible by 128).
HYBRIDEP_GUIDE_CHUNK = 128
#: Dispatchers as seqpack names them (``flex`` resolved to its backend).
DISPATCHERS: tuple[str, ...] = ("alltoall", "allgather", "deepep", "hybridep")
WIDTH_RULES: tuple[str, ...] = ("variable", "fixed", "fixed_required", "uneven_padded", "equal_required")


def dispatcher_name(dispatcher_type: str, flex_backend: str | None) -> str:
    """``alltoall`` / ``allgather`` / ``deepep`` / ``hybridep`` from Megatron-Core's two settings.

    ``flex`` without a backend is Megatron-Core's default backend, DeepEP.
    """
    if dispatcher_type == "flex":
        return flex_backend or "deepep"
    return dispatcher_type


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class DispatchWidth(Result):
    """The width rule of one MoE configuration.

    ``width_rule``: ``variable`` (counts may differ between ranks), ``fixed`` (fixed-width packs:
    every rank dispatches ``per_rank_tokens``), ``fixed_required`` (the dispatcher needs equal
    counts but the packs are not fixed-width), ``uneven_padded`` (HybridEP pads each dispatch to
    the group maximum, rounded up to ``chunk``), ``equal_required`` (HybridEP without that padding
    and without fixed-width packs). ``width_multiple`` is the pack width that gives every rank a
    whole number of ``chunk`` tokens (HybridEP) or of tokens at all (others); ``chunk_padding``
    the tokens each dispatch of a fixed width ``W`` is padded by to reach a whole chunk.
    """

    dispatcher: str
    ep: int
    tokens_divisor: int
    width_rule: str
    reason: str
    chunk: int | None
    width_multiple: int
    fixed_width: int | None = None
    per_rank_tokens: int | None = None
    chunk_padding: int | None = None
    notes: list[str] = field(default_factory=list)
    hybridep_padding: bool | None = None

    @property
    def equal_counts(self) -> bool:
        """True when every rank of the EP group dispatches the same number of tokens."""
        return self.width_rule in ("fixed", "uneven_padded")


def dispatch_width(
    *,
    dispatcher: str,
    ep: int = 1,
    tp: int = 1,
    cp: int = 1,
    sp: bool = False,
    pad_seq_to_mult: int = 1,
    fixed_width: int | None = None,
    cuda_graphs: bool = False,
    hybridep_padding: bool | None = None,
) -> DispatchWidth:
    """Resolve the width rule (see the module docstring) of one MoE configuration.

    ``fixed_width``: the pack width when packs are fixed-width (``pad_to_max_length``), else None.
    ``hybridep_padding``: ``moe_hybridep_pad_uneven_dispatch_inputs`` (None: Megatron-Bridge's
    default, on for eager HybridEP and left off under CUDA graphs).
    """
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, got {dispatcher!r}")
    divisor = cp * (tp if sp and tp > 1 else 1)
    chunk = HYBRIDEP_TOKEN_ALIGNMENT if dispatcher == "hybridep" else None
    width_multiple = math.lcm(pad_seq_to_mult, divisor * (chunk or 1))
    notes: list[str] = []
    if fixed_width is not None:
        rule, reason = "fixed", f"fixed-width packs: every rank dispatches {fixed_width} / {divisor} tokens"
    elif dispatcher == "allgather" and ep > 1:
        rule = "fixed_required"
        reason = ("the allgather dispatcher gathers equal splits over the TP x EP group, so with EP > 1 every "
                  "rank needs the same token count: fixed-width packs")
    elif dispatcher == "hybridep":
        padding = (not cuda_graphs) if hybridep_padding is None else hybridep_padding
        notes.append(f"moe_hybridep_pad_uneven_dispatch_inputs={str(padding).lower()} (Megatron-Bridge turns it on "
                     "for packed eager configs, overriding false, and keeps the configured value under CUDA graphs; "
                     "a model built without Bridge's config validation must set it itself)")
        if padding and not cuda_graphs:
            rule = "uneven_padded"
            reason = (f"eager HybridEP pads each dispatch to the EP group's largest input, rounded up to "
                      f"{chunk} tokens, and trims it after the combine")
        elif cuda_graphs:
            rule = "fixed_required"
            reason = ("HybridEP under CUDA graphs needs equal per-rank dispatch shapes (its uneven-input "
                      "padding synchronises with the host, which capture cannot contain): fixed-width packs")
        else:
            rule = "equal_required"
            reason = ("HybridEP needs equal per-rank dispatch inputs and moe_hybridep_pad_uneven_dispatch_inputs "
                      "is off: packed THD token counts differ between ranks")
    else:
        rule = "variable"
        reason = f"the {dispatcher} dispatcher exchanges per-rank token counts; they may differ"
    per_rank = chunk_padding = None
    if fixed_width is not None:
        per_rank = -(-fixed_width // divisor)
        if fixed_width % divisor:
            notes.append(f"width {fixed_width} is not a multiple of CP*TP_sp={divisor}")
        if chunk:
            chunk_padding = _round_up(per_rank, chunk) - per_rank
            if chunk_padding:
                notes.append(
                    f"{per_rank} tokens per rank is not a multiple of HybridEP's {chunk}-token chunk: each dispatch "
                    f"carries {chunk_padding} more (a width multiple of {width_multiple} avoids it; the Bridge guide's "
                    f"{HYBRIDEP_GUIDE_CHUNK}-token combine chunk needs {math.lcm(pad_seq_to_mult, divisor * HYBRIDEP_GUIDE_CHUNK)})"
                )
    return DispatchWidth(
        dispatcher=dispatcher, ep=ep, tokens_divisor=divisor, width_rule=rule, reason=reason, chunk=chunk,
        width_multiple=width_multiple, fixed_width=fixed_width, per_rank_tokens=per_rank,
        chunk_padding=chunk_padding, notes=notes,
        hybridep_padding=((not cuda_graphs) if hybridep_padding is None else hybridep_padding)
        if dispatcher == "hybridep" else None,
    )


