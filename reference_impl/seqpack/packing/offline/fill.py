"""Fill packs from spilled samples and encode them as one Parquet part per row group.

A *row group* of the output is a run of consecutive packs (``row_group_size`` of them, the last
one shorter). Its packs are filled from the spill (:mod:`seqpack.packing.offline.spill`) in their
placement order and written as a standalone Parquet file, a *part*; the parts of a split are then
joined byte for byte (:mod:`seqpack.packing.offline.parquet_concat`). Parts are independent, so any
process may write any part, and the joined file is the same whoever wrote which part.

Layout of one sample in a pack (the stored form Megatron-Bridge writes): its ``L`` stored ids,
then ``aligned + 1 - L`` pre-padding ids (``pad_id``, the tokenizer's end of document), where
``aligned`` is its runtime length rounded up to the alignment; the rolled loss mask holds the
sample's mask shifted left by one (entry ``i`` is the mask of token ``i + 1``), 0 on padding and on
the sample's last stored position.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack.data.ranges import alternating_runs, offsets_of
from seqpack.packing.offline.spill import SampleIndex, SpillReader

#: Tokens per row group the automatic row-group size aims at (bounds a writer's memory).
ROW_GROUP_TOKENS = 1 << 22
DEFAULT_ROW_GROUP_PACKS = 500


def auto_row_group_size(pack_size: int) -> int:
    """Packs per row group: 500, fewer for long packs so a group holds about 4 Mi tokens at most."""
    return max(1, min(DEFAULT_ROW_GROUP_PACKS, ROW_GROUP_TOKENS // max(1, pack_size)))


@dataclass(frozen=True)
class PartJob:
    """One row group: its packs' samples (in placement order) and where the part goes."""

    path: str
    spill_dir: str
    id_dtype: str
    pad_id: int
    counts: np.ndarray  # samples per pack
    aligned: np.ndarray  # aligned runtime length per sample
    samples: SampleIndex


def fill_group(job: PartJob) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flat ``(input_ids, loss_mask, row_offsets, seq_start_id, start_offsets)`` of the job's packs."""
    lengths = job.samples.length.astype(np.int64)
    slots = job.aligned.astype(np.int64) + 1  # stored slot per sample: aligned runtime + 1
    ids_in, mask_in = SpillReader(job.spill_dir, np.dtype(job.id_dtype)).read(job.samples)
    ids = np.full(int(slots.sum()), job.pad_id, dtype=np.int64)
    ids[alternating_runs(lengths, slots - lengths)] = ids_in  # each sample at the start of its slot, then padding
    # rolled mask: the mask of token j (j >= 1) of a sample at slot position j - 1, 0 elsewhere
    later = np.ones(mask_in.size, dtype=bool)
    later[offsets_of(lengths)[:-1]] = False
    mask = np.zeros(ids.size, dtype=np.int8)
    mask[alternating_runs(lengths - 1, slots - lengths + 1)] = mask_in[later] != 0
    slot_start = offsets_of(slots)
    pack_of_sample = np.repeat(np.arange(job.counts.size), job.counts)
    row_offsets = offsets_of(np.bincount(pack_of_sample, weights=slots, minlength=job.counts.size).astype(np.int64))
    start_offsets = offsets_of(job.counts)
    starts = slot_start[:-1] - row_offsets[pack_of_sample]
    return ids, mask, row_offsets, starts, start_offsets


def write_part(job: PartJob) -> tuple[str, int]:
    """Fill the job's packs and write them as a one-row-group Parquet part; returns (path, bytes)."""
    import pyarrow.parquet as pq

    from seqpack.packing.parquet import flat_table

    table = flat_table(*fill_group(job))
    path = Path(job.path)
    pq.write_table(table, path, row_group_size=max(1, int(job.counts.size)))
    return str(path), os.path.getsize(path)


__all__ = ["DEFAULT_ROW_GROUP_PACKS", "PartJob", "auto_row_group_size", "fill_group", "write_part"]
