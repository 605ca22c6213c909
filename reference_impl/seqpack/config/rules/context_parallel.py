"""Context parallelism and alignment: CP sequence divisibility, CP loss reduction, alignment."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, CP2, near_multiples, topology
from seqpack.config.rules.evidence import BRIDGE_PR5493, bridge_cc, bridge_main
from seqpack.config.rules.registry import rule
from seqpack.core.versions import BRIDGE_MAIN

FAMILY = "context_parallel"

#: Dataset kinds whose seq_length Bridge checks against the collate alignment (V21). GPT-SFT offline
#: packs are checked on their width instead (PACK-OFFLINE-WIDTH-ALIGNED).
COLLATE_ALIGNED_KINDS = ("direct_hf", "energon", "mock_vlm")


@rule(
    "CP-SEQ-DIVISIBLE",
    family=FAMILY,
    severity="error",
    title="with CP > 1, seq_length must be divisible by 2*CP",
    fields=("model.seq_length", "model.context_parallel_size"),
    provenance="upstream",
    source=f"V18: {BRIDGE_CC}",
    fix="Round seq_length to a multiple of 2*context_parallel_size.",
    trigger={**CP2, "model.context_parallel_size": 3, "dist.world_size": 3, "model.seq_length": 256},
    fixed={"model.seq_length": 258},
    upstream_check=bridge_cc(1436, "context_parallel_size", "asserts seq_length % (2*CP) == 0 when CP > 1"),
)
def cp_seq_divisible(r: Resolved) -> str | None:
    if r.cp > 1 and r.seq_length % (2 * r.cp):
        return (
            f"seq_length={r.seq_length} is not divisible by 2*context_parallel_size = {2 * r.cp}; "
            f"nearest valid: {near_multiples(r.seq_length, 2 * r.cp)}"
        )
    return None


@rule(
    "CP-FT-PER-TOKEN-LOSS",
    family=FAMILY,
    severity="error",
    title="fine-tuning with CP > 1 needs calculate_per_token_loss=true",
    fields=("model.context_parallel_size", "model.calculate_per_token_loss", "dataset.kind"),
    provenance="upstream",
    source=f"V19: {BRIDGE_CC}",
    fix="Set model.calculate_per_token_loss=true.",
    trigger={"model.context_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.calculate_per_token_loss": True},
    upstream_check=bridge_cc(
        1452,
        "calculate_per_token_loss",
        "asserts per-token loss for fine-tuning datasets with CP > 1",
    ),
)
def cp_per_token(r: Resolved) -> str | None:
    if r.cp > 1 and r.is_sft and not r.cfg.model.calculate_per_token_loss:
        return (
            f"fine-tuning ({r.cfg.dataset.kind}) with context_parallel_size={r.cp} needs "
            "model.calculate_per_token_loss=true (got false); otherwise the loss is scaled per CP shard"
        )
    return None


@rule(
    "CP-FT-AVG-COLLECTIVE",
    family=FAMILY,
    severity="error",
    title="fine-tuning with CP > 1 needs ddp.average_in_collective=false",
    fields=("model.context_parallel_size", "ddp.average_in_collective", "dataset.kind"),
    provenance="upstream",
    source=f"V20: {BRIDGE_CC}",
    fix="Set ddp.average_in_collective=false (the per-token loss reduction does the averaging).",
    trigger={**CP2, "ddp.average_in_collective": True},
    fixed={"ddp.average_in_collective": False},
    upstream_check=bridge_cc(
        1455,
        "average_in_collective",
        "asserts average_in_collective=False for fine-tuning datasets with CP > 1",
    ),
)
def cp_avg(r: Resolved) -> str | None:
    if r.cp > 1 and r.is_sft and r.cfg.ddp.average_in_collective:
        return (
            f"fine-tuning ({r.cfg.dataset.kind}) with context_parallel_size={r.cp} needs "
            "ddp.average_in_collective=false (got true)"
        )
    return None


@rule(
    "ALIGN-SEQ-LENGTH",
    family=FAMILY,
    severity="error",
    title="collate-packed SFT seq_length must be a multiple of lcm(2*CP or 1 per train/eval CP, CP*TP under SP)",
    fields=("model.seq_length", "model.context_parallel_size", "model.tensor_model_parallel_size",
        "model.sequence_parallel", "dist.eval_context_parallel_size"),
    provenance="upstream",
    source=f"V21: {BRIDGE_CC} (direct_hf, energon, mock_vlm; on main also gpt_sft with in-batch packing, PR #5493)",
    fix="Round seq_length to a multiple of the derived alignment (`seqpack align`).",
    trigger={**CP2, "dist.world_size": 8, "model.tensor_model_parallel_size": 4, "model.sequence_parallel": True,
        "model.seq_length": 20, "dataset.kind": "direct_hf"},
    fixed={"model.seq_length": 24},
    prs=(5493,),
    upstream_check=(
        bridge_cc(
            1226,
            "collate_padding_multiple",
            "raises ValueError when a Direct-HF/Energon/MockVLM seq_length is not a multiple of the collate multiple",
        ),
        bridge_main(
            "training/config.py",
            1367,
            "collate_padding_multiple",
            "PR #5493 adds GPT-SFT with in-batch packing to the same check",
            ref=BRIDGE_PR5493,
        ),
    ),
)
def align_seq(r: Resolved) -> str | None:
    mult = r.alignment.seq_length_multiple
    kind = r.cfg.dataset.kind
    gpt_sft_in_batch = kind == "gpt_sft" and r.cfg.dataset.enable_in_batch_packing and r.bridge_version == BRIDGE_MAIN
    checked = kind in COLLATE_ALIGNED_KINDS or gpt_sft_in_batch
    if not checked or mult == 1:
        return None
    if r.cp > 1 and r.seq_length % (2 * r.cp):
        return None  # CP-SEQ-DIVISIBLE already reports the more basic problem
    if r.seq_length % mult:
        return (
            f"seq_length={r.seq_length} is not a multiple of the alignment {mult} required by {topology(r)} "
            f"({r.alignment.explanation}); nearest valid: {near_multiples(r.seq_length, mult)}"
        )
    return None


@rule(
    "CP-EVAL-DECENTRALIZED",
    family=FAMILY,
    severity="warning",
    title="a distinct eval CP only takes effect with decentralized process groups",
    fields=("dist.eval_context_parallel_size", "dist.use_decentralized_pg"),
    provenance="documented",
    source="packed-sequences docs (practical caveats)",
    fix="Enable dist.use_decentralized_pg and manage eval groups, or drop eval_context_parallel_size.",
    trigger={**CP2, "dist.world_size": 8, "dist.eval_context_parallel_size": 4, "model.seq_length": 4096},
    fixed={"dist.use_decentralized_pg": True},
)
def eval_cp_pg(r: Resolved) -> str | None:
    ecp = r.cfg.dist.eval_context_parallel_size
    if ecp is not None and ecp != r.cp and not r.cfg.dist.use_decentralized_pg:
        return (
            f"dist.eval_context_parallel_size={ecp} differs from context_parallel_size={r.cp} but "
            "dist.use_decentralized_pg=false: the distinct eval CP only reserves compatible data shapes"
        )
    return None
