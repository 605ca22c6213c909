"""Multimodal rotary position ids (M-RoPE) of Qwen2-VL / Qwen2.5-VL, per sequence and per THD row.

Every token gets three position ids: temporal, height and width. Text tokens count on with the
same value on all three axes; the ``N = t * (h/m) * (w/m)`` tokens of one image or video (``m``
the spatial merge size) get a grid::

    temporal = start + floor(k * interval)   for the k-th temporal slice (k < t)
    height   = start + row                    (row < h/m)
    width    = start + column                 (column < w/m)

in row-major order over (k, row, column). ``interval`` is 1 for images and for Qwen2-VL videos;
for Qwen2.5-VL videos it is ``tokens_per_second * second_per_grid`` (``second_per_grid`` =
temporal_patch_size / fps), computed in float32 and floored as the reference does.

Where the text after a vision block starts is the one place the upstream implementations differ
(:data:`TEXT_AFTER_VISION`):

* ``"max"``: one past the largest id of the block over all three axes. This is what the Qwen
  authors' code and ``transformers`` before 5.3 compute (and Megatron-Bridge's Qwen3-VL helper);
* ``"spatial"``: ``start + max(h, w) / m``, ignoring the temporal extent. ``transformers`` 5.3
  and later compute this (its "unify 3D position ids" change).

The two agree for images (t = 1) and for videos whose temporal extent ``floor((t-1) * interval)``
stays below ``max(h, w) / m``. docs/compatibility.md records the choice (default ``"max"``, what
the released checkpoints were trained with).

Packing (:func:`packed_rope_index`): every sequence of a THD row gets the ids it would have alone,
so they restart at 0 on all three axes at every sequence start; positions in a sequence's alignment
gap count on from its largest id + 1 (the same on all axes, like text); a trailing padding sequence
is all 0. Grids are consumed in row order, sequence by sequence, which is the order
``pixel_values`` are concatenated in.

numpy only (no torch, no transformers); ``tests/test_mrope_differential.py`` compares these
functions with ``transformers``' ``get_rope_index`` where it is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack.core.arguments import positive_float, positive_int
from seqpack.core.choices import TEXT_AFTER_VISION  # where text after a vision block starts
from seqpack.core.errors import InputError, UsageError
from seqpack.core.limits import MAX_TOKENS_PER_SECOND

__all__ = [
    "TEXT_AFTER_VISION",
    "MRopeSpec",
    "packed_rope_index",
    "rope_index",
    "token_types",
]


TEXT, IMAGE, VIDEO = 0, 1, 2


@dataclass(frozen=True)
class MRopeSpec:
    """What M-RoPE ids depend on besides the tokens.

    ``tokens_per_second`` None is Qwen2-VL (temporal interval 1); a number is Qwen2.5-VL (interval
    ``tokens_per_second * second_per_grid`` for videos).
    """

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int = 2
    tokens_per_second: float | None = None
    text_after_vision: str = "max"

    def __post_init__(self) -> None:
        positive_int("spatial_merge_size", self.spatial_merge_size)
        if self.image_token_id == self.video_token_id:
            raise UsageError("image_token_id and video_token_id must differ", field="video_token_id")
        if self.text_after_vision not in TEXT_AFTER_VISION:
            raise UsageError(
                f"unknown text_after_vision {self.text_after_vision!r}; choose one of {', '.join(TEXT_AFTER_VISION)}",
                field="text_after_vision",
            )
        if self.tokens_per_second is not None:
            positive_float("tokens_per_second", self.tokens_per_second, maximum=MAX_TOKENS_PER_SECOND)


def token_types(tokens: Any, image_token_id: int, video_token_id: int) -> np.ndarray:
    """0 (text), 1 (image) or 2 (video) per token, int8 (``transformers``' ``mm_token_type_ids``)."""
    ids = np.asarray(tokens)
    out = np.zeros(ids.shape, dtype=np.int8)
    out[ids == image_token_id] = IMAGE
    out[ids == video_token_id] = VIDEO
    return out


def _grids(value: Any, name: str) -> np.ndarray:
    if value is None:
        return np.zeros((0, 3), dtype=np.int64)
    arr = np.asarray(value)
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu" or np.any(arr < 1):
        raise UsageError(f"{name} must be a [n, 3] array of positive (t, h, w) integers, got shape {list(arr.shape)}",
                         field=name)
    return arr.astype(np.int64)


def _runs(types: np.ndarray) -> list[tuple[int, int, int]]:
    """(type, start, end) of every maximal run of equal token types."""
    if types.size == 0:
        return []
    change = np.flatnonzero(np.diff(types.astype(np.int16))) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [types.size]))
    return [(int(types[s]), int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist())]


