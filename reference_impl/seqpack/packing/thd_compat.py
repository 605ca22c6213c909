"""Adapters between the canonical THD micro-batch and the forms Megatron-Bridge produces or reads.

Canonical batches come only from :func:`seqpack.packing.thd.build_thd_batch`; this module
translates, it never lays out sequences itself.

Forms handled here:

* Bridge's offline packed batch (``GPTSFTPackedDataset.collate_fn``): ``[B, N]`` int32 boundary
  arrays, ``max_seqlen_*`` int32 ``[B, 1]`` (``[B]`` with ``pad_cu_seqlens``), int64 loss mask,
  ``token_count``, ``attention_mask=None`` -- :func:`to_bridge_offline_batch` /
  :func:`from_bridge_offline_batch`;
* the legacy key names (``cu_seqlens``, ``cu_seqlens_unpadded``, ``*_argmin``, ``max_seqlen``,
  ``-1`` sentinels) -- :func:`to_legacy_batch` / :func:`from_legacy_batch`;
* stored packed rows and right-padded batches: :mod:`seqpack.packing.thd_collate`.

Where the canonical form deliberately differs from a Bridge form, the function docstrings say so
under "Differs from Bridge".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from seqpack.core.errors import SeqpackError, UsageError
from seqpack.packing.thd import (
    RESERVED_KEYS,
    padding_mask_from_lengths,
    segment_lengths,
    validate_thd_batch,
)

__all__ = [
    "BRIDGE_OFFLINE_KEYS",
    "LEGACY_KEYS",
    "from_bridge_offline_batch",
    "from_legacy_batch",
    "to_bridge_offline_batch",
    "to_legacy_batch",
]

#: Keys of Bridge's offline packed batch (``cu_seqlens_*_padded`` only when ``m > 1``).
BRIDGE_OFFLINE_KEYS: tuple[str, ...] = (
    "tokens",
    "labels",
    "loss_mask",
    "position_ids",
    "token_count",
    "padding_mask",
    "attention_mask",
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "max_seqlen_q",
    "max_seqlen_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
)

#: Boundary keys of the legacy (pre ``cu_seqlens_q``) packed batch.
LEGACY_KEYS: tuple[str, ...] = (
    "cu_seqlens",
    "cu_seqlens_argmin",
    "cu_seqlens_unpadded",
    "cu_seqlens_unpadded_argmin",
    "max_seqlen",
)

_ROW_TENSOR_KEYS: tuple[str, ...] = (
    "tokens", "labels", "loss_mask", "position_ids", "padding_mask"
)
_CANONICAL_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int64,
    "labels": torch.int64,
    "loss_mask": torch.float32,
    "position_ids": torch.int64,
    "padding_mask": torch.bool,
}


# ------------------------------------------------------------------------------------------------
# shared helpers


def _physical_logical(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(logical, physical) boundary arrays of a canonical batch as int64 numpy arrays."""
    logical_len, physical_len = segment_lengths(batch)
    logical = np.concatenate(([0], np.cumsum(logical_len)))
    physical = np.concatenate(([0], np.cumsum(physical_len)))
    return logical, physical


