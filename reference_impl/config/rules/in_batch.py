"""Runtime in-batch packing: micro-batch size, dataloader, alignment multiple."""

from __future__ import annotations

from reference_impl.config.model_support import find_family
from reference_impl.config.resolve import Resolved
from reference_impl.config.rules.common import BRIDGE_CC, IN_BATCH, topology
from reference_impl.config.rules.registry import rule

FAMILY = "in_batch"


@rule(
    "PACK-IN-BATCH-MBS",
    family=FAMILY,
    severity="error",
    title="in-batch packing requires micro_batch_size > 1",
    fields=("dataset.enable_in_batch_packing", "train.micro_batch_size"),
    provenance="upstream",
    source=f"V17: {BRIDGE_CC}",
    fix="Set train.micro_batch_size to 2 or more (the rows of a micro-batch become one THD row).",
    trigger={**IN_BATCH, "train.micro_batch_size": 1},
    fixed={"train.micro_batch_size": 4},
)
def in_batch_mbs(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.cfg.train.micro_batch_size == 1:
        return "in-batch packing with train.micro_batch_size=1: a micro-batch must hold at least 2 rows to pack"
    return None


@rule(
    "PACK-IN-BATCH-DATALOADER",
    family=FAMILY,
    severity="error",
    title="in-batch packing needs the single or cyclic dataloader, not batch",
    fields=("dataset.enable_in_batch_packing", "dataset.dataloader_type"),
    provenance="documented",
    source="packed-sequences docs; no upstream guard exists",
    fix="Set dataset.dataloader_type=single (or cyclic).",
    trigger={**IN_BATCH, "dataset.dataloader_type": "batch"},
    fixed={"dataset.dataloader_type": "single"},
)
def in_batch_loader(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.dataloader_type == "batch":
        return (
            "in-batch packing with dataloader_type=batch: that loader hands the whole per-rank global batch to "
            "one collate, so it would be packed into one row"
        )
    return None


@rule(
    "PACK-IN-BATCH-DATASET-KIND",
    family=FAMILY,
    severity="error",
    title="in-batch packing is for fine-tuning datasets",
    fields=("dataset.enable_in_batch_packing", "dataset.kind"),
    provenance="stricter",
    source="pretraining datasets have no in-batch packing switch",
    fix="Use an SFT dataset kind, or no packing for pretraining.",
    trigger={**IN_BATCH, "dataset.kind": "pretrain"},
    fixed={"dataset.kind": "gpt_sft"},
)
def in_batch_kind(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.cfg.dataset.kind == "pretrain":
        return "dataset.enable_in_batch_packing=true on a pretrain dataset, which already concatenates documents"
    return None


@rule(
    "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN",
    family=FAMILY,
    severity="warning",
    title="in_batch_packing_pad_to_multiple_of is derived from the topology; a user value is overwritten",
    fields=("dataset.in_batch_packing_pad_to_multiple_of",),
    provenance="upstream",
    source=f"V23: {BRIDGE_CC} overwrites it",
    fix="Remove dataset.in_batch_packing_pad_to_multiple_of; the derived value is used.",
    trigger={**IN_BATCH, "dataset.in_batch_packing_pad_to_multiple_of": 16},
    fixed={"dataset.in_batch_packing_pad_to_multiple_of": None},
)
def in_batch_mult_overridden(r: Resolved) -> str | None:
    user = r.cfg.dataset.in_batch_packing_pad_to_multiple_of
    if (r.cfg.dataset.enable_in_batch_packing or r.cfg.energon_packing) and user is not None:
        if user != r.alignment.pad_seq_to_mult:
            return (
                f"dataset.in_batch_packing_pad_to_multiple_of={user} is overwritten with the derived "
                f"{r.alignment.pad_seq_to_mult} ({topology(r)})"
            )
    return None


@rule(
    "PACK-IN-BATCH-DEFERRED",
    family=FAMILY,
    severity="error",
    title="the VLM step requires collate-time in-batch packing (no deferral)",
    fields=("dataset.enable_in_batch_packing", "dataset.defer_in_batch_packing_to_step"),
    provenance="upstream",
    source="V56: Megatron-Bridge vlm_step",
    fix="Set dataset.defer_in_batch_packing_to_step=false (MegatronMIMO is the exception).",
    trigger={**IN_BATCH, "dataset.kind": "mock_vlm", "dataset.defer_in_batch_packing_to_step": True},
    fixed={"dataset.defer_in_batch_packing_to_step": False},
)
def deferred_step(r: Resolved) -> str | None:
    d = r.cfg.dataset
    fam = find_family(r.cfg.model.family)
    if d.enable_in_batch_packing and d.defer_in_batch_packing_to_step and not (fam and fam.family == "megatron_mimo"):
        return (
            "dataset.defer_in_batch_packing_to_step=true with in-batch packing: the VLM step requires "
            "collate-time packing"
        )
    return None


@rule(
    "PAD-TO-MULTIPLE-POSITIVE",
    family=FAMILY,
    severity="error",
    title="pad_to_multiple_of and in_batch_packing_pad_to_multiple_of must be > 0",
    fields=("dataset.pad_to_multiple_of", "dataset.in_batch_packing_pad_to_multiple_of"),
    provenance="upstream",
    source="V36: DirectHF / Energon / MockVLM dataset configs",
    fix="Use a positive multiple (or leave it unset).",
    trigger={"dataset.kind": "direct_hf", "dataset.pad_to_multiple_of": -3},
    fixed={"dataset.pad_to_multiple_of": 3},
)
def pad_multiple_positive(r: Resolved) -> str | None:
    d = r.cfg.dataset
    for name in ("pad_to_multiple_of", "in_batch_packing_pad_to_multiple_of"):
        value = getattr(d, name)
        if value is not None and value <= 0:
            return f"dataset.{name}={value} must be greater than 0"
    return None
