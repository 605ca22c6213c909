"""Runtime in-batch packing: micro-batch size, dataloader, alignment multiple."""

from __future__ import annotations

from seqpack.config.model_support import find_family
from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, IN_BATCH, topology
from seqpack.config.rules.evidence import BRIDGE_PR5493, bridge, bridge_cc, bridge_main
from seqpack.config.rules.registry import rule
from seqpack.core.versions import BRIDGE_RELEASE, bridge_pr

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
    upstream_check=bridge_cc(1480, "micro_batch_size", "raises ValueError: in-batch packing needs MBS > 1"),
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
    source="GPT-SFT: GPTSFTDatasetConfig.validate (Megatron-Bridge PR #5493, which adds GPT-SFT in-batch packing). "
    "Direct-HF and MockVLM have no guard: the batch loader collates the whole per-rank global batch into one row, "
    "which the training step then cannot split into several micro-batches",
    fix="Set dataset.dataloader_type=single (or cyclic).",
    trigger={**IN_BATCH, "dataset.kind": "direct_hf", "dataset.dataloader_type": "batch", "dist.world_size": 2,
             "train.global_batch_size": 16},
    fixed={"dataset.dataloader_type": "single"},
    prs=(5493,),
    upstream_check=(
        bridge(
            "data/batch_utils.py",
            55,
            "enforce_divisible",
            "split_batch_into_microbatches raises ValueError: a packed global batch is one row, which does not split "
            "into several micro-batches",
            kind="runtime",
        ),
        bridge_main(
            "data/builders/gpt_sft.py",
            200,
            "dataloader_type",
            "GPTSFTDatasetConfig.validate raises ValueError for in-batch packing with the batch loader",
            ref=BRIDGE_PR5493,
        ),
    ),
    note="With exactly one micro-batch per step and rank (global_batch_size = micro_batch_size * DP) the batch "
    "loader collates the same rows as the single loader, and nothing fails; the rule then stays quiet on "
    "Direct-HF and MockVLM.",
)
def in_batch_loader(r: Resolved) -> str | None:
    if not (r.cfg.dataset.enable_in_batch_packing and r.dataloader_type == "batch"):
        return None
    if r.cfg.dataset.kind == "gpt_sft":
        return ("in-batch packing with dataloader_type=batch: GPTSFTDatasetConfig refuses the batch loader for "
                "in-batch packing")
    steps = None
    if r.dp:
        unit = r.cfg.train.micro_batch_size * r.dp
        steps = r.cfg.train.global_batch_size // unit if r.cfg.train.global_batch_size % unit == 0 else None
    if steps == 1:
        return None
    return (
        "in-batch packing with dataloader_type=batch: that loader hands the whole per-rank global batch to one "
        "collate, which packs it into one row; the step then cannot split that row into "
        f"{steps if steps else 'several'} micro-batches"
    )


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
    severity="error",
    title=f"GPT-SFT in-batch packing is not in megatron-bridge {BRIDGE_RELEASE} (Bridge main has it, PR #5493)",
    fields=("dataset.enable_in_batch_packing", "dataset.in_batch_packing_pad_to_multiple_of", "dataset.kind"),
    provenance="upstream",
    source=f"megatron-bridge {BRIDGE_RELEASE}'s GPTSFTDatasetConfig has no enable_in_batch_packing field (the "
    "lane builds it); Megatron-Bridge PR #5493, merged on main after the release, adds GPT-SFT in-batch packing",
    fix=f"On megatron-bridge {BRIDGE_RELEASE} use dataset.kind=direct_hf for in-batch packing, or offline packing "
    "(enable_offline_packing, MBS1); or target a Bridge main that contains PR #5493 (--bridge-version main).",
    trigger={**IN_BATCH},
    fixed={"dataset.kind": "direct_hf"},
    targets=(BRIDGE_RELEASE,),
    prs=(5493,),
    upstream_check=bridge(
        "data/builders/gpt_sft.py",
        105,
        "class GPTSFTDatasetConfig",
        "the dataclass declares no enable_in_batch_packing, so building it with the field raises TypeError",
    ),
)
def gpt_sft_bridge_version(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.kind == "gpt_sft" and (d.enable_in_batch_packing or d.in_batch_packing_pad_to_multiple_of is not None):
        return (
            f"dataset.enable_in_batch_packing on a gpt_sft dataset: GPT-SFT in-batch packing is not in "
            f"megatron-bridge {BRIDGE_RELEASE} (its GPTSFTDatasetConfig refuses the field); {bridge_pr(5493)} adds it "
            "on Bridge main"
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
        222,
        "defer_in_batch_packing_to_step",
        "vlm_step raises ValueError: it needs collate-time packing",
        kind="runtime",
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
            63,
            "qwen3_vl_step does not support collate-time",
            "qwen3_vl_step raises ValueError for a batch that already carries cu_seqlens",
            kind="runtime",
        ),
        bridge_main(
            "training/megatron_mimo_step.py",
            48,
            "defer_in_batch_packing_to_step",
            "megatron_mimo_step raises ValueError unless packing is deferred to it (main; the release's MIMO step "
            "does not pack)",
            kind="runtime",
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
            92,
            "pad_to_multiple_of",
            "DirectHFSFTDatasetConfig.validate raises ValueError for a multiple <= 0",
        ),
        bridge("data/builders/energon.py", 165, "pad_to_multiple_of", "EnergonDatasetConfig.validate raises the same"),
    ),
)
def pad_multiple_positive(r: Resolved) -> str | None:
    d = r.cfg.dataset
    for name in ("pad_to_multiple_of", "in_batch_packing_pad_to_multiple_of"):
        value = getattr(d, name)
        if value is not None and value <= 0:
            return f"dataset.{name}={value} must be greater than 0"
    return None
