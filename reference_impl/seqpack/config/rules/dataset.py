"""Dataset and dataloader: epoch-based loading, sample caps, HF rewrites and fold_alignment_padding."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, GLOBAL, IN_BATCH, OFFLINE, SPECS
from seqpack.config.rules.evidence import bridge, bridge_cc
from seqpack.config.rules.registry import rule
from seqpack.config.schema import DatasetConfig
from seqpack.core.versions import BRIDGE_MAIN, BRIDGE_RELEASE

FAMILY = "dataset"


@rule(
    "DATALOADER-NUM-EPOCHS",
    family=FAMILY,
    severity="error",
    title="num_epochs needs a GPT-SFT dataset with the batch dataloader",
    fields=("train.num_epochs", "dataset.kind", "dataset.dataloader_type"),
    provenance="upstream",
    source=f"V37: {BRIDGE_CC} and the loader builder",
    fix="Unset train.num_epochs, or use dataset.kind=gpt_sft with dataloader_type=batch.",
    trigger={"train.num_epochs": 1, "dataset.dataloader_type": "single"},
    fixed={"dataset.dataloader_type": "batch"},
    upstream_check=(
        bridge_cc(1142, "num_epochs", "raises ValueError: num_epochs needs a GPT-SFT dataset"),
        bridge_cc(1147, "dataloader_type", "raises ValueError: num_epochs needs the batch dataloader"),
    ),
)
def num_epochs(r: Resolved) -> str | None:
    ne = r.cfg.train.num_epochs
    if ne is None:
        return None
    if r.cfg.dataset.kind != "gpt_sft":
        return f"train.num_epochs={ne} is only supported for finite GPT-SFT datasets (dataset.kind={r.cfg.dataset.kind})"
    if r.dataloader_type != "batch":
        return f"train.num_epochs={ne} is only supported with dataloader_type=batch (got {r.dataloader_type})"
    return None


@rule(
    "DATASET-KWARGS-MAX-NUM-SAMPLES",
    family=FAMILY,
    severity="error",
    title="dataset_kwargs may not carry max_num_samples",
    fields=("dataset.dataset_kwargs.max_num_samples", "dataset.max_train_samples"),
    provenance="upstream",
    source="V43: GPTSFTDatasetConfig.validate (the other dataset configs either have no dataset_kwargs, "
    "DATASET-FIELD-KIND, or pass it to their loader)",
    fix="Move the cap to dataset.max_train_samples.",
    trigger={"dataset.dataset_kwargs.max_num_samples": 100},
    fixed={"dataset.dataset_kwargs": {}, "dataset.max_train_samples": 100},
    upstream_check=bridge(
        "data/builders/gpt_sft.py",
        211,
        "max_num_samples",
        "GPTSFTDatasetConfig.validate raises ValueError",
    ),
)
def kwargs_max_samples(r: Resolved) -> str | None:
    if r.cfg.dataset.kind == "gpt_sft" and "max_num_samples" in r.cfg.dataset.dataset_kwargs:
        return (
            f"dataset.dataset_kwargs.max_num_samples={r.cfg.dataset.dataset_kwargs['max_num_samples']} is not "
            "accepted; the sample cap is dataset.max_train_samples"
        )
    return None


@rule(
    "HF-REWRITE-EXPLICIT-PATHS",
    family=FAMILY,
    severity="error",
    title="hf_rewrite cannot be combined with explicit packed data paths",
    fields=("dataset.hf_rewrite", f"{SPECS}.packed_train_data_path"),
    provenance="upstream",
    source="V42: GPTSFTDatasetConfig.validate",
    fix="Drop hf_rewrite, or let the builder manage the packed paths.",
    trigger={**OFFLINE, "dataset.hf_rewrite": True, f"{SPECS}.packed_train_data_path": "/data/packed/train.idx.parquet"},
    fixed={"dataset.hf_rewrite": False},
    upstream_check=bridge(
        "data/builders/gpt_sft.py",
        206,
        "explicit_packed_paths",
        "GPTSFTDatasetConfig.validate raises ValueError",
    ),
)
def hf_rewrite(r: Resolved) -> str | None:
    s = r.specs
    if r.cfg.dataset.hf_rewrite and s is not None and (
        s.packed_train_data_path or s.packed_val_data_path or s.packed_metadata_path
    ):
        return "dataset.hf_rewrite=true cannot safely replace explicit packed data paths"
    return None


#: seqpack dataset fields that each kind's Megatron-Bridge dataset config class does not declare, in
#: megatron-bridge 0.6.2 (read from the released classes in the lane: tests/upstream/test_diff_validate.py).
#: Fields other rules report with a more specific message are left out (offline packing on a non-GPT-SFT
#: kind, packing_buffer_size outside Energon, in-batch packing on GPT-SFT (version) or pretraining, and
#: the global-batch fields).
MISSING_FIELDS: dict[str, tuple[str, ...]] = {
    "gpt_sft": ("defer_in_batch_packing_to_step", "pad_to_max_length", "pad_to_multiple_of", "micro_batch_size",
                "task_encoder"),
    "direct_hf": ("seed", "micro_batch_size", "task_encoder", "dataset_kwargs", "max_train_samples", "hf_rewrite"),
    "energon": ("seed", "max_train_samples", "hf_rewrite"),
    "mock_vlm": ("micro_batch_size", "task_encoder", "dataset_kwargs", "max_train_samples", "hf_rewrite"),
    "pretrain": ("defer_in_batch_packing_to_step", "pad_to_max_length", "pad_to_multiple_of",
                 "in_batch_packing_pad_to_multiple_of", "micro_batch_size", "task_encoder", "dataset_kwargs",
                 "max_train_samples", "hf_rewrite"),
}
#: seqpack's name for each dataset kind's Bridge class (messages).
KIND_CLASSES = {"gpt_sft": "GPTSFTDatasetConfig", "direct_hf": "DirectHFSFTDatasetConfig",
                "energon": "EnergonDatasetConfig", "mock_vlm": "MockVLMSFTDatasetConfig",
                "pretrain": "GPTDatasetConfig"}
_DEFAULTS = DatasetConfig()


@rule(
    "DATASET-FIELD-KIND",
    family=FAMILY,
    severity="error",
    title="a dataset field that this dataset kind's Megatron-Bridge config class does not have",
    fields=("dataset.kind",),
    provenance="upstream",
    source=f"the dataset config dataclasses of megatron-bridge {BRIDGE_RELEASE} (their fields are read in the lane): "
    "a field the class does not declare makes building it raise TypeError",
    fix="Remove the field, or use the dataset kind that has it (pad_to_max_length on GPT-SFT goes into "
    "dataset_kwargs; seed on Direct-HF and Energon is not configurable there).",
    trigger={"dataset.kind": "direct_hf", "dataset.dataset_kwargs.pad_to_max_length": True},
    fixed={"dataset.dataset_kwargs": {}, "dataset.pad_to_max_length": True},
    targets=(BRIDGE_RELEASE, BRIDGE_MAIN),
    upstream_check=bridge(
        "data/builders/direct_hf_sft.py",
        54,
        "class DirectHFSFTDatasetConfig",
        "each dataset config is a keyword-only dataclass; an undeclared field raises TypeError when it is built",
    ),
)
def field_kind(r: Resolved) -> str | None:
    d = r.cfg.dataset
    # seed is random_seed on the mock VLM and pretraining configs: carried over, not missing
    bad = [name for name in MISSING_FIELDS.get(d.kind, ()) if getattr(d, name) != getattr(_DEFAULTS, name)]
    if bad:
        return (f"dataset.kind={d.kind}: {KIND_CLASSES[d.kind]} has no field {', '.join(bad)} (set to "
                f"{', '.join(repr(getattr(d, n)) for n in bad)})")
    return None


# --- fold_alignment_padding (Megatron-Bridge PR #6127; seqpack's in-batch and global-batch loaders) ---------------

FOLD = {"dataset.fold_alignment_padding": True}
_FOLDING_PATHS = ("in_batch", "global_batch")


@rule(
    "PACK-FOLD-ALIGNMENT-BRIDGE-VERSION",
    family=FAMILY,
    targets=(BRIDGE_RELEASE,),
    prs=(6127,),
    severity="error",
    title=f"megatron-bridge {BRIDGE_RELEASE}'s dataset configs have no fold_alignment_padding",
    fields=("dataset.fold_alignment_padding",),
    provenance="upstream",
    source=f"megatron-bridge {BRIDGE_RELEASE} (checked in the lane): no dataset config declares the field; "
    "Megatron-Bridge PR #6127 (open) adds it for global-batch packing",
    fix="Leave dataset.fold_alignment_padding unset for megatron-bridge 0.6.2 (seqpack's own in-batch and "
    "global-batch loaders accept it; validate them with --bridge-version main).",
    trigger={**IN_BATCH, "dataset.kind": "direct_hf", **FOLD},
    fixed={"dataset.fold_alignment_padding": False},
    upstream_check=(
        bridge("data/builders/gpt_sft.py", 105, "class GPTSFTDatasetConfig",
               "GPTSFTDatasetConfig declares no fold_alignment_padding: building one with it raises TypeError"),
        bridge("data/builders/direct_hf_sft.py", 54, "DirectHFSFTDatasetConfig",
               "DirectHFSFTDatasetConfig declares no fold_alignment_padding: building one with it raises TypeError"),
    ),
)
def fold_version(r: Resolved) -> str | None:
    if r.cfg.dataset.fold_alignment_padding:
        return (f"dataset.fold_alignment_padding=true: megatron-bridge {BRIDGE_RELEASE} has no such field "
                "(Megatron-Bridge PR #6127, open, adds it for global-batch packing)")
    return None


@rule(
    "PACK-FOLD-ALIGNMENT-PATH",
    family=FAMILY,
    severity="warning",
    title="fold_alignment_padding only changes in-batch and global-batch packed batches",
    fields=("dataset.fold_alignment_padding",),
    provenance="stricter",
    source="the option folds the padding of sequences packed at run time (PR #6127: global-batch packing; seqpack's "
    "in-batch loader too); offline packs and Energon packing ignore it",
    fix="Drop dataset.fold_alignment_padding, or pack in-batch or global-batch.",
    trigger={**OFFLINE, **FOLD},
    fixed={"dataset.fold_alignment_padding": False},
)
def fold_path(r: Resolved) -> str | None:
    if r.cfg.dataset.fold_alignment_padding and not any(p in _FOLDING_PATHS for p in r.paths):
        where = "/".join(r.paths) or "unpacked"
        return f"dataset.fold_alignment_padding=true has no effect on {where} batches"
    return None


@rule(
    "PACK-FOLD-ALIGNMENT-MCORE",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="warning",
    title="folded batches reach FlashAttention only once Megatron-Core stops forcing pad_between_seqs (Megatron-LM "
    "PR #7417)",
    fields=("dataset.fold_alignment_padding", "dataset.enable_global_batch_packing",
            "dataset.enable_in_batch_packing"),
    provenance="documented",
    source="Megatron-Bridge PR #6127's docs: heads of 256 and wider train on FlashAttention only, which rejects THD "
    "bins with padding between sequences; Megatron-Core's sequence-packing batch path sets pad_between_seqs=True "
    "whatever the boundaries say until Megatron-LM PR #7417 (open) derives it from cu_seqlens",
    fix="Keep the option for heads of 256 and wider and run a Megatron-Core with PR #7417 (or pass "
    "pad_between_seqs from the batch, as seqpack's to_packed_seq_params does).",
    trigger={**GLOBAL, **FOLD},
    fixed={"dataset.fold_alignment_padding": False},
    note="The folded padding stays loss-masked and True in padding_mask, and follows each sequence's last token, "
    "so real tokens compute what they compute unfolded (tests/test_fold_and_tail_padding.py).",
)
def fold_mcore(r: Resolved) -> str | None:
    if r.cfg.dataset.fold_alignment_padding and any(p in _FOLDING_PATHS for p in r.paths):
        return ("dataset.fold_alignment_padding=true: the batches carry no padding between sequences, but "
                "Megatron-Core's sequence-packing batch path passes pad_between_seqs=True to attention until "
                "Megatron-LM PR #7417 (open) lands")
    return None
