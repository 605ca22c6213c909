"""Alignment and bin packing of sample lengths (no tokens), Bridge's metadata entry, and the fingerprint that
names a pack directory.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from seqpack.data.ranges import concat_ranges, offsets_of
from seqpack.packing.offline.artifact import FORMAT
from seqpack.packing.offline.options import OfflinePackOptions

__all__ = ["Bins", "aligned_lengths", "assign", "assign_scoped", "bridge_metadata", "fingerprint", "packing_gap",
           "shard_bounds"]


# ------------------------------------------------------------------------------------------------
# Alignment and bin packing (lengths only)
# ------------------------------------------------------------------------------------------------


def aligned_lengths(runtime: np.ndarray, options: OfflinePackOptions) -> np.ndarray:
    """Runtime lengths after pre-padding: rounded up to ``pad_seq_to_mult`` (or to the
    ``pad_seq_length_to_mult`` override, capped at the per-sample cap, as Bridge does)."""
    runtime = np.asarray(runtime, dtype=np.int64)
    override = options.pad_seq_length_to_mult
    multiple = override or options.pad_seq_to_mult
    aligned = -(-runtime // multiple) * multiple
    return np.minimum(aligned, options.cap) if override else aligned


@dataclass(frozen=True)
class Bins:
    """Packs as sample indices: pack ``p`` holds ``order[offsets[p]:offsets[p+1]]`` in placement order."""

    order: np.ndarray
    offsets: np.ndarray
    stats: dict[str, Any]

    @property
    def count(self) -> int:
        """Number of packs."""
        return int(self.offsets.size - 1)

    @property
    def sizes(self) -> np.ndarray:
        """Samples per pack."""
        return np.diff(self.offsets)


def assign(options: OfflinePackOptions, runtime: np.ndarray) -> Bins:
    """Stage S2: bins of sample indices (in placement order) and the packing stats, from the aligned lengths
    of a split's samples in input order (the same array whatever executor tokenized them)."""
    from seqpack.packing import algorithms

    if options.bridge_compat:
        from seqpack.packing.offline.bridge_compat import bridge_pack_csr

        pack = bridge_pack_csr(runtime, options.pack_size, seed=options.seed, algorithm=options.algorithm)
        order, offsets = pack.order, pack.offsets
        sizes = np.diff(offsets)
        sums = np.add.reduceat(runtime[order], offsets[:-1]) if order.size else np.zeros(0, np.int64)
        stats = {
            "algorithm": options.algorithm,
            "bridge_compat": True,
            "num_bins": int(sizes.size),
            "lower_bound": int(-(-int(runtime.sum()) // options.pack_size)),
            "efficiency": float(sums.sum() / (sizes.size * options.pack_size)),
            "max_items_per_bin": int(sizes.max()),
            "min_bin_fill": int(sums.min()),
        }
        return Bins(order, offsets, stats)
    result = algorithms.pack_lengths(
        runtime,
        options.pack_size,
        options.algorithm,
        seed=options.seed,
        max_seqs_per_pack=options.max_seqs_per_pack,
        oversize="error",
    )
    order, offsets = np.asarray(result.order, dtype=np.int64), np.asarray(result.offsets, dtype=np.int64)
    if options.shuffle_packs and offsets.size > 1:
        perm = np.random.default_rng(options.seed).permutation(offsets.size - 1)
        sizes = np.diff(offsets)[perm]
        order = order[concat_ranges(offsets[:-1][perm], sizes)]
        offsets = offsets_of(sizes)
    return Bins(order, offsets, result.stats())


def packing_gap(packs: int, aligned_tokens: int, pack_size: int) -> dict[str, Any]:
    """The certificate of a packing: ``gap = packs / ceil(aligned_tokens / pack_size) - 1``.

    No packing of the same samples (each taking its aligned runtime length: the alignment padding
    belongs to the sample) needs fewer than the lower bound ``ceil(aligned_tokens / pack_size)``
    packs, so ``gap`` is a proven upper bound on how far ``packs`` is from the optimum.
    """
    lower = -(-int(aligned_tokens) // int(pack_size))
    return {"packs": int(packs), "lower_bound": lower, "gap": (packs / lower - 1.0) if lower else 0.0}


def shard_bounds(shard_of_sample: np.ndarray) -> list[tuple[int, int, int]]:
    """``(shard, first sample, end)`` of every shard present, in order (samples are in input order, so
    each shard's samples are contiguous)."""
    shards = np.asarray(shard_of_sample, dtype=np.int64)
    if shards.size and np.any(np.diff(shards) < 0):  # pragma: no cover - stages give them in order
        raise ValueError("samples are not in shard order")
    present, starts = np.unique(shards, return_index=True)
    ends = np.append(starts[1:], shards.size)
    return [(int(k), int(a), int(b)) for k, a, b in zip(present, starts, ends)]


def assign_scoped(options: OfflinePackOptions, runtime: np.ndarray,
                  shard_of_sample: np.ndarray | None = None) -> tuple[Bins, list[int]]:
    """Stage S2 with the bin scope: ``(bins, pack bounds)``. ``bin_scope="global"`` is :func:`assign` over
    the whole split (one range of packs); ``"shard"`` packs each shard's samples on their own (shard
    ``k`` with seed ``seed + k``, so one shard gives exactly the global packs) and concatenates the
    packs shard after shard; ``bounds[k]:bounds[k+1]`` are the packs of the ``k``-th shard present
    (row groups never cross them)."""
    runtime = np.asarray(runtime, dtype=np.int64)
    if options.bin_scope != "shard" or shard_of_sample is None:
        bins = assign(options, runtime)
        return bins, [0, bins.count]
    from dataclasses import replace

    orders, sizes, bounds, fills = [], [], [0], []
    for k, a, b in shard_bounds(shard_of_sample):
        part = assign(replace(options, seed=options.seed + k), runtime[a:b])
        orders.append(part.order + a)
        sizes.append(part.sizes)
        bounds.append(bounds[-1] + part.count)
        fills.append(int(part.stats.get("max_items_per_bin", 0)))
    size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    order = np.concatenate(orders) if orders else np.zeros(0, np.int64)
    offsets = offsets_of(size)
    sums = np.add.reduceat(runtime[order], offsets[:-1]) if order.size else np.zeros(0, np.int64)
    stats = {
        "algorithm": options.algorithm, "bin_scope": "shard", "shards": len(bounds) - 1,
        "shard_rows": options.rows_per_shard, "num_bins": int(size.size),
        "lower_bound": int(-(-int(runtime.sum()) // options.pack_size)),
        "efficiency": float(sums.sum() / (size.size * options.pack_size)) if size.size else 0.0,
        "max_items_per_bin": max(fills, default=0), "min_bin_fill": int(sums.min()) if sums.size else 0,
    }
    return Bins(order, offsets, stats), bounds


def bridge_metadata(runtime: np.ndarray, order: np.ndarray, offsets: np.ndarray, pack_size: int) -> dict[str, Any]:
    """Megatron-Bridge's pack metadata for one split (six keys, its order and rounding);
    pack ``p`` holds samples ``order[offsets[p]:offsets[p+1]]``."""
    from seqpack.packing.offline.bridge_compat import bridge_pack_metadata

    runtime = np.asarray(runtime, dtype=np.int64)
    sums = np.add.reduceat(runtime[order], offsets[:-1]).tolist() if order.size else []
    counts = np.diff(offsets).tolist()
    return bridge_pack_metadata(sums, counts, pack_size, int(runtime.max()) if runtime.size else 0)

# ------------------------------------------------------------------------------------------------
# Fingerprint and layout
# ------------------------------------------------------------------------------------------------


def _canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _tokenizer_dir_name(tokenizer: Any) -> str:
    name = getattr(tokenizer, "name", None) or type(tokenizer).__name__
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(name)).strip("-") or "tokenizer"


def _draws_digest(stream: Any) -> str:
    """SHA-256 of the draw order (source ids, then row ids), hashed from the arrays' buffers (no copy)."""
    h = hashlib.sha256()
    h.update(memoryview(np.ascontiguousarray(stream.source_ids)).cast("B"))
    h.update(memoryview(np.ascontiguousarray(stream.row_ids)).cast("B"))
    return h.hexdigest()


def fingerprint(
    streams: Mapping[str, Any], options: OfflinePackOptions, schema: Any, tokenizer: Any
) -> str:
    """SHA-256 over everything that changes pack membership (inputs by content, not by path)."""
    payload = {
        "format": FORMAT,
        "inputs": {
            split: {
                "sources": [{"sha256": s.sha256, "weight": s.weight, "rows": s.rows} for s in stream.sources],
                "draws": _draws_digest(stream),
            }
            for split, stream in streams.items()
        },
        "options": options.to_dict(),
        "schema": {"type": type(schema).__name__, **schema.to_dict()},
        "tokenizer": tokenizer.fingerprint(),
    }
    return hashlib.sha256(_canonical_json(payload).encode()).hexdigest()
