"""One packing path at a time: combinations of packing switches upstream rejects."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, ENERGON, GLOBAL, OFFLINE
from seqpack.config.rules.evidence import GLOBAL_BATCH_GUIDE, bridge_cc, bridge_guide, bridge_main
from seqpack.config.rules.registry import rule
from seqpack.core.versions import BRIDGE_MAIN

FAMILY = "exclusive"


@rule(
    "PACK-EXCLUSIVE-OFFLINE-IN-BATCH",
    family=FAMILY,
    severity="error",
    title="offline and in-batch packing are mutually exclusive",
    fields=("dataset.enable_offline_packing", "dataset.enable_in_batch_packing"),
    provenance="upstream",
    source=f"V10: {BRIDGE_CC}",
    fix="Choose one: offline packs on disk (MBS1) or runtime in-batch packing (MBS>1).",
    trigger={**OFFLINE, "dataset.enable_in_batch_packing": True},
    fixed={"dataset.enable_in_batch_packing": False},
    upstream_check=bridge_cc(
        1156,
        "enable_in_batch_packing",
        "raises ValueError: the two switches are mutually exclusive",
    ),
)
def excl_offline_in_batch(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.enable_offline_packing and d.enable_in_batch_packing:
        return "dataset.enable_offline_packing and dataset.enable_in_batch_packing are both true"
    return None


@rule(
    "PACK-EXCLUSIVE-ENERGON-IN-BATCH",
    family=FAMILY,
    severity="error",
    title="Energon native packing and collator in-batch packing are mutually exclusive",
    fields=("dataset.packing_buffer_size", "dataset.enable_in_batch_packing"),
    provenance="upstream",
    source="V35: EnergonDatasetConfig.validate",
    fix="Select exactly one packing owner: packing_buffer_size (native) or enable_in_batch_packing.",
    trigger={**ENERGON, "dataset.enable_in_batch_packing": True},
    fixed={"dataset.enable_in_batch_packing": False},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "data/builders/energon.py",
        180,
        "enable_in_batch_packing",
        "EnergonDatasetConfig.validate raises ValueError: one packing owner only",
    ),
)
def excl_energon_in_batch(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.enable_in_batch_packing:
        return (
            f"Energon native packing (packing_buffer_size={r.cfg.dataset.packing_buffer_size}) and collator-owned "
            "enable_in_batch_packing=true are both selected"
        )
    return None


@rule(
    "PACK-EXCLUSIVE-GLOBAL-BATCH",
    family=FAMILY,
    severity="error",
    title="global-batch packing excludes every other packing path on the dataset",
    fields=("dataset.enable_global_batch_packing", "dataset.enable_offline_packing", "dataset.enable_in_batch_packing",
        "dataset.packing_buffer_size"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Turn the other packing path off.",
    trigger={**GLOBAL, "dataset.enable_in_batch_packing": True},
    fixed={"dataset.enable_in_batch_packing": False},
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    upstream_check=bridge_guide(
        GLOBAL_BATCH_GUIDE,
        "ConfigContainer.validate requires no other packing path on the same dataset",
    ),
)
def excl_global(r: Resolved) -> str | None:
    others = [p for p in r.paths if p != "global_batch"]
    if "global_batch" in r.paths and others:
        return f"dataset.enable_global_batch_packing=true together with {', '.join(others)} packing"
    return None


@rule(
    "PACK-ENERGON-DEFER",
    family=FAMILY,
    severity="error",
    title="Energon native packing cannot defer packing to the training step",
    fields=("dataset.packing_buffer_size", "dataset.defer_in_batch_packing_to_step"),
    provenance="upstream",
    source="V35: EnergonDatasetConfig.validate",
    fix="Set dataset.defer_in_batch_packing_to_step=false (native packs are built in the loader).",
    trigger={**ENERGON, "dataset.defer_in_batch_packing_to_step": True},
    fixed={"dataset.defer_in_batch_packing_to_step": False},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "data/builders/energon.py",
        185,
        "defer_in_batch_packing_to_step",
        "EnergonDatasetConfig.validate raises ValueError",
    ),
)
def energon_defer(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.defer_in_batch_packing_to_step:
        return "Energon native packing with dataset.defer_in_batch_packing_to_step=true"
    return None
