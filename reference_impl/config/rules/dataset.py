"""Dataset and dataloader: epoch-based loading, sample caps and HF rewrites."""

from __future__ import annotations

from reference_impl.config.resolve import Resolved
from reference_impl.config.rules.common import BRIDGE_CC, OFFLINE, SPECS
from reference_impl.config.rules.evidence import bridge, bridge_cc
from reference_impl.config.rules.registry import rule

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
        bridge_cc(1261, "num_epochs", "raises ValueError: num_epochs needs a GPT-SFT dataset"),
        bridge_cc(1266, "dataloader_type", "raises ValueError: num_epochs needs the batch dataloader"),
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
    source="V43: GPTSFTDatasetConfig.validate",
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
    if "max_num_samples" in r.cfg.dataset.dataset_kwargs:
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
