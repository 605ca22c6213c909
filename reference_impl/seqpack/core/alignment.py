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

Two numbers, per packing path and per Megatron-Bridge version (:func:`alignment_requirement`):

* **required**: the per-sequence multiple that version needs to train correctly (what it derives and
  checks, or what fails later on the GPU when it is missing), with the upstream citation;
* **recommended**: the skill's formula, :func:`derive_alignment` (``lcm(2*CP or 1, CP*TP under SP)`` over
  the train and eval CP sizes), or the path's own formula where upstream derives a different one
  (global-batch packing under Bridge main follows PR #6127's product ``2*CP*TP``).

Every face (``align``, ``validate``, ``plan``, ``pack``, ``inspect``, the MCP tools, the skill and the
eval ground truth) reads these two numbers from here and says which one it reports.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.core.evidence import (
    MLM_DEV,
    UpstreamCheck,
    bridge,
    bridge_main,
    mcore,
    mcore_main,
    sp_scatter,
    te_partition,
)
from seqpack.core.limits import MAX_PAD_SEQ_TO_MULT, MAX_PARALLEL_SIZE
from seqpack.core.results import Result
from seqpack.core.versions import (
    BRIDGE_MAIN_COMMIT,
    BRIDGE_PACKAGE,
    BRIDGE_RELEASE,
    DEFAULT_BRIDGE_TARGET,
    MCORE_PACKAGE,
    resolve_target,
)


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
    """The per-sequence multiple to use for offline packs: ``pad_seq_to_mult`` when given, else the recommended one.

    Every verb that takes both resolves them here, so no face can write packs the topology breaks. An
    explicit value must be a multiple of the *required* minimum (:func:`alignment_requirement`, offline:
    2*CP over train and eval CP; rule ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``); a value that only misses the
    *recommended* sequence-parallel term is used with a logged warning (``PACK-OFFLINE-PAD-MULT-RECOMMENDED``).

    >>> alignment_multiple(None, tp=4, cp=2, sp=True), alignment_multiple(16, tp=4, cp=2, sp=True)
    (8, 16)
    """
    req = alignment_requirement("offline", tp, cp, sp, eval_cp)
    recommended, required = int(req.recommended), int(req.required)
    if pad_seq_to_mult is None:
        return recommended
    pad = positive_int("pad_seq_to_mult", pad_seq_to_mult, maximum=MAX_PAD_SEQ_TO_MULT)
    if pad % required:
        raise UsageError(
            f"pad_seq_to_mult={pad} is not a multiple of {required}, which context parallelism requires "
            f"({req.required_reason})",
            rule_id="PACK-OFFLINE-PAD-MULT-TOPOLOGY",
            field="pad_seq_to_mult",
            fix=f"use pad_seq_to_mult={recommended} (the recommended value, or another multiple of {required}), or "
                "leave it out to derive it",
        )
    if pad % recommended:
        logging.getLogger(__name__).warning(
            "[PACK-OFFLINE-PAD-MULT-RECOMMENDED] pad_seq_to_mult=%d meets the required %d but not the recommended %d "
            "(%s)", pad, required, recommended, req.recommended_reason,
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


# ------------------------------------------------------------------------------------------------
# required vs recommended, per packing path and Megatron-Bridge version

#: The packing paths an alignment requirement is stated for (the packing-path registry's names).
ALIGNMENT_PATHS: tuple[str, ...] = ("offline", "in_batch", "energon", "global_batch")

_TE_2CP = te_partition(
    "Transformer Engine's THD context-parallel partition asserts every physical sequence length (every "
    "cu_seqlens_padded entry, the trailing width padding included) is divisible by 2*CP; reached from "
    "megatron-core's per-document CP split and Megatron-Bridge's get_thd_cp_partition_indices"
)
_MCORE_CP_SPLIT = mcore(
    "megatron/core/utils.py", 2441, "thd_get_partitioned_indices",
    "the per-document CP split hands the padded boundaries to Transformer Engine's partition kernel", kind="kernel")
_SP_WIDTH = sp_scatter(
    "under sequence parallelism the tokens a CP rank holds (row width / CP) are split across TP ranks: the row "
    "width must be a multiple of CP*TP (a row-width constraint, not a per-sequence one)")
_SEQ_2CP = bridge("training/config.py", 1436, "context_parallel_size * 2",
                  "ConfigContainer.validate asserts seq_length is divisible by 2*CP when CP > 1")
_OFFLINE_ONLY_POSITIVE = bridge(
    "data/packing/config.py", 47, "pad_seq_to_mult",
    "offline packing checks only pad_seq_to_mult > 0: the CP and SP multiples are never derived or checked there")
_COLLATE_MULTIPLE = bridge(
    "training/config.py", 1220, "collate_padding_multiple",
    "ConfigContainer.validate derives lcm(2*CP or 1, CP*TP under SP) over the train and eval CP sizes and rejects a "
    "Direct-HF/Energon/MockVLM seq_length that is not a multiple of it")
_COLLATE_ASSIGNED = bridge(
    "training/config.py", 1239, "in_batch_packing_pad_to_multiple_of",
    "with in-batch packing on, the derived multiple overwrites in_batch_packing_pad_to_multiple_of (a user value "
    "is discarded)")
_COLLATE_MAIN = bridge_main(
    "training/config.py", 1367, "collate_padding_multiple",
    "main derives the same lcm; GPT-SFT in-batch packing (PR #5493) and Energon native packing join the check")
_GLOBAL_PRODUCT = UpstreamCheck(
    "megatron-bridge", "", "src/megatron/bridge/data/packing/global_batch.py", 0,
    "global_batch_packing_padding_multiple",
    "global-batch packing pads every sample to (2*CP when CP > 1, else 1) times TP under SP (2*DP*CP times TP "
    "under SP with dynamic CP): the rule of Megatron-LM dev's SFTDataset._calculate_padding_divisor",
    "documented", "PR #6127")
_MLM_DEV_DIVISOR = mcore_main(
    "megatron/training/datasets/sft_dataset.py", 92, "_calculate_padding_divisor",
    "Megatron-LM dev pads every SFT sequence to cp_pad * tp_pad (cp_pad = 2*CP, or 2*DP*CP under dynamic CP; "
    "tp_pad = TP under SP)", ref=MLM_DEV, kind="runtime")

#: What each version lacks, per path (the path is then not available there).
_UNAVAILABLE: dict[tuple[str, str], str] = {
    ("energon", BRIDGE_RELEASE): f"Energon native packing (packing_buffer_size) is not in megatron-bridge "
    f"{BRIDGE_RELEASE}; Bridge main has it",
    ("global_batch", BRIDGE_RELEASE): f"global-batch packing is in no Megatron-Bridge release ({BRIDGE_PACKAGE} "
    f"has no enable_global_batch_packing, {MCORE_PACKAGE} no DpBalancedScheduler); PR #6127 (open) adds it",
}

#: The two dynamic-CP designs upstream has not settled between (both unmerged when read).
DYNAMIC_CP_DESIGNS = (
    "provisional: two dynamic-CP designs compete upstream, neither merged: Megatron-Bridge PR #6127 (unpacked "
    "samples scheduled by Megatron-Core, MBS 1, every sample padded to 2*DP*CP, times TP under SP) and DCP V2 "
    "with Megatron-LM PR #7045 (re-splits already packed THD rows; every physical length divisible by 2 x the "
    "runtime CP size)"
)


@dataclass(frozen=True)
class AlignmentRequirement(Result):
    """What one packing path needs on one Megatron-Bridge version (:func:`alignment_requirement`).

    ``required``: the per-sequence physical-length multiple that version needs to train correctly;
    ``required_width``: the multiple the row width (a fixed pack width, ``seq_length``) needs;
    ``recommended``: the value to use (the skill's formula, or the path's upstream formula);
    ``enforced``: ``bridge`` (Bridge derives or checks it at start-up), ``runtime`` (nothing checks it
    before a kernel fails on the GPU), or ``unavailable`` (the path is not in that version, every
    number is None). ``provisional``: upstream has not settled the rule (dynamic CP). ``citations``
    name the upstream places, each with its version or pull request.
    """

    path: str
    bridge_version: str
    tp: int
    cp: int
    sp: bool
    eval_cp: int | None
    dp: int | None
    dynamic_cp: bool
    available: bool
    required: int | None
    required_width: int | None
    recommended: int | None
    enforced: str
    provisional: bool
    required_reason: str
    recommended_reason: str
    citations: tuple[UpstreamCheck, ...]

    def alignment(self) -> Alignment:
        """The :class:`Alignment` of the recommended value (what the path's builders pad to)."""
        al = derive_alignment(self.tp, self.cp, self.sp, self.eval_cp)
        if self.recommended is None or self.recommended == al.pad_seq_to_mult:
            return al
        return Alignment(tp=al.tp, cp=al.cp, sp=al.sp, eval_cp=al.eval_cp, cp_multiple=al.cp_multiple,
                         sp_multiple=al.sp_multiple, pad_seq_to_mult=self.recommended,
                         seq_length_multiple=self.recommended, explanation=self.recommended_reason)

    def summary(self) -> str:
        """One line: ``required 4 (...), recommended 8 (...)`` (or why the path is unavailable)."""
        if not self.available:
            return f"{self.path} on Megatron-Bridge {self.bridge_version}: unavailable ({self.required_reason})"
        return (f"required {self.required} (what Megatron-Bridge {self.bridge_version} needs; width multiple "
                f"{self.required_width}), recommended {self.recommended}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the citations as their one-line text."""
        out = super().to_dict()
        out["citations"] = [str(c) for c in self.citations]
        return out


def _cp_sizes(cp: int, eval_cp: int | None) -> list[int]:
    return [cp] if eval_cp is None or eval_cp == cp else [cp, eval_cp]


def global_batch_multiple(tp: int, cp: int, sp: bool, *, dp: int | None = None, dynamic_cp: bool = False) -> int:
    """Megatron-Bridge PR #6127's per-sample multiple: ``2*CP`` (1 when CP = 1), or ``2*DP*CP`` with dynamic
    CP, times TP under sequence parallelism (a product, where the other paths take an lcm).

    >>> global_batch_multiple(2, 2, True), derive_alignment(2, 2, True).pad_seq_to_mult
    (8, 4)
    """
    if dynamic_cp:
        if dp is None:
            raise UsageError("dynamic CP pads to 2*DP*CP: give the data-parallel size", field="dp")
        multiple = 2 * positive_int("dp", dp) * cp
    else:
        multiple = cp_multiple(cp)
    return multiple * tp if sp and tp > 1 else multiple


def alignment_requirement(
    path: str = "offline",
    tp: int = 1,
    cp: int = 1,
    sp: bool = False,
    eval_cp: int | None = None,
    *,
    bridge_version: str = DEFAULT_BRIDGE_TARGET,
    dp: int | None = None,
    dynamic_cp: bool = False,
) -> AlignmentRequirement:
    """The required minimum and the recommended per-sequence multiple of ``path`` on ``bridge_version``.

    * offline (both versions): required = ``lcm(2*CP)`` over the train and eval CP sizes (Transformer
      Engine's THD partition; Bridge never checks it), width multiple = ``lcm(required, CP*TP under
      SP)`` (the SP scatter splits the row); recommended = :func:`derive_alignment`.
    * in-batch (both) and Energon native packing (main only): Bridge derives ``lcm(2*CP or 1, CP*TP under
      SP)`` itself and pads to it: required = recommended.
    * global-batch (main only, PR #6127): the product :func:`global_batch_multiple` (with an eval CP:
      the lcm of the product over both sizes; #6127 has no eval-CP notion). Dynamic CP is provisional.

    >>> r = alignment_requirement("offline", tp=4, cp=2, sp=True)
    >>> (r.required, r.required_width, r.recommended)
    (4, 8, 8)
    >>> alignment_requirement("global_batch", tp=2, cp=2, sp=True, bridge_version="main").required
    8
    """
    if path not in ALIGNMENT_PATHS:
        raise UsageError(f"unknown packing path {path!r}; choose one of {', '.join(ALIGNMENT_PATHS)}", field="path")
    bridge_version = resolve_target(bridge_version)
    al = derive_alignment(tp, cp, sp, eval_cp)
    tp, cp, sp, eval_cp = al.tp, al.cp, al.sp, al.eval_cp
    if dp is not None:
        dp = positive_int("dp", dp)
    if not isinstance(dynamic_cp, bool):
        raise UsageError(f"dynamic_cp must be true or false, got {dynamic_cp!r}", field="dynamic_cp")
    sizes = _cp_sizes(cp, eval_cp)
    base = dict(path=path, bridge_version=bridge_version, tp=tp, cp=cp, sp=sp, eval_cp=eval_cp, dp=dp,
                dynamic_cp=dynamic_cp, provisional=False)
    if dynamic_cp and path != "global_batch":
        raise UsageError("dynamic CP is stated for global-batch packing only", field="dynamic_cp")
    missing = _UNAVAILABLE.get((path, bridge_version))
    if missing:
        return AlignmentRequirement(**base, available=False, required=None, required_width=None, recommended=None,
                                    enforced="unavailable", required_reason=missing, recommended_reason=missing,
                                    citations=())
    if path == "offline":
        required = math.lcm(*(cp_multiple(c) for c in sizes))
        width = math.lcm(required, *(sp_multiple(tp, c, sp) for c in sizes))
        where = "megatron-bridge " + (BRIDGE_RELEASE if bridge_version == BRIDGE_RELEASE else
                                      f"main {BRIDGE_MAIN_COMMIT[:7]}")
        why = (f"2*CP over train/eval CP = {required} (their lcm): Transformer Engine's THD CP partition needs every "
               f"physical sequence divisible by 2*CP; {where} never checks it; the SP term is a row-width "
               f"constraint (width multiple {width})" if required > 1 else
               f"1: no context parallelism, nothing upstream needs a per-sequence multiple (width multiple {width})")
        return AlignmentRequirement(
            **base, available=True, required=required, required_width=width, recommended=al.pad_seq_to_mult,
            enforced="runtime", required_reason=why,
            recommended_reason=f"the skill's formula: {al.explanation}",
            citations=(_TE_2CP, _MCORE_CP_SPLIT, _SP_WIDTH, _SEQ_2CP, _OFFLINE_ONLY_POSITIVE))
    if path in ("in_batch", "energon"):
        cites = (_COLLATE_MULTIPLE, _COLLATE_ASSIGNED) if bridge_version == BRIDGE_RELEASE else (_COLLATE_MAIN,)
        version = BRIDGE_RELEASE if bridge_version == BRIDGE_RELEASE else f"main {BRIDGE_MAIN_COMMIT[:7]}"
        why = (f"{al.pad_seq_to_mult}: megatron-bridge {version} derives lcm(2*CP or 1, CP*TP under SP) over train/eval "
               "CP itself, pads every in-batch sequence to it and checks seq_length against it")
        return AlignmentRequirement(
            **base, available=True, required=al.pad_seq_to_mult, required_width=al.pad_seq_to_mult,
            recommended=al.pad_seq_to_mult, enforced="bridge", required_reason=why,
            recommended_reason=f"the value Bridge derives (the skill's formula): {al.explanation}",
            citations=cites + (_TE_2CP, _SP_WIDTH))
    # global_batch on main: PR #6127's product
    products = [global_batch_multiple(tp, c, sp, dp=dp, dynamic_cp=dynamic_cp) for c in sizes]
    required = math.lcm(*products)
    factors = " * ".join(
        (["2*DP*CP" if dynamic_cp else ("2*CP" if cp > 1 else "1")]) + (["TP"] if sp and tp > 1 else []))
    why = (f"{required} = {factors} (Megatron-Bridge PR #6127, open; the rule of Megatron-LM dev's SFT padding "
           "divisor): a product, not the lcm of the other paths")
    if len(sizes) > 1:
        why += f"; with eval CP{eval_cp}: lcm of the product over both CP sizes (#6127 has no eval-CP notion)"
    if dynamic_cp:
        why += f"; {DYNAMIC_CP_DESIGNS}"
    return AlignmentRequirement(
        **{**base, "provisional": dynamic_cp}, available=True, required=required, required_width=required,
        recommended=required, enforced="runtime", required_reason=why,
        recommended_reason=f"pad_seq_to_mult = {factors} = {required} [global-batch packing, Megatron-Bridge PR "
        "#6127]", citations=(_GLOBAL_PRODUCT, _MLM_DEV_DIVISOR, _TE_2CP, _SP_WIDTH))


def alignment_table(
    tps: tuple[int, ...] = tuple(range(1, 9)), cps: tuple[int, ...] = tuple(range(1, 9)),
) -> list[AlignmentRequirement]:
    """Every requirement over ``tps`` x ``cps`` x SP off/on x :data:`ALIGNMENT_PATHS` x both Bridge versions
    (static CP, no eval CP): the generated docs table and the agreement test read this."""
    from seqpack.core.versions import BRIDGE_TARGETS

    return [alignment_requirement(path, tp, cp, sp, bridge_version=version)
            for version in BRIDGE_TARGETS for path in ALIGNMENT_PATHS for sp in (False, True)
            for tp in tps for cp in cps]


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
