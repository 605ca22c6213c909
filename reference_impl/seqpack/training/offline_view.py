"""What training gets from offline packs: a pack as the THD micro-batch its reader builds, and each CP rank's share.

:func:`inspect_offline_batches` is the library function behind ``seqpack batches --mode offline PACKDIR``:
it reads the packs with the runtime reader (:class:`~seqpack.packing.packed_dataset.PackedParquetDataset`,
Megatron-Bridge's reader rules: logical lengths end at the last input that is not EOS, the stored
alignment padding stays between sequences), shows the first micro-batches' boundaries (``cu_seqlens``,
``cu_seqlens_padded``, ``max_seqlen``), their padding, and with ``cp > 1`` which positions each
context-parallel rank holds (:func:`~seqpack.training.context_parallel.slice_thd_batch_for_cp`, the
split the CP step uses: every sequence in ``2 * CP`` chunks, rank ``r`` holding chunks ``r`` and
``2 * CP - 1 - r``) and how many real tokens that is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_BATCHES_SHOWN, MAX_PARALLEL_SIZE
from seqpack.core.results import Result
from seqpack.packing.pack_info import PaddingTotals

__all__ = ["OfflineBatch", "OfflineBatchReport", "inspect_offline_batches"]


@dataclass(frozen=True)
class OfflineBatch(Result):
    """One pack as a micro-batch: its boundaries, lengths, padding and (CP > 1) each rank's share.

    ``lengths``: real tokens per sequence; ``physical_lengths``: with the alignment padding after each;
    ``cp_ranks[r]``: ``{"positions", "real_tokens", "ranges"}`` of rank ``r`` (``ranges``: the
    ``[start, end)`` position runs it holds)."""

    pack: int
    width: int
    sequences: int
    lengths: list[int]
    physical_lengths: list[int]
    cu_seqlens: list[int]
    cu_seqlens_padded: list[int] | None
    max_seqlen: int
    real_tokens: int
    alignment_padding: int
    width_padding: int
    supervised_tokens: int
    cp_ranks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class OfflineBatchReport(Result):
    """Result of :func:`inspect_offline_batches`."""

    mode: str = field(default="offline", init=False)
    pack_dir: str
    split: str
    packs: int
    pack_size: int
    pad_seq_to_mult: int
    tokenizer: str | None
    cp: int
    batches: list[OfflineBatch]
    totals: PaddingTotals = field(default_factory=PaddingTotals)


def _ranges(index: Any) -> list[list[int]]:
    """``[start, end)`` runs of a sorted position array."""
    out: list[list[int]] = []
    for p in index.tolist():
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


def _rank_shares(batch: dict[str, Any], cp: int, real: Any) -> list[dict[str, Any]]:
    import torch

    from seqpack.training.boundaries import physical_boundaries_for_cp
    from seqpack.training.context_parallel import thd_partition_indices

    if cp == 1:
        return []
    physical = physical_boundaries_for_cp(batch).to(torch.int32)
    total = int(batch["tokens"].shape[1])
    out = []
    for rank in range(cp):
        index = thd_partition_indices(physical, cp, rank, total_tokens=total)
        out.append({"rank": rank, "positions": int(index.numel()), "real_tokens": int(real[index].sum()),
                    "ranges": _ranges(index)})
    return out


def inspect_offline_batches(
    path: str | os.PathLike[str], *, cp: int = 1, num_batches: int = 3, start: int = 0, split: str = "training",
) -> OfflineBatchReport:
    """The first ``num_batches`` packs (from pack ``start``) of ``split`` in ``path`` (a pack folder or the
    output root holding one) as the THD micro-batches the reader builds, each CP rank's share with ``cp > 1``."""
    from seqpack.packing.offline.artifact import MANIFEST_NAME, read_manifest
    from seqpack.packing.packed_dataset import PackedParquetDataset
    from seqpack.packing.pack_info import PackInfo
    from seqpack.packing.parquet import resolve_parquet_paths
    from seqpack.training.boundaries import thd_layout

    positive_int("cp", cp, maximum=MAX_PARALLEL_SIZE)
    positive_int("num_batches", num_batches, maximum=MAX_BATCHES_SHOWN)
    non_negative_int("start", start)
    files = [p for p in resolve_parquet_paths(path) if p.name.startswith(f"{split}_")]
    if not files:
        raise UsageError(f"no {split} packs in {path}", field="split", fix="use --split training or validation")
    folder = files[0].parent
    manifest = read_manifest(folder / MANIFEST_NAME) if (folder / MANIFEST_NAME).is_file() else {}
    ds = PackedParquetDataset(files[0])
    try:
        if start >= len(ds):
            raise UsageError(f"pack {start} is past the last one ({len(ds)} packs)", field="start")
        totals = PaddingTotals()
        shown = []
        for k in range(start, min(len(ds), start + num_batches)):
            batch = ds.collate([ds[k]])
            layout = thd_layout(batch)
            real_mask = layout.token_segments()[1]
            lengths = layout.real_lengths().tolist()
            physical = layout.physical_lengths().tolist()
            nonzero = [i for i, n in enumerate(lengths) if n > 0]
            width = int(batch["tokens"].shape[1])
            info = PackInfo(rows=tuple(nonzero), lengths=tuple(lengths[i] for i in nonzero),
                            aligned_lengths=tuple(physical[i] for i in nonzero),
                            pad_seq_to_mult=int(ds.pad_seq_to_mult), width=width)
            totals.add(info)
            padded = batch.get("cu_seqlens_q_padded")
            shown.append(OfflineBatch(
                pack=k, width=width, sequences=len(nonzero), lengths=list(info.lengths),
                physical_lengths=list(info.aligned_lengths), cu_seqlens=batch["cu_seqlens_q"].tolist(),
                cu_seqlens_padded=None if padded is None else padded.tolist(), max_seqlen=int(batch["max_seqlen_q"]),
                real_tokens=info.real_tokens, alignment_padding=info.alignment_padding,
                width_padding=info.width_padding, supervised_tokens=int(batch["loss_mask"].sum()),
                cp_ranks=_rank_shares(batch, cp, real_mask),
            ))
        return OfflineBatchReport(
            pack_dir=str(folder), split=split, packs=len(ds), pack_size=int(ds.pack_size),
            pad_seq_to_mult=int(ds.pad_seq_to_mult), tokenizer=manifest.get("tokenizer", {}).get("name"), cp=cp,
            batches=shown, totals=totals,
        )
    finally:
        ds.close()
