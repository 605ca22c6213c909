"""Dataset and dataloader: epoch-based loading, sample caps and HF rewrites."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, OFFLINE, SPECS
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
