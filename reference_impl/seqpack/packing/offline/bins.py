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

__all__ = ["aligned_lengths", "bridge_metadata", "fingerprint"]


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
class _Bins:
    """Packs as sample indices: pack ``p`` holds ``order[offsets[p]:offsets[p+1]]`` in placement order."""

    order: np.ndarray
    offsets: np.ndarray
    stats: dict[str, Any]

    @property
    def count(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def _assign(options: OfflinePackOptions, runtime: np.ndarray) -> _Bins:
    """Bins of sample indices (in placement order) and the packing stats."""
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
        return _Bins(order, offsets, stats)
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
    return _Bins(order, offsets, result.stats())


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


def fingerprint(
    streams: Mapping[str, Any], options: OfflinePackOptions, schema: Any, tokenizer: Any
) -> str:
    """SHA-256 over everything that changes pack membership (inputs by content, not by path)."""
    payload = {
        "format": FORMAT,
        "inputs": {
            split: {
                "sources": [{"sha256": s.sha256, "weight": s.weight, "rows": s.rows} for s in stream.sources],
                "draws": hashlib.sha256(stream.source_ids.tobytes() + stream.row_ids.tobytes()).hexdigest(),
            }
            for split, stream in streams.items()
        },
        "options": options.to_dict(),
        "schema": {"type": type(schema).__name__, **schema.to_dict()},
        "tokenizer": tokenizer.fingerprint(),
    }
    return hashlib.sha256(_canonical_json(payload).encode()).hexdigest()
