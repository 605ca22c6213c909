"""Index arithmetic on flat arrays of variable-length pieces (no per-piece Python loop)."""

from __future__ import annotations

import numpy as np


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` as one ``int64`` array.

    ``lengths`` must be non-negative; zero-length pieces contribute nothing.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    # position k of the output belongs to piece p: value = starts[p] + (k - ends[p] + lengths[p])
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


def alternating_runs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Booleans over ``sum(first) + sum(second)`` positions: ``first[i]`` True then ``second[i]`` False, for
    every ``i`` in turn (e.g. the real tokens and the padding of consecutive slots)."""
    first = np.asarray(first, dtype=np.int64)
    counts = np.stack([first, np.asarray(second, dtype=np.int64)], axis=1).ravel()
    return np.repeat(np.tile(np.array([True, False]), first.size), counts)


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """``[0, l0, l0 + l1, ...]`` as ``int64`` (length ``n + 1``)."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])
    return out


__all__ = ["alternating_runs", "concat_ranges", "offsets_of"]
