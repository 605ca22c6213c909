"""``plan``: compare pack lengths at equal token slots per step by simulating the packing of your lengths."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference_impl.alignment import DEFAULT_PACK_LENGTHS
from reference_impl.arguments import positive_int
from reference_impl.choices import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LENGTH_MIXES,
    SCHEMA_OPTIONS,
    TRUNCATION_MODES,
    VISION_OPTIONS,
)
from reference_impl.config.dispatch import DISPATCHERS
from reference_impl.errors import UsageError
from reference_impl.limits import (
    MAX_CANDIDATES,
    MAX_DATA_PARALLEL_SIZE,
    MAX_INLINE_LENGTHS,
    MAX_MIX_LENGTH,
    MAX_PACK_LEN,
    MAX_PARALLEL_SIZE,
    MAX_PLAN_SAMPLES,
    MAX_SEQS_PER_PACK,
    MAX_TOKEN_SLOTS,
)
from reference_impl.reports import PackPlan
from reference_impl.verbs.common import AlignedOptions, check_choice, check_path, check_seed, int_list

__all__ = ["DEFAULT_MIX_SAMPLES", "PlanOptions", "plan"]

DEFAULT_MIX_SAMPLES = 100_000


@dataclass(frozen=True, kw_only=True)
class PlanOptions(AlignedOptions):
    """The lengths (exactly one of ``lengths``, ``histogram``, ``jsonl`` or a synthetic ``mix``), the
    candidates, token slots and DP, the topology (or an explicit ``pad_seq_to_mult``) and the packing
    settings. ``schema``, ``tokenizer`` and ``vision`` apply to ``jsonl`` (``vision``: ``auto`` counts
    the image tokens of rows with images with the ``qwen2_vl`` preset, ``none`` refuses such rows, or a
    preset name); ``n``, ``max_len`` and ``seed`` to ``mix``.
    ``moe_dispatcher`` (``alltoall``, ``allgather``, ``deepep`` or ``hybridep``) adds every row's MoE
    dispatch overhead for expert-parallel size ``ep``, with fixed-width packs when ``pad_to_max_length``.
    """

    lengths: Sequence[int] | None = None
    histogram: Mapping[Any, Any] | None = None
    jsonl: str | os.PathLike[str] | None = None
    mix: str | None = None
    n: int = DEFAULT_MIX_SAMPLES
    max_len: int = 4096
    candidates: Sequence[int] = DEFAULT_PACK_LENGTHS
    token_slots: int = 65536
    dp: int = 1
    algorithm: str = DEFAULT_ALGORITHM
    seed: int = 0
    max_seqs_per_pack: int | None = None
    truncation: str = "right"
    schema: str = "auto"
    tokenizer: Any = None
    vision: str = "auto"
    moe_dispatcher: str | None = None
    ep: int = 1
    pad_to_max_length: bool = False


def plan(options: PlanOptions) -> PackPlan:
    """The equal-token-slot plan (:func:`reference_impl.planning.plan_pack_length`) for ``options``."""
    from reference_impl.planning import plan_pack_length

    given = [n for n in ("lengths", "histogram", "jsonl", "mix") if getattr(options, n) is not None]
    if len(given) != 1:
        raise UsageError(
            f"give exactly one of lengths, histogram, jsonl or mix (got {', '.join(given) or 'none'})",
            fix="pass a list of sample lengths, a {length: count} histogram, a JSONL path or a length mix",
        )
    multiple = options.multiple()
    check_choice("algorithm", options.algorithm, ALGORITHMS)
    check_choice("truncation", options.truncation, TRUNCATION_MODES)
    check_choice("schema", options.schema, SCHEMA_OPTIONS)
    check_choice("vision", options.vision, VISION_OPTIONS)
    check_choice("moe_dispatcher", options.moe_dispatcher, DISPATCHERS, allow_none=True)
    candidates = int_list("candidates", options.candidates, maximum=MAX_PACK_LEN, most=MAX_CANDIDATES)
    lengths = options.lengths
    if lengths is not None and len(lengths) > MAX_INLINE_LENGTHS:
        raise UsageError(f"{len(lengths)} lengths given; the limit is {MAX_INLINE_LENGTHS}", field="lengths",
                         fix="pass a {length: count} histogram or a JSONL file instead")
    if options.histogram is not None and len(options.histogram) > MAX_INLINE_LENGTHS:
        raise UsageError(f"the histogram lists {len(options.histogram)} lengths; the limit is {MAX_INLINE_LENGTHS}",
                         field="histogram")
    if options.mix is not None:
        from reference_impl.data.length_mixes import sample_lengths

        check_choice("length mix", options.mix, LENGTH_MIXES)
        n = positive_int("n", options.n, maximum=MAX_PLAN_SAMPLES)
        max_len = positive_int("max_len", options.max_len, maximum=MAX_MIX_LENGTH)
        lengths = sample_lengths(options.mix, n, seed=check_seed(options.seed), max_len=max_len)
    schema = None
    vision = None
    if options.jsonl is not None:
        from reference_impl.data.vlm import resolve_vision

        check_path("jsonl", options.jsonl)
        vision = resolve_vision(options.vision, options.jsonl)
        if options.schema != "auto":
            from reference_impl.data.schemas import default_schema

            schema = default_schema(options.schema)
    return plan_pack_length(
        lengths,
        histogram=options.histogram,
        jsonl=options.jsonl,
        candidates=candidates,
        token_slots=positive_int("token_slots", options.token_slots, maximum=MAX_TOKEN_SLOTS),
        dp=positive_int("dp", options.dp, maximum=MAX_DATA_PARALLEL_SIZE),
        pad_seq_to_mult=multiple,
        algorithm=options.algorithm,
        seed=check_seed(options.seed),
        max_seqs_per_pack=positive_int("max_seqs_per_pack", options.max_seqs_per_pack, allow_none=True,
                                       maximum=MAX_SEQS_PER_PACK),
        truncation=options.truncation,
        schema=schema,
        tokenizer=options.tokenizer,
        vision=vision,
        moe_dispatcher=options.moe_dispatcher,
        ep=positive_int("ep", options.ep, maximum=MAX_PARALLEL_SIZE),
        tp=options.topology.tp,
        cp=options.topology.cp,
        sp=options.topology.sp,
        pad_to_max_length=bool(options.pad_to_max_length),
    )
