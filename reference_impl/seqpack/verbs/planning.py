"""``plan``: compare pack lengths at equal token slots per step by simulating the packing of your lengths.

The verb (:func:`plan`, :class:`PlanOptions`) and the library function behind it,
:func:`plan_pack_length`, which picks a pack length by simulating packing at equal token slots per step.

Every candidate pack length ``P`` gets the same number of token slots per optimizer step, so its
global batch size is ``token_slots / P`` packed rows (micro batch size 1). For each candidate the
plan reports:

* **validity**, with reasons: ``token_slots`` divisible by ``P``; the global batch size divisible
  by DP and at least DP (rule ``BATCH-GBS-DIVISIBLE``); ``P`` a multiple of ``pad_seq_to_mult``
  (rule ``PACK-OFFLINE-WIDTH-ALIGNED``);
* **simulated packing** of the lengths exactly as the offline pipeline treats them: a sample may
  hold at most ``cap = floor(P / m) * m`` tokens (``m = pad_seq_to_mult``); a longer one is cut to
  ``cap`` (``truncation="right"``/``"left"``) or left out (``"reject"``), and every kept length is
  rounded up to a multiple of ``m`` before bin packing with
  :func:`seqpack.packing.algorithms.pack_lengths`;
* packs, the lower bound ``ceil(aligned tokens / P)``, packing efficiency (aligned tokens per
  slot), token efficiency (real tokens kept per slot), the padding waste split into alignment
  padding and pack-tail padding, the most and mean sequences per pack, and optimizer steps per
  epoch (``packs / global batch size``).

Lengths are *runtime* lengths: the tokens a sample occupies in a pack (for JSONL input, the
tokenized ids minus one, counted by :func:`seqpack.packing.offline.prepare.sample_lengths`).

For an MoE model (``moe_dispatcher`` set) every row also carries ``dispatch``: what the token
dispatcher sends per rank under the width rules of :mod:`seqpack.config.dispatch`. A
pack reaches an MoE layer as ``width / (CP * TP_sp)`` tokens per rank, and padded positions are
dispatched like real ones. Fixed-width packs (``pad_to_max_length``, or a dispatcher that needs
equal counts) dispatch the full width; eager HybridEP pads each micro-batch to the largest one
of its EP group, rounded up to the 64-token chunk; alltoall and DeepEP send what the pack holds.
EP groups are formed from the simulated packs in a seeded shuffled order, ``ep`` at a time (the
ranks of an EP group run different packs at once). ``dispatch_padding_share`` is the share of
dispatched tokens that are not real tokens; ``dispatcher_padding_share`` the part the dispatcher
adds on top of the packs' own padding.

The recommendation rule is :data:`RECOMMENDATION_RULE`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Iterable

from seqpack.config.dispatch import DISPATCHERS, DispatchWidth, dispatch_width
from seqpack.core.alignment import (
    DEFAULT_PACK_LENGTHS,
    alignment_multiple,
    alignment_requirement,
    equal_slot_candidates,
)
from seqpack.core.arguments import positive_int
from seqpack.core.choices import ALGORITHMS, LENGTH_MIXES, LOSS_MODES, REASONING_POLICIES, TRUNCATION_MODES
from seqpack.core.errors import InputError, UsageError
from seqpack.core.limits import (
    MAX_CANDIDATES,
    MAX_DATA_PARALLEL_SIZE,
    MAX_INLINE_LENGTHS,
    MAX_MIX_LENGTH,
    MAX_PACK_LEN,
    MAX_PARALLEL_SIZE,
    MAX_PLAN_SAMPLES,
    MAX_SAMPLE_TOKENS,
    MAX_TOKEN_SLOTS,
)
from seqpack.core.reports import LengthSummary, PackPlan, PlanRow
from seqpack.core.glossary import glossary_line
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import (
    AlignedOptions,
    algorithm_option,
    max_seqs_option,
    pixels_option,
    schema_option,
    seed_option,
    template_error_option,
    tokenizer_option,
    truncation_option,
    vision_option,
)
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

if TYPE_CHECKING:
    import numpy as np

#: Two candidates whose token efficiencies differ by at most this much are tied.
TIE_TOLERANCE = 0.005
#: Per-sample cap used when tokenizing a JSONL for planning: large enough never to truncate.
_UNBOUNDED = 1 << 40

TRUNCATION_POLICIES: tuple[str, ...] = TRUNCATION_MODES

RECOMMENDATION_RULE = (
    "Among the valid candidates, those that keep every sample whole are preferred (when there is "
    "any); the highest token efficiency (real tokens per token slot) wins, candidates within "
    f"{TIE_TOLERANCE * 100:g} percentage points of the best count as tied, and a tie goes to the "
    "longest pack length (the documented starting point is 8K)."
)


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


def _int_value(value: Any) -> int | None:
    """``value`` as an int when it is an integer (or a string of digits), else None."""
    import numpy as np
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 20:
        return int(value.strip())  # longer digit strings are beyond every limit (and Python's digit cap)
    return None


def lengths_from_histogram(histogram: Mapping[Any, Any] | Iterable[Sequence[Any]]) -> np.ndarray:
    """Expand ``{length: count}`` (or ``[(length, count), ...]``) into lengths, ascending.

    Keys may be ints or strings of digits (JSON objects have string keys).
    """
    import numpy as np
    items = list(histogram.items()) if isinstance(histogram, Mapping) else list(histogram)
    lengths, counts = [], []
    for k, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InputError(f"histogram entry {k} must be a (length, count) pair, got {item!r}", field="histogram")
        length, count = _int_value(item[0]), _int_value(item[1])
        if length is None or not 1 <= length <= MAX_SAMPLE_TOKENS:
            raise InputError(f"histogram length {str(item[0])[:40]!r} must be an integer from 1 to "
                             f"{MAX_SAMPLE_TOKENS} (limit in reference_impl/seqpack/core/limits.py)",
                             field=f"histogram[{str(item[0])[:40]!r}]")
        if count is None or not 0 <= count <= MAX_PLAN_SAMPLES:
            raise InputError(
                f"histogram count for length {length} must be an integer from 0 to {MAX_PLAN_SAMPLES}, got "
                f"{str(item[1])[:40]!r}",
                field=f"histogram[{item[0]!r}]",
            )
        lengths.append(length)
        counts.append(count)
    if len(set(lengths)) != len(lengths):
        raise InputError("histogram lists a length twice", field="histogram")
    total = sum(counts)
    if total > MAX_PLAN_SAMPLES:
        raise UsageError(
            f"the histogram holds {total} samples; planning supports up to {MAX_PLAN_SAMPLES}",
            field="histogram",
            fix="scale the counts down (the plan depends on the length distribution, not its size)",
        )
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    values = np.asarray(lengths, dtype=np.int64)[order]
    reps = np.asarray(counts, dtype=np.int64)[order]
    return np.repeat(values, reps)


def _as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    import numpy as np

    from seqpack.packing.algorithms import as_length_array

    arr = as_length_array(lengths)
    if arr.size > MAX_PLAN_SAMPLES:
        raise UsageError(f"{arr.size} lengths given; planning supports up to {MAX_PLAN_SAMPLES}", field="lengths")
    zero = np.flatnonzero(arr < 1)
    if zero.size:
        raise InputError(f"lengths[{int(zero[0])}] is 0; every sample holds at least one token", row=int(zero[0]),
                         field="lengths")
    return arr


def _summary(arr: np.ndarray, source: str, details: dict[str, Any] | None) -> LengthSummary:
    import numpy as np
    if arr.size == 0:
        raise InputError(f"no sample to plan with ({source} is empty)", field=source)

    def q(x: float) -> int:
        return int(np.quantile(arr, x, method="inverted_cdf"))

    return LengthSummary(
        source=source,
        num_samples=int(arr.size),
        total_tokens=int(arr.sum()),
        min=int(arr.min()),
        mean=float(arr.mean()),
        p50=q(0.5),
        p90=q(0.9),
        p99=q(0.99),
        max=int(arr.max()),
        details=details,
    )


def _load_lengths(
    lengths: Sequence[int] | np.ndarray | None,
    histogram: Mapping[Any, Any] | Iterable[Sequence[Any]] | None,
    jsonl: str | os.PathLike[str] | None,
    schema: Any,
    tokenizer: Any,
    vision: Any = None,
    caps: Sequence[int] = (),
    truncation: str = "right",
) -> tuple[np.ndarray, LengthSummary, dict[int, Any]]:
    """The lengths and their summary, and for JSONL text rows what ``pack`` makes of them at each per-sample
    cap in ``caps`` (:func:`seqpack.packing.offline.lengths.lengths_by_cap`; empty otherwise)."""
    import numpy as np
    given = [name for name, v in (("lengths", lengths), ("histogram", histogram), ("jsonl", jsonl)) if v is not None]
    if len(given) != 1:
        raise UsageError(
            f"give exactly one of lengths, histogram or jsonl (got {', '.join(given) or 'none'})",
            fix="pass a list of sample lengths, a {length: count} histogram, or a JSONL path",
        )
    if jsonl is not None and vision is not None:
        from seqpack.data.vlm.sample import measure_vlm_file

        found = measure_vlm_file(jsonl, vision=vision, schema=schema, tokenizer=tokenizer)
        details = {"path": str(jsonl), "vlm": {"vision": vision.name, **found.to_dict()}}
        return found.lengths, _summary(found.lengths, "jsonl", details), {}
    if jsonl is not None:
        from seqpack.packing.offline.lengths import lengths_by_cap

        found, outcomes = lengths_by_cap(jsonl, caps, schema=schema, tokenizer=tokenizer, truncation=truncation)
        arr = np.asarray(found.lengths, dtype=np.int64)
        details = {"path": str(jsonl), "accounting": found.account}
        return arr, _summary(arr, "jsonl", details), outcomes
    if truncation == "oldest_turns":
        raise UsageError("oldest_turns truncation drops chat turns: it needs the rows (jsonl), not lengths",
                         field="truncation", fix="give the JSONL file, or use right or reject")
    if histogram is not None:
        arr = lengths_from_histogram(histogram)
        return arr, _summary(arr, "histogram", None), {}
    arr = _as_lengths(lengths)  # type: ignore[arg-type]
    return arr, _summary(arr, "lengths", None), {}


# ------------------------------------------------------------------------------------------------
# One candidate
# ------------------------------------------------------------------------------------------------


def _validity(pack_len: int, token_slots: int, dp: int, m: int) -> tuple[int | None, list[str]]:
    slot = equal_slot_candidates(token_slots, (pack_len,), dp)[0]
    reasons = []
    gbs: int | None = slot.global_batch_size or None
    if not slot.valid:
        rule = "" if gbs is None else "[BATCH-GBS-DIVISIBLE] "
        reasons.append(rule + slot.reason)
    if pack_len % m:
        reasons.append(
            f"[PACK-OFFLINE-WIDTH-ALIGNED] pack_size {pack_len} is not a multiple of pad_seq_to_mult={m}"
        )
    return gbs, reasons


def _round_up(values: np.ndarray, multiple: int) -> np.ndarray:
    return -(-values // multiple) * multiple


def dispatch_overhead(
    real: np.ndarray, aligned: np.ndarray, pack_len: int, width: DispatchWidth, seed: int = 0
) -> dict[str, Any]:
    """Tokens dispatched per rank for packs holding ``real`` real and ``aligned`` aligned tokens (see module doc)."""
    import numpy as np
    div = width.tokens_divisor
    real = np.asarray(real, dtype=np.int64)
    fixed = width.width_rule in ("fixed", "fixed_required", "equal_required")
    widths = np.full(real.shape, pack_len, dtype=np.int64) if fixed else np.asarray(aligned, dtype=np.int64)
    per_rank = -(-widths // div)
    sent = per_rank.copy()
    if width.chunk:
        sent = _round_up(per_rank, width.chunk)
        if width.width_rule == "uneven_padded" and sent.size:
            order = np.random.default_rng(seed).permutation(sent.size)
            for start in range(0, sent.size, width.ep):
                group = order[start : start + width.ep]
                sent[group] = sent[group].max()
    dispatched, packed, kept = int(sent.sum()), int(per_rank.sum()), float(real.sum()) / div
    out: dict[str, Any] = {
        **{k: v for k, v in width.to_dict().items() if k not in ("fixed_width", "per_rank_tokens", "chunk_padding")},
        "micro_batches": int(sent.size),
        "mean_dispatched_per_rank": dispatched / sent.size if sent.size else 0.0,
        "max_dispatched_per_rank": int(sent.max()) if sent.size else 0,
        "dispatch_padding_share": 1.0 - kept / dispatched if dispatched else 0.0,
        "dispatcher_padding_share": (dispatched - packed) / dispatched if dispatched else 0.0,
    }
    if width.width_rule in ("fixed_required", "equal_required"):
        out["notes"] = [*out["notes"], "this dispatcher needs fixed-width packs here; shown as if pad_to_max_length "
                        "were on"]
    return out


def _simulate(
    arr: np.ndarray,
    pack_len: int,
    token_slots: int,
    dp: int,
    m: int,
    truncation: str,
    algorithm: str,
    seed: int,
    max_seqs_per_pack: int | None,
    moe: Mapping[str, Any] | None = None,
    outcome: Any = None,
) -> PlanRow:
    import numpy as np

    from seqpack.packing.algorithms import pack_lengths

    gbs, reasons = _validity(pack_len, token_slots, dp, m)
    cap = (pack_len // m) * m
    over = arr > cap
    too_long = int(over.sum())
    notes: list[str] = []
    accounting = None
    if outcome is not None:  # JSONL rows: what pack does at this cap, row by row
        kept = np.asarray(outcome.lengths, dtype=np.int64)
        accounting = outcome.account
        truncated, rejected = int(outcome.truncated), int(arr.size - kept.size)
        tokens_lost = int(arr.sum() - kept.sum())
        if too_long:
            left = {k: v["count"] for k, v in accounting["skipped"].items()}
            notes.append(f"{too_long} sample(s) longer than {cap} tokens: {truncated} cut by truncation={truncation}, "
                         f"{rejected} left out" + (f" (pack skips {', '.join(f'{k}={v}' for k, v in left.items())})"
                                                    if left else ""))
    elif truncation == "reject":
        kept = arr[~over]
        rejected, truncated = too_long, 0
        tokens_lost = int(arr[over].sum())
    else:
        kept = np.minimum(arr, cap)
        rejected, truncated = 0, too_long
        tokens_lost = int((arr[over] - cap).sum())
    aligned = -(-kept // m) * m
    if too_long and outcome is None:
        verb = "left out" if truncation == "reject" else f"cut to {cap} tokens"
        notes.append(f"{too_long} sample(s) longer than {cap} tokens would be {verb}")
    dispatch = None
    if aligned.size:
        result = pack_lengths(aligned, pack_len, algorithm, seed=seed, max_seqs_per_pack=max_seqs_per_pack)
        packs, lower = result.num_bins, result.lower_bound
        max_in_pack = result.max_items_per_bin
        if moe is not None:
            real_per_pack = np.bincount(result.bin_ids, weights=kept, minlength=packs).astype(np.int64)
            width = dispatch_width(
                dispatcher=moe["dispatcher"], ep=moe["ep"], tp=moe["tp"], cp=moe["cp"], sp=moe["sp"],
                pad_seq_to_mult=m, fixed_width=pack_len if moe["pad_to_max_length"] else None,
            )
            dispatch = dispatch_overhead(real_per_pack, np.asarray(result.bin_sums), pack_len, width, seed)
    else:
        packs = lower = max_in_pack = 0
        notes.append("no sample fits this pack length")
    slots = packs * pack_len
    real, padded = int(kept.sum()), int(aligned.sum())
    steps = full = None
    if gbs is not None:
        steps, full = packs / gbs, packs // gbs
        if packs < gbs:
            notes.append(
                f"{packs} pack(s) fill less than one global batch of {gbs}: under one optimizer step per epoch"
            )
    return PlanRow(
        pack_size=pack_len,
        global_batch_size=gbs,
        token_slots=token_slots,
        valid=not reasons,
        reasons=reasons,
        sample_cap=cap,
        too_long=too_long,
        truncated=truncated,
        rejected=rejected,
        tokens_lost=tokens_lost,
        packed_samples=int(kept.size),
        packs=packs,
        lower_bound=lower,
        packs_over_lower_bound=packs - lower,
        packing_efficiency=padded / slots if slots else 0.0,
        token_efficiency=real / slots if slots else 0.0,
        padding_waste_share=(slots - real) / slots if slots else 0.0,
        alignment_padding_share=(padded - real) / slots if slots else 0.0,
        tail_padding_share=(slots - padded) / slots if slots else 0.0,
        max_seqs_in_pack=max_in_pack,
        mean_seqs_per_pack=kept.size / packs if packs else 0.0,
        steps_per_epoch=steps,
        full_steps_per_epoch=full,
        notes=notes,
        dispatch=dispatch,
        accounting=accounting,
    )


def recommend(rows: Sequence[PlanRow]) -> tuple[int | None, str]:
    """Apply :data:`RECOMMENDATION_RULE`: the recommended pack size (or None) and why."""
    valid = [r for r in rows if r.valid]
    if not valid:
        why = "; ".join(f"{r.pack_size}: {', '.join(r.reasons)}" for r in rows)
        return None, f"no candidate is valid ({why})"
    whole = [r for r in valid if r.too_long == 0]
    pool = whole or valid
    best = max(r.token_efficiency for r in pool)
    tied = [r for r in pool if r.token_efficiency >= best - TIE_TOLERANCE]
    pick = max(tied, key=lambda r: r.pack_size)
    text = (
        f"pack_size {pick.pack_size} (global batch size {pick.global_batch_size}): "
        f"token efficiency {pick.token_efficiency:.1%}"
    )
    others = [r.pack_size for r in tied if r is not pick]
    if others:
        text += (
            f", tied with {', '.join(map(str, others))} within {TIE_TOLERANCE * 100:g} points, "
            "so the longer pack wins"
        )
    if not whole:
        text += "; every valid candidate truncates or drops some samples, consider a longer pack length"
    elif len(whole) < len(valid):
        skipped = [r.pack_size for r in valid if r.too_long]
        text += f"; {', '.join(map(str, skipped))} would cut or drop samples"
    return pick.pack_size, text


# ------------------------------------------------------------------------------------------------
# The verb
# ------------------------------------------------------------------------------------------------


def plan_pack_length(
    lengths: Sequence[int] | np.ndarray | None = None,
    *,
    histogram: Mapping[Any, Any] | Iterable[Sequence[Any]] | None = None,
    jsonl: str | os.PathLike[str] | None = None,
    candidates: Sequence[int] = DEFAULT_PACK_LENGTHS,
    token_slots: int = 65536,
    dp: int = 1,
    pad_seq_to_mult: int = 1,
    algorithm: str = "best_fit_decreasing",
    seed: int = 0,
    max_seqs_per_pack: int | None = None,
    truncation: str = "right",
    schema: Any = None,
    tokenizer: Any = None,
    vision: Any = None,
    moe_dispatcher: str | None = None,
    ep: int = 1,
    tp: int = 1,
    cp: int = 1,
    sp: bool = False,
    pad_to_max_length: bool = False,
    eval_cp: int | None = None,
) -> PackPlan:
    """Equal-token-slot table of candidate pack lengths with simulated packing and a recommendation.

    Give exactly one of ``lengths`` (runtime lengths), ``histogram`` (``{length: count}``) or
    ``jsonl`` (a JSONL file or blend manifest, tokenized with ``schema``/``tokenizer`` like the
    offline pipeline). With ``vision`` (a :class:`~seqpack.data.vlm.vision.VisionSpec`) the
    JSONL rows are VLM samples: lengths count their image tokens (``lengths.details["vlm"]`` says
    how many), and since a VLM sample is never cut, truncation is ``reject``. See the module
    docstring for every column and :data:`RECOMMENDATION_RULE`.
    ``moe_dispatcher`` (one of ``alltoall``, ``allgather``, ``deepep``, ``hybridep``) with ``ep``,
    ``tp``, ``cp``, ``sp`` and ``pad_to_max_length`` adds the MoE dispatch overhead to every row. The plan's
    ``alignment`` says whether ``pad_seq_to_mult`` is the recommended value of ``tp``/``cp``/``sp``/``eval_cp``
    (offline path) or another one, beside the required minimum.

    >>> plan_pack_length([5, 3, 3, 2, 7], candidates=(8, 16), token_slots=32).recommended_pack_size
    8
    """
    token_slots = positive_int("token_slots", token_slots)
    dp = positive_int("dp", dp)
    m = positive_int("pad_seq_to_mult", pad_seq_to_mult)
    if truncation not in TRUNCATION_POLICIES:
        raise UsageError(
            f"unknown truncation {truncation!r}; choose one of {', '.join(TRUNCATION_POLICIES)}", field="truncation"
        )
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown packing algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}",
                         field="algorithm")
    if max_seqs_per_pack is not None:
        max_seqs_per_pack = positive_int("max_seqs_per_pack", max_seqs_per_pack)
    cands = [positive_int("candidates", c) for c in candidates]
    if not cands:
        raise UsageError("give at least one candidate pack length", field="candidates")
    if len(set(cands)) != len(cands):
        raise UsageError(f"candidate pack lengths repeat: {cands}", field="candidates")
    small = [c for c in cands if c < m]
    if small:
        raise UsageError(
            f"candidate pack length {small[0]} is smaller than pad_seq_to_mult={m}; no sample would fit",
            field="candidates",
        )
    if vision is not None and jsonl is not None:
        truncation = "reject"  # a VLM sample is never cut (its image tokens would lose their patches)
    moe = None
    if moe_dispatcher is not None:
        if moe_dispatcher not in DISPATCHERS:
            raise UsageError(f"unknown MoE dispatcher {moe_dispatcher!r}; choose one of {', '.join(DISPATCHERS)}",
                             field="moe_dispatcher")
        moe = {"dispatcher": moe_dispatcher, "ep": positive_int("ep", ep), "tp": positive_int("tp", tp),
               "cp": positive_int("cp", cp), "sp": bool(sp), "pad_to_max_length": bool(pad_to_max_length)}
    caps = sorted({(c // m) * m for c in cands})
    arr, summary, outcomes = _load_lengths(lengths, histogram, jsonl, schema, tokenizer, vision, caps, truncation)
    rows = [
        _simulate(arr, c, token_slots, dp, m, truncation, algorithm, seed, max_seqs_per_pack, moe,
                  outcomes.get((c // m) * m))
        for c in sorted(cands)
    ]
    pick, text = recommend(rows)
    req = alignment_requirement("offline", tp, cp, sp, eval_cp)
    alignment = {"reports": "recommended" if m == req.recommended else "given", "required": req.required,
                 "required_width": req.required_width, "recommended": req.recommended}
    suggestions = [] if pick is not None else slot_suggestions(sorted(cands), token_slots, dp, m)
    if suggestions:
        text += "; " + suggestion_text(suggestions, dp)
    return PackPlan(
        rows=rows,
        recommended_pack_size=pick,
        recommendation=text,
        rule=RECOMMENDATION_RULE,
        lengths=summary,
        token_slots=token_slots,
        dp=dp,
        pad_seq_to_mult=m,
        algorithm=algorithm,
        seed=int(seed),
        max_seqs_per_pack=max_seqs_per_pack,
        truncation=truncation,
        moe=moe,
        alignment=alignment,
        suggestions=suggestions,
    )


def slot_suggestions(candidates: Sequence[int], token_slots: int, dp: int, m: int) -> list[dict[str, Any]]:
    """For each candidate pack size a multiple of ``m``: the token-slot counts nearest ``token_slots`` (one below
    when there is one, one above) whose global batch size is a whole multiple of ``dp``."""
    out = []
    for size in candidates:
        if size % m:
            continue
        unit = size * dp  # the slots of one pack per DP rank
        below, above = (token_slots // unit) * unit, -(-token_slots // unit) * unit
        for slots in dict.fromkeys(v for v in (below, above) if v >= unit):
            out.append({"pack_size": size, "token_slots": slots, "global_batch_size": slots // size})
    return out


def suggestion_text(suggestions: Sequence[Mapping[str, Any]], dp: int) -> str:
    """The suggestions in words."""
    parts = [f"--token-slots {s['token_slots']} (GBS {s['global_batch_size']} at {s['pack_size']})"
             for s in suggestions]
    return f"for DP={dp} try " + ", ".join(parts)


__all__ = [
    "DEFAULT_MIX_SAMPLES", "PLAN", "PlanOptions", "plan", "render_plan",
    "MAX_PLAN_SAMPLES",
    "dispatch_overhead",
    "RECOMMENDATION_RULE",
    "TIE_TOLERANCE",
    "LengthSummary",
    "alignment_multiple",
    "PackPlan",
    "PlanRow",
    "lengths_from_histogram",
    "plan_pack_length",
    "recommend",
]


DEFAULT_MIX_SAMPLES = 100_000
_SOURCE = "source"  # the CLI group of the four ways to give lengths


@verb_options
class PlanOptions(AlignedOptions):
    """The lengths (exactly one of ``lengths``, ``histogram``, ``jsonl`` or a synthetic ``mix``), the
    candidates, token slots and DP, the topology (or an explicit ``pad_seq_to_mult``) and the packing
    settings. ``schema``, ``tokenizer`` and ``vision`` apply to ``jsonl`` (``vision``: ``auto`` counts
    the image tokens of rows with images with the ``qwen2_vl`` preset, ``none`` refuses such rows, or a
    preset name); ``n``, ``max_len`` and ``seed`` to ``mix``.
    ``moe_dispatcher`` (``alltoall``, ``allgather``, ``deepep`` or ``hybridep``) adds every row's MoE
    dispatch overhead for expert-parallel size ``ep``, with fixed-width packs when ``pad_to_max_length``.
    """

    lengths: Sequence[int] | None = option(
        None, help="sample lengths in tokens (CLI: comma-separated, e.g. 900,300,1500)", exclusive=_SOURCE,
        item_minimum=1, item_maximum=MAX_SAMPLE_TOKENS, max_items=MAX_INLINE_LENGTHS, check_items=False,
        fix="pass a {length: count} histogram or a JSONL file instead")
    histogram: Mapping[Any, Any] | None = option(
        None, help='sample counts by length, e.g. {"512": 1200, "3000": 40}', cli=False, key_minimum=1,
        key_maximum=MAX_SAMPLE_TOKENS, item_minimum=0, item_maximum=MAX_PLAN_SAMPLES, max_items=MAX_INLINE_LENGTHS)
    jsonl: str | os.PathLike[str] | None = option(
        None, help="JSONL or Parquet file, a datasets folder (or a blend manifest) tokenized like `seqpack pack` does",
        path="inputs",
        exclusive=_SOURCE)
    mix: str | None = option(None, help="a synthetic length mix (with n, max_len, seed)", choices=LENGTH_MIXES,
                             label="length mix", exclusive=_SOURCE)
    n: int = option(DEFAULT_MIX_SAMPLES, help="samples drawn from mix", minimum=1, maximum=MAX_PLAN_SAMPLES)
    max_len: int = option(4096, help="longest sample mix draws", minimum=1, maximum=MAX_MIX_LENGTH)
    candidates: Sequence[int] = option(DEFAULT_PACK_LENGTHS, help="pack sizes to compare (default 2048,4096,8192)",
                                       item_minimum=1, item_maximum=MAX_PACK_LEN, min_items=1,
                                       max_items=MAX_CANDIDATES)
    token_slots: int = option(65536, help="token slots per optimizer step", minimum=1, maximum=MAX_TOKEN_SLOTS)
    dp: int = option(1, help="data-parallel size", minimum=1, maximum=MAX_DATA_PARALLEL_SIZE)
    algorithm: str = algorithm_option()
    seed: int = seed_option(0, "seed of mix and of first_fit_shuffle")
    max_seqs_per_pack: int | None = max_seqs_option()
    truncation: str = truncation_option()
    schema: str = schema_option(help="row schema of jsonl")
    loss_mode: str | None = option(None, help="with jsonl: completion|full (prompt/completion), assistant|last_turn|full "
                                   "(chat), as pack takes it (a row that trains nothing is left out)", choices=LOSS_MODES)
    reasoning: str | None = option(None, help="with jsonl, chat only: train (default) or mask the reasoning of assistant "
                                   "turns, as pack takes it", choices=REASONING_POLICIES)
    on_template_error: str = template_error_option()
    tokenizer: Any = tokenizer_option()
    vision: str = vision_option("with jsonl: rows with images count their image tokens (auto: the qwen2_vl preset "
                                "when the file has images; none refuses them); see docs/vlm.md")
    min_pixels: int | None = pixels_option("min")
    max_pixels: int | None = pixels_option("max")
    moe_dispatcher: str | None = option(None, help="an MoE model's token dispatcher: add its dispatch padding "
                                        "overhead to every row", choices=DISPATCHERS)
    ep: int = option(1, help="expert-parallel size, with moe_dispatcher", minimum=1, maximum=MAX_PARALLEL_SIZE)
    pad_to_max_length: bool = option(False, help="fixed-width packs (every pack pack_size wide), with "
                                     "moe_dispatcher")


def plan(options: PlanOptions) -> PackPlan:
    """The equal-token-slot plan (:func:`seqpack.verbs.planning.plan_pack_length`) for ``options``."""
    check_options(options)
    given = [n for n in ("lengths", "histogram", "jsonl", "mix") if getattr(options, n) is not None]
    if len(given) != 1:
        raise UsageError(
            f"give exactly one of lengths, histogram, jsonl or mix (got {', '.join(given) or 'none'})",
            fix="pass a list of sample lengths, a {length: count} histogram, a JSONL path or a length mix",
        )
    multiple = options.multiple()
    lengths = options.lengths
    if options.mix is not None:
        from seqpack.data.length_mixes import sample_lengths

        lengths = sample_lengths(options.mix, options.n, seed=options.seed, max_len=options.max_len)
    schema = None
    vision = None
    if options.jsonl is not None:
        from seqpack.data.detect import schema_for_file
        from seqpack.data.vlm.sample import resolve_vision
        from seqpack.verbs.packing import first_source

        vision = resolve_vision(options.vision, options.jsonl, min_pixels=options.min_pixels,
                                max_pixels=options.max_pixels)
        schema = schema_for_file(options.schema, first_source(options.jsonl), loss_mode=options.loss_mode,
                                 reasoning=options.reasoning, on_template_error=options.on_template_error)
    result = plan_pack_length(
        lengths, histogram=options.histogram, jsonl=options.jsonl, candidates=tuple(options.candidates),
        token_slots=options.token_slots, dp=options.dp, pad_seq_to_mult=multiple, algorithm=options.algorithm,
        seed=options.seed, max_seqs_per_pack=options.max_seqs_per_pack, truncation=options.truncation,
        schema=schema, tokenizer=options.tokenizer, vision=vision, moe_dispatcher=options.moe_dispatcher,
        ep=options.ep, tp=options.topology.tp, cp=options.topology.cp, sp=options.topology.sp,
        pad_to_max_length=bool(options.pad_to_max_length), eval_cp=options.topology.eval_cp,
    )
    if options.jsonl is None:
        return result
    from dataclasses import replace

    from seqpack.data.tokenizers import byte_tokenizer_warning, tokenizer_label

    kind = schema.kind if schema is not None else _detected_kind(options.jsonl)
    warning = byte_tokenizer_warning(options.tokenizer, kind)
    return replace(result, tokenizer=tokenizer_label(options.tokenizer), warnings=[warning] if warning else [])


def _detected_kind(jsonl: Any) -> str | None:
    """The row schema of the first row of the JSONL (or of a blend's first source)."""
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.schemas import detect_schema
    from seqpack.data.vlm.sample import normalize_visual_row
    from seqpack.verbs.packing import first_source

    source = first_source(jsonl)
    if source is None:
        return None
    with JsonlFile(source) as jf:
        return detect_schema(normalize_visual_row(jf.row(0))[0]) if len(jf) else None


# ------------------------------------------------------------------------------------------------
# The CLI's view
# ------------------------------------------------------------------------------------------------


def _alignment_note(plan: PackPlan) -> str:
    a = plan.alignment
    if not a:
        return ""
    if a["reports"] == "given":  # an explicit value (or one that is not the recommended value of tp/cp/sp)
        return f" (given; required {a['required']}, recommended {a['recommended']})"
    return f" (recommended; required {a['required']})"


def render_plan(plan: PackPlan, options: PlanOptions) -> str:
    """The CLI's text: the lengths, the table (the recommended size starred), reasons, notes and the verdict."""
    s = plan.lengths
    origin = f"--mix {options.mix} (seed {options.seed})" if options.mix else s.source
    out = [f"{s.num_samples} samples from {origin}, {s.total_tokens} tokens; length min {s.min} / p50 {s.p50} / "
           f"p99 {s.p99} / max {s.max}; pad_seq_to_mult={plan.pad_seq_to_mult}{_alignment_note(plan)}, token slots "
           f"{plan.token_slots}, DP={plan.dp}"]
    if plan.tokenizer is not None:
        out.append(f"tokenizer: {plan.tokenizer}; truncation: {plan.truncation}")
    vlm = (s.details or {}).get("vlm")
    if vlm:
        out.append(f"VLM rows ({vlm['vision']} preset): {vlm['rows_with_visuals']} of {vlm['samples']} samples carry "
                   f"{vlm['images']} image(s) and {vlm['videos']} video(s), {vlm['vision_tokens']} image tokens "
                   f"({vlm['vision_token_share']:.1%} of all tokens); VLM samples are never cut (truncation reject)")
    acc = (s.details or {}).get("accounting")
    if acc:
        skipped = ", ".join(f"{k}={v['count']} (first at line {v['examples'][0]['line']})" if v["examples"]
                            else f"{k}={v['count']}" for k, v in acc["skipped"].items())
        out.append(f"rows: {acc['rows_in']} read, {acc['packed']} measured whole, {acc['skipped_total']} skipped at "
                   "any size" + (f" ({skipped})" if skipped else "") + "; what pack does at each size is in the "
                   "rows below")
    rows = [[f"{r.pack_size}{'*' if r.pack_size == plan.recommended_pack_size else ''}",
             r.global_batch_size if r.global_batch_size is not None else "-", "yes" if r.valid else "no", r.packs,
             r.lower_bound, f"{r.token_efficiency:.2%}", f"{r.alignment_padding_share:.2%}",
             f"{r.tail_padding_share:.2%}", r.max_seqs_in_pack, r.too_long,
             f"{r.full_steps_per_epoch} ({r.steps_per_epoch:.2f})" if r.steps_per_epoch is not None else "-"]
            for r in plan.rows]
    out.append(text_table(["pack_size", "GBS", "valid", "packs", "lower bound", "token eff", "align pad", "tail pad",
                           "max seqs", "too long", "full steps/epoch"], rows))
    out += [f"  {r.pack_size}: {line}" for r in plan.rows for line in r.reasons + r.notes]
    out += [f"  {r.pack_size}: as pack: {_accounting_words(r.accounting)}" for r in plan.rows if r.accounting]
    if plan.moe is not None:
        out.append(_render_dispatch(plan))
    verdict = "recommended" if plan.recommended_pack_size is not None else "no recommendation"
    out += [f"{verdict}: {plan.recommendation}", f"rule: {plan.rule}",
            glossary_line("token efficiency", "alignment padding", "tail padding", "steps per epoch")]
    out += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(out)


def _accounting_words(acc: Mapping[str, Any]) -> str:
    skipped = ", ".join(f"{k}={v['count']}" for k, v in acc["skipped"].items())
    return (f"{acc['packed']} packed, {acc['truncated']} truncated, {acc['skipped_total']} skipped"
            + (f" ({skipped})" if skipped else ""))


def _render_dispatch(plan: PackPlan) -> str:
    moe = plan.moe or {}
    rows = [[r.pack_size, d["width_rule"], d["tokens_divisor"], f"{d['mean_dispatched_per_rank']:.1f}",
             d["max_dispatched_per_rank"], f"{d['dispatch_padding_share']:.2%}", f"{d['dispatcher_padding_share']:.2%}"]
            for r in plan.rows if (d := r.dispatch) is not None]
    out = [f"MoE dispatch ({moe['dispatcher']}, EP={moe['ep']}, "
           f"{'fixed-width' if moe['pad_to_max_length'] else 'variable-width'} packs):",
           text_table(["pack_size", "width rule", "CP*TP_sp", "mean/rank", "max/rank", "dispatched padding",
                       "added by dispatcher"], rows)]
    out += [f"  {r.pack_size}: {line}" for r in plan.rows if r.dispatch is not None for line in r.dispatch["notes"]]
    return "\n".join(out)


PLAN = Verb(
    name="plan", options=PlanOptions, function=plan, render=render_plan, required_groups=(_SOURCE,),
    exit_code=lambda plan, options: 0 if plan.recommended_pack_size is not None else 1,
    help="simulate packing at several pack sizes (equal token slots per step) and recommend one",
    tools=(Tool(
        "plan_pack_length", title="Plan the pack length (equal token slots per step)", job=True,
        description="""Compare candidate pack sizes at equal token slots per step and recommend one.

Give exactly one of lengths, histogram, jsonl_path or mix. With jsonl_path pass the model's
tokenizer folder as tokenizer_path (else lengths are bytes, 3-5x a real tokenizer's; warnings say
so) and the same truncation, loss_mode and reasoning as pack_dataset will get: every row is then
tokenized, truncated and skipped exactly as pack_dataset would at each size (rows[].accounting).
When no candidate fits dp, suggestions gives token slots that do. Each candidate gets global batch
size = token_slots / pack_size, a validity check (slots divisible, GBS divisible by DP and
>= DP, pack_size a multiple of pad_seq_to_mult) and a simulated packing of the aligned
lengths: packs, lower bound, token efficiency, padding waste, sequences per pack, samples
too long, optimizer steps per epoch. The rule behind the recommendation is returned too.
With moe_dispatcher, each row also gives the MoE dispatch width rule and the share of
dispatched tokens that are padding. recommended_pack_size is the pick (recommended_pack_len,
the same value under its old name, is deprecated). pad_seq_to_mult is the recommended value of
tp/cp/sp unless given; alignment says which, beside the required minimum of the offline path.""",
    ),),
)