class _Cursor:
    """Hands out grids (and video intervals) in order, naming what ran out."""

    def __init__(self, image_grids: np.ndarray, video_grids: np.ndarray, intervals: np.ndarray) -> None:
        self.grids = {IMAGE: image_grids, VIDEO: video_grids}
        self.next = {IMAGE: 0, VIDEO: 0}
        self.intervals = intervals

    def take(self, kind: int) -> tuple[np.ndarray, np.float32]:
        i = self.next[kind]
        grids = self.grids[kind]
        if i >= grids.shape[0]:
            what = "image" if kind == IMAGE else "video"
            raise InputError(f"the tokens hold more {what} blocks than the {grids.shape[0]} {what} grid(s) given",
                             field=f"{what}_grid_thw")
        self.next[kind] = i + 1
        interval = np.float32(1.0) if kind == IMAGE else self.intervals[i]
        return grids[i], interval

    def check_used(self) -> None:
        for kind, what in ((IMAGE, "image"), (VIDEO, "video")):
            if self.next[kind] != self.grids[kind].shape[0]:
                raise InputError(
                    f"{self.grids[kind].shape[0]} {what} grid(s) given but the tokens hold {self.next[kind]} {what} block(s)",
                    field=f"{what}_grid_thw",
                )


def _video_intervals(spec: MRopeSpec, video_grids: np.ndarray, second_per_grid: Any) -> np.ndarray:
    n = video_grids.shape[0]
    if spec.tokens_per_second is None:
        return np.ones(n, dtype=np.float32)
    if second_per_grid is None:
        seconds = np.ones(n, dtype=np.float32)
    else:
        seconds = np.asarray(second_per_grid, dtype=np.float32).reshape(-1)
        if seconds.size != n:
            raise UsageError(f"second_per_grid has {seconds.size} entries for {n} video grid(s)", field="second_per_grid")
    # float32 product, as the reference computes it (tokens_per_second * second_per_grid)
    return (np.float32(spec.tokens_per_second) * seconds).astype(np.float32)


def _sequence_ids(types: np.ndarray, spec: MRopeSpec, cursor: _Cursor) -> np.ndarray:
    """[3, L] ids of one sequence; grids come from ``cursor``."""
    m = spec.spatial_merge_size
    out = np.empty((3, types.size), dtype=np.int64)
    current = 0
    for kind, start, end in _runs(types):
        n = end - start
        if kind == TEXT:
            out[:, start:end] = np.arange(current, current + n, dtype=np.int64)
            current += n
            continue
        grid, interval = cursor.take(kind)
        t, h, w = (int(x) for x in grid)
        if h % m or w % m:
            raise InputError(f"grid (t={t}, h={h}, w={w}) is not divisible by spatial_merge_size={m}", field="grid_thw")
        gh, gw = h // m, w // m
        if n != t * gh * gw:
            what = "image" if kind == IMAGE else "video"
            raise InputError(
                f"an {what} block of {n} tokens at position {start} does not match its grid (t={t}, h={h}, w={w}): "
                f"{t * gh * gw} tokens expected (t * h/{m} * w/{m})",
                field=f"{what}_grid_thw",
            )
        temporal = (np.arange(t, dtype=np.float32) * interval).astype(np.int64)
        block = out[:, start:end].reshape(3, t, gh, gw)
        block[0] = current + temporal[:, None, None]
        block[1] = current + np.arange(gh, dtype=np.int64)[None, :, None]
        block[2] = current + np.arange(gw, dtype=np.int64)[None, None, :]
        if spec.text_after_vision == "max":
            current = int(max(temporal[-1], gh - 1, gw - 1)) + current + 1
        else:
            current += max(h, w) // m
    return out


