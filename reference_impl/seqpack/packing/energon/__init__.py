"""Energon online packing: packs are formed inside every dataloader worker from a buffer of
``packing_buffer_size`` encoded samples (megatron-energon 7.4).

Modules: :mod:`.prepare` (JSONL -> WebDataset shards -> prepared Energon dataset),
:mod:`.media` (image members, synthetic pictures, the marker), :mod:`.samples` (sample types and the
cooker), :mod:`.encoder` (:class:`PackingTaskEncoder`), :mod:`.loader` (datasets and savable
loaders from a ``TrainingConfig``), :mod:`.checkpoint` (saved loader states, safe loading,
resume checks).

Names are imported lazily, so ``import seqpack.packing.energon`` costs nothing until one
is used (energon and torch are heavy).
"""

from __future__ import annotations

from seqpack.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "MediaSpec": "media",
    "synthetic_image": "media",
    "PreparedEnergonDataset": "prepare",
    "prepare_energon_dataset": "prepare",
    "read_manifest": "prepare",
    "synthetic_vlm_rows": "prepare",
    "write_synthetic_vlm_jsonl": "prepare",
    "PackingTaskEncoder": "encoder",
    "ENERGON_RULE_IDS": "loader",
    "EnergonMicroBatch": "loader",
    "EnergonPackedDataset": "loader",
    "EnergonPackedLoader": "loader",
    "ResumeSettings": "loader",
    "get_savable_loader": "loader",
    "get_train_dataset": "loader",
    "get_val_dataset": "loader",
    "iter_energon_batches": "loader",
    "LoaderCheckpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
