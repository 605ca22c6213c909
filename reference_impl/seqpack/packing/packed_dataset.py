"""Runtime dataset over packed Parquet: lazy rows, epoch sample mapping, padding rows, THD collate.

``PackedParquetDataset(path)`` reads a file, a glob or a directory of shards lazily (row group by
row group). Its settings come from the seqpack manifest next to the data when there is one; for
artifacts written by Megatron-Bridge pass ``pack_size``, ``pad_seq_to_mult`` and ``eos_id``.

* ``max_num_samples``: an epoch-level sample mapping. ``E = ceil(max_num_samples / N)`` epochs,
  each a permutation of ``range(N)`` from ``numpy.random.default_rng(seed + epoch)`` (its own
  generator; the global numpy RNG is never touched), concatenated and cut to ``max_num_samples``.
  With ``bridge_compat`` (default: what the seqpack manifest records, i.e. packs written with
  ``--bridge-compat``) the mapping is Megatron-Bridge's instead: one legacy ``RandomState(seed)``
  shuffles each epoch's ``range(N)`` in place, epoch after epoch, so the same seed gives Bridge's
  data order (Bridge seeds the global numpy RNG with the dataset seed and shuffles with it).
* Negative indices are *padding rows* (what a sampler emits to fill an incomplete last global
  batch): index ``-k`` reads the mapped (or physical) row ``len - k`` but its loss mask is all 0,
  so it contributes no loss.
* ``collate([item])`` returns the canonical THD micro-batch (micro-batch size 1, the offline
  contract); ``collate_bridge(items)`` returns Megatron-Bridge's offline batch form. Bridge's reader
  options apply to both: ``pad_to_max_length``, ``pad_cu_seqlens`` (with ``metadata``),
  ``pad_seq_length_to_mult``, ``ceil_to_power_2``, ``answer_only_loss`` (False: every token but EOS
  is trained) and, for ``collate_bridge`` only, ``return_cu_seqlen=False`` (one causal mask over the
  row instead of boundaries). ``bridge_version`` (default megatron-bridge 0.6.2) picks the reader's
  loss and logical-length rules and, for ``main``, the keys Bridge main's collate adds
  (:func:`seqpack.packing.thd_collate.collate_stored_rows`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.core.versions import BRIDGE_MAIN
from seqpack.packing.parquet import PackedParquetReader, read_metadata, resolve_parquet_paths
from seqpack.packing.thd_collate import collate_stored_row_canonical, collate_stored_rows, reader_version


class PackedParquetDataset(torch.utils.data.Dataset):
    """Map-style dataset of stored packed rows (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        pack_size: int | None = None,
        pad_seq_to_mult: int | None = None,
        eos_id: int | None = None,
        pad_to_max_length: bool = False,
        pad_cu_seqlens: bool = False,
        metadata: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        max_num_samples: int | None = None,
        seed: int = 1234,
        pad_seq_length_to_mult: int = 16,
        bridge_compat: bool | None = None,
        ceil_to_power_2: bool = False,
        return_cu_seqlen: bool = True,
        answer_only_loss: bool = True,
        bridge_version: str | None = None,
    ) -> None:
        from seqpack.packing.offline.prepare import find_manifest

        self.path = str(path)
        self.reader = PackedParquetReader(path)
        manifest = find_manifest(self.reader.paths[0])
        opts = (manifest or {}).get("options", {})
        self.pack_size = pack_size or opts.get("pack_size")
        self.pad_seq_to_mult = pad_seq_to_mult or opts.get("pad_seq_to_mult")
        self.eos_id = eos_id if eos_id is not None else (manifest or {}).get("tokenizer", {}).get("eos_id")
        missing = [n for n in ("pack_size", "pad_seq_to_mult", "eos_id") if getattr(self, n) is None]
        if missing:
            raise UsageError(
                f"{', '.join(missing)} unknown for {self.path}: no seqpack manifest next to the data",
                field=missing[0],
                fix="pass them explicitly (for Megatron-Bridge artifacts: packed_sequence_size, "
                "pad_seq_to_mult and the tokenizer's EOS id)",
            )
        if metadata is None and manifest is not None:
            metadata = Path(self.reader.paths[0]).parent / manifest["metadata_file"]
        self.metadata = read_metadata(metadata) if isinstance(metadata, (str, os.PathLike)) else metadata
        if pad_cu_seqlens and self.metadata is None:
            raise UsageError(
                "pad_cu_seqlens=True needs the pack metadata file",
                rule_id="PACK-OFFLINE-PAD-CU-METADATA",
                fix="pass metadata=<pack_size>_metadata.jsonl",
            )
        self.pad_to_max_length = pad_to_max_length
        self.pad_cu_seqlens = pad_cu_seqlens
        self.pad_seq_length_to_mult = pad_seq_length_to_mult
        self.ceil_to_power_2 = bool(ceil_to_power_2)
        self.return_cu_seqlen = bool(return_cu_seqlen)
        self.answer_only_loss = bool(answer_only_loss)
        self.bridge_version = reader_version(bridge_version)
        self.seed = seed
        self.bridge_compat = bool(opts.get("bridge_compat", False)) if bridge_compat is None else bool(bridge_compat)
        self.mapping = (
            None if max_num_samples is None
            else self._mapping(len(self.reader), max_num_samples, seed, bridge_compat=self.bridge_compat)
        )

    @staticmethod
    def _mapping(n: int, max_num_samples: int, seed: int, *, bridge_compat: bool = False) -> np.ndarray:
        max_num_samples = positive_int("max_num_samples", max_num_samples)
        epochs = -(-max_num_samples // n)
        if bridge_compat:
            rng = np.random.RandomState(seed)
            rows = np.arange(n)[None, :].repeat(epochs, axis=0)
            for row in rows:
                rng.shuffle(row)
            return rows.reshape(-1)[:max_num_samples].astype(np.int64)
        perms = [np.random.default_rng(seed + e).permutation(n) for e in range(epochs)]
        return np.concatenate(perms)[:max_num_samples].astype(np.int64)

    def __len__(self) -> int:
        return len(self.reader) if self.mapping is None else int(self.mapping.size)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        n = len(self)
        padding = idx < 0
        if padding:
            if -idx > n:
                raise IndexError(f"padding index {idx} out of range for {n} samples")
            idx = n + idx
        elif idx >= n:
            raise IndexError(f"index {idx} out of range for {n} samples")
        physical = int(self.mapping[idx]) if self.mapping is not None else int(idx)
        row = self.reader.row(physical)
        if padding:
            row["loss_mask"] = np.zeros_like(row["loss_mask"])
        row["index"] = physical
        row["is_padding"] = padding
        return row

    def _collate_kwargs(self) -> dict[str, Any]:
        return {
            "pack_size": int(self.pack_size),
            "pad_seq_to_mult": int(self.pad_seq_to_mult),
            "eos_id": int(self.eos_id),
            "pad_to_max_length": self.pad_to_max_length,
            "pad_cu_seqlens": self.pad_cu_seqlens,
            "pack_metadata": self.metadata,
            "pad_seq_length_to_mult": self.pad_seq_length_to_mult,
            "ceil_to_power_2": self.ceil_to_power_2,
            "answer_only_loss": self.answer_only_loss,
            "bridge_version": self.bridge_version,
        }

    def collate(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One item (micro-batch size 1) -> the canonical THD micro-batch (+ ``row_index``)."""
        if len(items) != 1:
            raise UsageError(
                f"offline packs are physical micro-batch-size-1 rows; got {len(items)} items",
                rule_id="PACK-OFFLINE-MBS1",
                fix="use batch_size=1 (train.micro_batch_size=1)",
            )
        if not self.return_cu_seqlen:
            raise UsageError("the canonical THD micro-batch always carries its boundaries; return_cu_seqlen=False "
                             "is Bridge's whole-row causal-mask form, which collate_bridge gives",
                             field="return_cu_seqlen")
        item = items[0]
        batch = collate_stored_row_canonical(item, row_index=int(item.get("index", 0)), **self._collate_kwargs())
        batch["row_index"] = int(item.get("index", 0))
        batch["is_padding"] = bool(item.get("is_padding", False))
        if self.bridge_version == BRIDGE_MAIN:  # PR #5610's explicit key (the tail-only case included): the canonical
            # batch carries padded boundaries exactly when some entry, the last included, differs from the logical one
            batch["pad_between_seqs"] = int(self.pad_seq_to_mult) > 1 and "cu_seqlens_q_padded" in batch
        return batch

    def collate_bridge(self, items: Sequence[Mapping[str, Any]], *,
                       emit_padding_mask: bool | None = None) -> dict[str, Any]:
        """Items -> Megatron-Bridge's offline batch form (``[B, L]`` tensors, ``[B, N]`` boundaries), as the
        ``collate_fn`` of :attr:`bridge_version` returns it (0.6.2: no ``padding_mask`` and no
        ``pad_between_seqs``; main: both); ``emit_padding_mask`` turns ``padding_mask`` on or off."""
        return collate_stored_rows(list(items), return_cu_seqlen=self.return_cu_seqlen,
                                   emit_padding_mask=emit_padding_mask, **self._collate_kwargs())

    def close(self) -> None:
        """Release open Parquet files."""
        self.reader.close()


__all__ = ["PackedParquetDataset", "resolve_parquet_paths"]