def rope_index(
    tokens: Any,
    spec: MRopeSpec,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid: Any = None,
) -> np.ndarray:
    """M-RoPE ids ``[3, L]`` (int64) of one sequence (module docstring).

    ``tokens`` is 1-D; every maximal run of image (video) tokens is one image (video) and takes
    the next row of ``image_grid_thw`` (``video_grid_thw``), whose merged size must equal the
    run's length; every grid must be used. ``second_per_grid`` (per video) only matters with
    ``spec.tokens_per_second``. Raises InputError on a mismatch.
    """
    types = token_types(tokens, spec.image_token_id, spec.video_token_id)
    if types.ndim != 1:
        raise UsageError(f"tokens must be 1-D, got shape {list(types.shape)}", field="tokens")
    images = _grids(image_grid_thw, "image_grid_thw")
    videos = _grids(video_grid_thw, "video_grid_thw")
    cursor = _Cursor(images, videos, _video_intervals(spec, videos, second_per_grid))
    out = _sequence_ids(types, spec, cursor)
    cursor.check_used()
    return out


def packed_rope_index(
    tokens: Any,
    cu_seqlens: Sequence[int] | np.ndarray,
    spec: MRopeSpec,
    *,
    cu_seqlens_padded: Sequence[int] | np.ndarray | None = None,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid: Any = None,
) -> np.ndarray:
    """M-RoPE ids ``[3, T]`` of a packed THD row: every sequence restarts at 0 (module docstring).

    ``tokens`` is the row ``[T]``; ``cu_seqlens`` the real-token boundaries and
    ``cu_seqlens_padded`` the physical ones (default: the same). Sequence ``i``'s real tokens are
    ``tokens[p_i : p_i + (c_{i+1} - c_i)]`` with ``p_i`` its physical start. Grids are the
    row's, concatenated in sequence order.
    """
    ids = np.asarray(tokens)
    if ids.ndim != 1:
        raise UsageError(f"tokens must be 1-D, got shape {list(ids.shape)}", field="tokens")
    cu = np.asarray(cu_seqlens, dtype=np.int64).reshape(-1)
    cu_p = cu if cu_seqlens_padded is None else np.asarray(cu_seqlens_padded, dtype=np.int64).reshape(-1)
    if cu.size < 2 or cu_p.shape != cu.shape or cu[0] != 0 or cu_p[0] != 0:
        raise UsageError("cu_seqlens and cu_seqlens_padded must be equal-length boundary arrays starting at 0",
                         field="cu_seqlens")
    real = np.diff(cu)
    physical = np.diff(cu_p)
    if np.any(real < 0) or np.any(physical < real) or int(cu_p[-1]) > ids.size:
        raise UsageError("boundaries must not decrease, real lengths must fit their physical segments, and the "
                         f"last physical boundary ({int(cu_p[-1])}) must not pass the row ({ids.size} tokens)",
                         field="cu_seqlens_padded")
    types = token_types(ids, spec.image_token_id, spec.video_token_id)
    images = _grids(image_grid_thw, "image_grid_thw")
    videos = _grids(video_grid_thw, "video_grid_thw")
    cursor = _Cursor(images, videos, _video_intervals(spec, videos, second_per_grid))
    out = np.zeros((3, ids.size), dtype=np.int64)
    for start, u, p in zip(cu_p[:-1].tolist(), real.tolist(), physical.tolist()):
        if u == 0:
            continue  # an empty or padding sequence: zeros
        seq = _sequence_ids(types[start : start + u], spec, cursor)
        out[:, start : start + u] = seq
        if p > u:
            first = int(seq.max()) + 1
            out[:, start + u : start + p] = np.arange(first, first + p - u, dtype=np.int64)
    if np.any(types[: int(cu_p[-1])][_gap_mask(cu_p, real, int(cu_p[-1]))] != TEXT):
        raise InputError("an image or video token lies in an alignment gap, outside every sequence", field="tokens")
    cursor.check_used()
    return out


def _gap_mask(cu_p: np.ndarray, real: np.ndarray, width: int) -> np.ndarray:
    mask = np.ones(width, dtype=bool)
    for start, u in zip(cu_p[:-1].tolist(), real.tolist()):
        mask[start : start + u] = False
    return mask