def _extend_repeat(arr: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate((arr, np.full(size - arr.size, arr[-1], dtype=arr.dtype)))


def _logical_from_padding(mask: np.ndarray, physical: np.ndarray, *, where: str) -> np.ndarray:
    """Logical boundaries implied by a padding mask that is 'real prefix, padding suffix' per
    physical sequence; UsageError if the mask has another shape."""
    real = np.concatenate(([0], np.cumsum(~mask, dtype=np.int64)))
    counts = real[physical[1:]] - real[physical[:-1]]
    if not np.array_equal(padding_mask_from_lengths(physical[:-1], counts, mask.size), mask):
        raise UsageError(
            f"{where}: padding_mask is not 'real tokens first, padding after' inside every "
            "sequence, so the logical boundaries cannot be recovered",
            field="padding_mask",
        )
    return np.concatenate(([0], np.cumsum(counts)))


def _assemble(
    rows: Mapping[str, torch.Tensor],
    logical: np.ndarray,
    physical: np.ndarray,
    max_seqlen: int,
    extras: Mapping[str, Any],
) -> dict[str, Any]:
    """A canonical dict from row tensors and boundaries (padded keys only when they differ)."""
    cu_q = torch.from_numpy(logical.astype(np.int32))
    batch: dict[str, Any] = {key: rows[key] for key in _ROW_TENSOR_KEYS}
    batch["cu_seqlens_q"] = cu_q
    batch["cu_seqlens_kv"] = cu_q.clone()
    if not np.array_equal(logical, physical):
        cu_p = torch.from_numpy(physical.astype(np.int32))
        batch["cu_seqlens_q_padded"] = cu_p
        batch["cu_seqlens_kv_padded"] = cu_p.clone()
    batch["max_seqlen_q"] = int(max_seqlen)
    batch["max_seqlen_kv"] = int(max_seqlen)
    batch.update(extras)
    return batch


def _one_value(value: Any, *, field: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise UsageError(
                f"expected exactly one value, got shape {tuple(value.shape)}", field=field
            )
        return int(value.reshape(-1)[0].item())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise UsageError(
        f"expected an int or a one-element tensor, got {type(value).__name__}", field=field
    )


def _extra_keys(batch: Mapping[str, Any]) -> list[str]:
    return [k for k in batch if k not in RESERVED_KEYS]


# ------------------------------------------------------------------------------------------------
# Bridge offline batch form


def to_bridge_offline_batch(
    batches: Sequence[Mapping[str, Any]],
    *,
    emit_padded_keys: bool,
    pad_cu_seqlens: bool = False,
    token_counts: Sequence[int] | None = None,
    emit_padding_mask: bool = False,
) -> dict[str, Any]:
    """Stack canonical batches (one per row, equal widths) into Bridge's offline batch form.

    ``emit_padded_keys`` mirrors Bridge's ``pad_seq_to_mult > 1`` switch: when True,
    ``cu_seqlens_q`` holds logical boundaries and ``cu_seqlens_q_padded`` physical ones (a copy of
    the logical array for a row without a padded variant); when False only ``cu_seqlens_q`` is
    written and it holds the *physical* boundaries. ``emit_padding_mask`` adds the bool ``[B, L]``
    ``padding_mask`` (True = not a real token) of Megatron-Bridge main (as read at 067f987); the
    released megatron-bridge 0.6.2 collate has no such key, so by default it is left out (checked in
    the upstream lane). Boundary arrays of all rows are widened to one length by repeating each
    array's last value. ``max_seqlen_*`` is int32 ``[B, 1]``, or ``[B]`` with ``pad_cu_seqlens``.
    ``loss_mask`` becomes int64 (values must be whole numbers). ``token_counts`` defaults, per
    row, to the physical end of the last sequence with a real token.

    Extra ``[1, T]`` keys are stacked like ``tokens``. As in Bridge, the q/kv (and padded q/kv)
    entries are the same tensor object.

    Differs from Bridge: the canonical batch is one row; this form is the ``[B, L]`` global batch
    the Bridge collate returns. The canonical form always keeps logical and physical boundaries
    apart, whereas Bridge with ``pad_seq_to_mult == 1`` treats the width padding as one more real
    sequence in ``cu_seqlens_q``.
    """
    if isinstance(batches, Mapping) or len(batches) == 0:
        raise UsageError(
            "batches must be a non-empty sequence of canonical batches", field="batches"
        )
    if token_counts is not None and len(token_counts) != len(batches):
        raise UsageError(
            f"token_counts has {len(token_counts)} entries for {len(batches)} batches",
            field="token_counts",
        )
    width = int(batches[0]["tokens"].shape[1])
    extras = _extra_keys(batches[0])
    arrays: list[tuple[np.ndarray, np.ndarray]] = []
    for r, batch in enumerate(batches):
        validate_thd_batch(batch)
        if int(batch["tokens"].shape[1]) != width:
            raise UsageError(
                f"all rows must have one width; row {r} has {batch['tokens'].shape[1]}, "
                f"row 0 has {width}", row=r, field="tokens",
            )
        if _extra_keys(batch) != extras:
            raise UsageError(f"row {r} has extra keys {_extra_keys(batch)}, row 0 {extras}", row=r)
        arrays.append(_physical_logical(batch))
    size = max(max(lg.size, ph.size) for lg, ph in arrays)

    def stack(key: str) -> torch.Tensor:
        return torch.cat([b[key] for b in batches], dim=0)

    loss = stack("loss_mask")
    if not torch.equal(loss, loss.round()):
        raise UsageError(
            "Bridge's int64 loss_mask cannot hold fractional weights", field="loss_mask"
        )
    out: dict[str, Any] = {
        "tokens": stack("tokens"),
        "labels": stack("labels"),
        "loss_mask": loss.to(torch.int64),
        "position_ids": stack("position_ids"),
    }
    if token_counts is None:
        counts = []
        for logical, physical in arrays:
            has_real = np.flatnonzero(np.diff(logical) > 0)
            counts.append(int(physical[has_real[-1] + 1]) if has_real.size else 0)
    else:
        counts = [int(c) for c in token_counts]
    out["token_count"] = counts
    if emit_padding_mask:
        out["padding_mask"] = stack("padding_mask")
    out["attention_mask"] = None
    if emit_padded_keys:
        cu = np.stack([_extend_repeat(lg, size) for lg, _ in arrays])
        physical = np.stack([_extend_repeat(ph, size) for _, ph in arrays])
        cu_padded = torch.from_numpy(physical.astype(np.int32))
    else:
        cu = np.stack([_extend_repeat(ph, size) for _, ph in arrays])
        cu_padded = None
    cu_t = torch.from_numpy(cu.astype(np.int32))
    out["cu_seqlens_q"] = cu_t
    out["cu_seqlens_kv"] = cu_t
    max_values = torch.tensor([int(b["max_seqlen_q"]) for b in batches], dtype=torch.int32)
    max_t = max_values if pad_cu_seqlens else max_values.unsqueeze(1)
    out["max_seqlen_q"] = max_t
    out["max_seqlen_kv"] = max_t
    if cu_padded is not None:
        out["cu_seqlens_q_padded"] = cu_padded
        out["cu_seqlens_kv_padded"] = cu_padded
    for key in extras:
        out[key] = stack(key)
    return out


def from_bridge_offline_batch(
    batch: Mapping[str, Any], *, trim_trailing_empty: bool = False
) -> list[dict[str, Any]]:
    """Split Bridge's offline batch form into canonical batches, one per row.

    Physical boundaries are ``cu_seqlens_q_padded`` when present, else ``cu_seqlens_q``; logical
    ones are ``cu_seqlens_q`` when a padded variant exists, else they are recovered from
    ``padding_mask`` (real prefix of every physical sequence). ``max_seqlen_*`` is taken as given
    (``[B, 1]`` or ``[B]``). ``token_count`` and ``attention_mask`` (must be None) are dropped:
    the first is implied by the boundaries. With ``trim_trailing_empty`` the zero-length trailing
    sequences that width equalization (or ``pad_cu_seqlens``) appended are removed again.
    Other ``[B, L]`` tensor keys are carried per row.
    """
    for key in ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens_q"):
        if not isinstance(batch.get(key), torch.Tensor):
            raise UsageError(
                "not a Bridge offline batch with boundaries (collate with return_cu_seqlen=True)",
                field=key,
            )
    if batch.get("attention_mask") is not None:
        raise UsageError("expected attention_mask=None in a THD batch", field="attention_mask")
    tokens = batch["tokens"]
    if tokens.dim() != 2:
        raise UsageError(f"expected tokens [B, L], got {tuple(tokens.shape)}", field="tokens")
    num_rows, width = int(tokens.shape[0]), int(tokens.shape[1])
    cu_q = batch["cu_seqlens_q"].detach().cpu().numpy().astype(np.int64)
    padded = batch.get("cu_seqlens_q_padded")
    cu_p = None if padded is None else padded.detach().cpu().numpy().astype(np.int64)
    same_shape = cu_p is None or cu_p.shape == cu_q.shape
    if cu_q.ndim != 2 or cu_q.shape[0] != num_rows or not same_shape:
        raise UsageError(
            f"boundary arrays must be [B, N] with B={num_rows} and equal shapes",
            field="cu_seqlens_q",
        )
    max_t = batch.get("max_seqlen_q")
    if not isinstance(max_t, torch.Tensor) or max_t.numel() != num_rows:
        raise UsageError(
            f"max_seqlen_q must hold one value per row ({num_rows})", field="max_seqlen_q"
        )
    max_values = max_t.reshape(-1).tolist()
    pad = batch.get("padding_mask")
    known = set(BRIDGE_OFFLINE_KEYS)
    extras = [k for k in batch if k not in known]
    for key in extras:
        value = batch[key]
        if not (isinstance(value, torch.Tensor) and tuple(value.shape[:2]) == (num_rows, width)):
            raise UsageError(
                f"unexpected key '{key}' that is not a [B, L] tensor; handle it before converting",
                field=key,
            )
    out = []
    for r in range(num_rows):
        where = f"row {r}"
        rows = {
            key: batch[key][r : r + 1].to(_CANONICAL_DTYPES[key])
            for key in ("tokens", "labels", "loss_mask", "position_ids")
        }
        physical = cu_q[r] if cu_p is None else cu_p[r]
        if physical[0] != 0 or np.any(np.diff(physical) < 0) or physical[-1] != width:
            raise UsageError(
                f"{where}: physical boundaries {physical.tolist()} must rise from 0 to {width}",
                row=r, field="cu_seqlens_q" if cu_p is None else "cu_seqlens_q_padded",
            )
        if pad is not None:
            mask = pad[r].detach().cpu().numpy().astype(bool)
        else:
            mask = None
        if cu_p is not None:
            logical = cu_q[r]
        elif mask is not None:
            logical = _logical_from_padding(mask, physical, where=where)
        else:
            logical = physical
        if trim_trailing_empty:
            keep = logical.size
            while (
                keep > 2
                and logical[keep - 1] == logical[keep - 2]
                and physical[keep - 1] == physical[keep - 2]
            ):
                keep -= 1
            logical, physical = logical[:keep], physical[:keep]
        if mask is None:
            mask = padding_mask_from_lengths(physical[:-1], np.diff(logical), width)
        rows["padding_mask"] = torch.from_numpy(mask.copy()).unsqueeze(0)
        extra_rows = {key: batch[key][r : r + 1] for key in extras}
        canonical = _assemble(rows, logical, physical, int(max_values[r]), extra_rows)
        try:
            validate_thd_batch(canonical)
        except SeqpackError as err:
            raise UsageError(f"{where}: {err.message}", row=r, field=err.field) from err
        out.append(canonical)
    return out


# ------------------------------------------------------------------------------------------------
# legacy key names


def to_legacy_batch(batch: Mapping[str, Any], *, capacity: int | None = None) -> dict[str, Any]:
    """Canonical batch -> legacy key names.

    ``cu_seqlens`` holds the physical boundaries and ``cu_seqlens_unpadded`` the logical ones (only
    when they differ), both int32 ``[1, capacity]`` padded with ``-1`` sentinels;
    ``cu_seqlens_argmin`` / ``cu_seqlens_unpadded_argmin`` (int64 ``[1, 1]``) give the number of
    real entries, i.e. the index of the first sentinel (or the array length when there is none);
    ``max_seqlen`` is int32 ``[1, 1]``. Row tensors and extra keys are passed through.
    """
    validate_thd_batch(batch)
    logical, physical = _physical_logical(batch)
    size = physical.size if capacity is None else int(capacity)
    if size < physical.size:
        raise UsageError(
            f"capacity {size} is below the {physical.size} boundary entries", field="capacity"
        )

    def sentinel(arr: np.ndarray) -> torch.Tensor:
        full = np.full(size, -1, dtype=np.int32)
        full[: arr.size] = arr
        return torch.from_numpy(full).unsqueeze(0)

    out: dict[str, Any] = {key: batch[key] for key in _ROW_TENSOR_KEYS}
    out["cu_seqlens"] = sentinel(physical)
    out["cu_seqlens_argmin"] = torch.tensor([[physical.size]], dtype=torch.int64)
    if not np.array_equal(logical, physical):
        out["cu_seqlens_unpadded"] = sentinel(logical)
        out["cu_seqlens_unpadded_argmin"] = torch.tensor([[logical.size]], dtype=torch.int64)
    out["max_seqlen"] = torch.tensor([[int(batch["max_seqlen_q"])]], dtype=torch.int32)
    for key in _extra_keys(batch):
        out[key] = batch[key]
    return out


def _trim_legacy(values: Any, argmin: Any, *, field: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        arr = values.detach().cpu().numpy()
    else:
        arr = np.asarray(values)
    if arr.ndim == 2:
        if arr.shape[0] != 1:
            raise UsageError(
                f"legacy packed batches must have micro-batch size 1, got shape {arr.shape}",
                field=field,
            )
        arr = arr[0]
    if arr.ndim != 1:
        raise UsageError(f"expected [N] or [1, N], got shape {arr.shape}", field=field)
    arr = arr.astype(np.int64)
    if argmin is not None:
        cut = _one_value(argmin, field=f"{field}_argmin")
        if not 0 < cut <= arr.size:
            raise UsageError(f"argmin {cut} outside 1..{arr.size}", field=f"{field}_argmin")
        arr = arr[:cut]
    else:
        negative = np.flatnonzero(arr < 0)
        if negative.size:
            arr = arr[: negative[0]]
    if arr.size < 2 or np.any(arr < 0):
        raise UsageError(
            f"no usable boundaries left after trimming sentinels: {arr.tolist()}", field=field
        )
    return arr


def from_legacy_batch(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Legacy key names -> canonical batch.

    ``cu_seqlens`` (physical) and ``cu_seqlens_unpadded`` (logical, optional) are cut at their
    ``*_argmin`` when given, else before the first negative entry, else kept whole. Without
    ``cu_seqlens_unpadded`` the logical boundaries come from ``padding_mask`` when the batch has
    one, else they equal the physical ones. Row tensors may be ``[T]`` or ``[1, T]``.

    Differs from Bridge: Bridge's parameter builder cuts at ``torch.argmin`` when no argmin is
    given, which empties a sentinel-free array; here such an array is kept whole. A missing
    ``max_seqlen`` becomes the longest physical sequence instead of None.
    """
    if "cu_seqlens" not in batch:
        raise UsageError("not a legacy packed batch: no 'cu_seqlens'", field="cu_seqlens")
    rows: dict[str, torch.Tensor] = {}
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        value = batch.get(key)
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"missing or not a tensor ({type(value).__name__})", field=key)
        if value.dim() == 1:
            value = value.unsqueeze(0)
        if value.dim() != 2 or value.shape[0] != 1:
            raise UsageError(f"expected [T] or [1, T], got {tuple(value.shape)}", field=key)
        rows[key] = value.to(_CANONICAL_DTYPES[key])
    width = int(rows["tokens"].shape[1])
    physical = _trim_legacy(batch["cu_seqlens"], batch.get("cu_seqlens_argmin"), field="cu_seqlens")
    mask_t = batch.get("padding_mask")
    mask = None
    if mask_t is not None:
        mask = mask_t.detach().cpu().numpy().astype(bool).reshape(-1)
        if mask.size != width:
            raise UsageError(
                f"padding_mask has {mask.size} entries for width {width}", field="padding_mask"
            )
    if physical[0] != 0 or np.any(np.diff(physical) < 0) or physical[-1] != width:
        raise UsageError(
            f"physical boundaries {physical.tolist()} must rise from 0 to the width {width}",
            field="cu_seqlens",
        )
    if batch.get("cu_seqlens_unpadded") is not None:
        logical = _trim_legacy(
            batch["cu_seqlens_unpadded"], batch.get("cu_seqlens_unpadded_argmin"),
            field="cu_seqlens_unpadded",
        )
        if logical.size != physical.size:
            raise UsageError(
                f"cu_seqlens_unpadded has {logical.size} boundaries, cu_seqlens {physical.size}",
                field="cu_seqlens_unpadded",
            )
    elif mask is not None:
        logical = _logical_from_padding(mask, physical, where="legacy batch")
    else:
        logical = physical
    if mask is None:
        mask = padding_mask_from_lengths(physical[:-1], np.diff(logical), width)
    rows["padding_mask"] = torch.from_numpy(mask.copy()).unsqueeze(0)
    max_value = batch.get("max_seqlen")
    if max_value is None:
        max_seqlen = int(np.diff(physical).max())
    else:
        max_seqlen = _one_value(max_value, field="max_seqlen")
    ignored = set(LEGACY_KEYS) | set(_ROW_TENSOR_KEYS) | {"attention_mask"}
    if batch.get("attention_mask") is not None:
        raise UsageError("expected attention_mask=None in a THD batch", field="attention_mask")
    extras = {}
    for key in batch:
        if key in ignored:
            continue
        value = batch[key]
        if not (isinstance(value, torch.Tensor) and tuple(value.shape) == (1, width)):
            raise UsageError(f"unexpected key '{key}' that is not a [1, T] tensor", field=key)
        extras[key] = value
    canonical = _assemble(rows, logical, physical, max_seqlen, extras)
    validate_thd_batch(canonical)
    return canonical
