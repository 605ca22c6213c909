"""Runtime in-batch packing: micro-batch size, dataloader, alignment multiple."""

from __future__ import annotations

from reference_impl.config.model_support import find_family
from reference_impl.config.resolve import Resolved
from reference_impl.config.rules.common import BRIDGE_CC, IN_BATCH, topology
from reference_impl.config.rules.evidence import BRIDGE_PR5493, bridge, bridge_cc
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
    upstream_check=bridge_cc(1619, "micro_batch_size", "raises ValueError: in-batch packing needs MBS > 1"),
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
    provenance="upstream",
    source="GPTSFTDatasetConfig.validate (Megatron-Bridge PR #5493, which adds GPT-SFT in-batch packing); "
    "Direct-HF at main 067f987 has no guard and packs the whole per-rank global batch into one row",
    fix="Set dataset.dataloader_type=single (or cyclic).",
    trigger={**IN_BATCH, "dataset.dataloader_type": "batch"},
    fixed={"dataset.dataloader_type": "single"},
    upstream_check=bridge(
        "data/builders/gpt_sft.py",
        200,
        "dataloader_type",
        "GPTSFTDatasetConfig.validate raises ValueError for in-batch packing with the batch loader",
        commit=BRIDGE_PR5493,
    ),
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
    upstream_check=bridge_cc(
        223,
        "GPTDatasetConfig",
        "the pretraining dataset config declares no in-batch packing switch, so it cannot be built "
        "with one",
    ),
)
def in_batch_kind(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.cfg.dataset.kind == "pretrain":
        return "dataset.enable_in_batch_packing=true on a pretrain dataset, which already concatenates documents"
    return None


@rule(
    "PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION",
    family=FAMILY,
    severity="warning",
    title="GPT-SFT in-batch packing needs a Megatron-Bridge that includes PR #5493",
    fields=("dataset.enable_in_batch_packing", "dataset.kind"),
    provenance="upstream",
    source="Megatron-Bridge main at 067f987 (2026-08-22) reads enable_in_batch_packing only on the Direct-HF, "
    "Energon and MockVLM configs; GPT-SFT support is PR #5493 (branch feat/gpt-sft-in-batch-packing, 84275f5)",
    fix="Use a Megatron-Bridge build that contains PR #5493, or switch to dataset.kind=direct_hf (or offline "
    "packing) on an older Bridge.",
    trigger={**IN_BATCH},
    fixed={"dataset.kind": "direct_hf"},
    note="On a Bridge without PR #5493, GPTSFTDatasetConfig has no enable_in_batch_packing field and the config "
    "cannot be built with it.",
)
def gpt_sft_bridge_version(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.enable_in_batch_packing and d.kind == "gpt_sft":
        return (
            "dataset.enable_in_batch_packing=true on a gpt_sft dataset works only with a Megatron-Bridge that "
            "includes PR #5493 (not on main as of 067f987, 2026-08-22); older GPTSFTDatasetConfig rejects the field"
        )
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
    fix="Set dataset.defer_in_batch_packing_to_step=false (families whose step packs, e.g. Qwen3-VL and "
    "MegatronMIMO, are the exception).",
    trigger={**IN_BATCH, "dataset.kind": "mock_vlm", "dataset.defer_in_batch_packing_to_step": True},
    fixed={"dataset.defer_in_batch_packing_to_step": False},
    upstream_check=bridge(
        "training/vlm_step.py",
        226,
        "defer_in_batch_packing_to_step",
        "vlm_step raises ValueError: it needs collate-time packing",
    ),
)
def deferred_step(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.enable_in_batch_packing and d.defer_in_batch_packing_to_step and _step_packer(r) is None:
        return (
            "dataset.defer_in_batch_packing_to_step=true with in-batch packing: the VLM step requires "
            "collate-time packing"
        )
    return None


def _step_packer(r: Resolved) -> str | None:
    fam = find_family(r.cfg.model.family)
    return fam.step_packer if fam else None


@rule(
    "PACK-IN-BATCH-STEP-PACKER",
    family=FAMILY,
    severity="error",
    title="families whose training step packs (Qwen3-VL, Qwen3.5-VL, MegatronMIMO) need deferred in-batch packing",
    fields=("model.family", "dataset.enable_in_batch_packing", "dataset.defer_in_batch_packing_to_step"),
    provenance="upstream",
    source="Megatron-Bridge qwen3_vl_step and megatron_mimo_step reject collate-time packed batches; "
    "scripts/training/recipe_metadata.py maps qwen3_vl_/qwen35_vl_ recipes to qwen3_vl_step",
    fix="Set dataset.defer_in_batch_packing_to_step=true so the family's step builds the packed sequences.",
    trigger={**IN_BATCH, "dataset.kind": "direct_hf", "model.family": "qwen3_vl"},
    fixed={"dataset.defer_in_batch_packing_to_step": True},
    upstream_check=(
        bridge(
            "models/qwen_vl/qwen3_vl_step.py",
            66,
            "qwen3_vl_step does not support collate-time",
            "qwen3_vl_step raises ValueError for a batch that already carries cu_seqlens",
        ),
        bridge(
            "training/megatron_mimo_step.py",
            48,
            "defer_in_batch_packing_to_step",
            "megatron_mimo_step raises ValueError unless packing is deferred to it",
        ),
    ),
)
def step_packer_needs_deferral(r: Resolved) -> str | None:
    d = r.cfg.dataset
    step = _step_packer(r)
    if step and d.enable_in_batch_packing and not d.defer_in_batch_packing_to_step:
        return (
            f"model.family={r.cfg.model.family} trains with {step}, which packs the batch itself and rejects "
            "collate-time packed batches, but dataset.defer_in_batch_packing_to_step=false"
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
    upstream_check=(
        bridge(
            "data/builders/direct_hf_sft.py",
            120,
            "pad_to_multiple_of",
            "DirectHFSFTDatasetConfig.validate raises ValueError for a multiple <= 0",
        ),
        bridge("data/builders/energon.py", 192, "pad_to_multiple_of", "EnergonDatasetConfig.validate raises the same"),
    ),
)
def pad_multiple_positive(r: Resolved) -> str | None:
    d = r.cfg.dataset
    for name in ("pad_to_multiple_of", "in_batch_packing_pad_to_multiple_of"):
        value = getattr(d, name)
        if value is not None and value <= 0:
            return f"dataset.{name}={value} must be greater than 0"
    return None
