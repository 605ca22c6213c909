"""Context-parallel split of a packed THD row (Transformer Engine's partition rule, in torch).

Rule: every physical sequence of length ``L`` is cut into ``2*CP`` equal chunks of ``L/(2*CP)``
tokens; rank ``r`` keeps chunk ``r`` followed by chunk ``2*CP-1-r`` (an early chunk paired with a
late one, so causal-attention work is balanced), and the sequences are concatenated in order. Each
rank holds ``T/CP`` tokens, and sequence ``i`` occupies ``[cu[i]/CP, cu[i+1]/CP)`` of a rank's slice.

Transformer Engine only asserts the divisibility of every boundary inside its CUDA kernel; here a
violation is an :class:`AlignmentError` that names the sequence, its length, the required multiple
and the fix (pad each sequence to ``pad_seq_to_mult`` from ``derive_alignment``).

As in Transformer Engine (``thd_get_partitioned_indices`` checks ``kInt32``), boundary *tensors*
must be int32: an int64 tensor is an :class:`InputError` here, not a silent conversion. Python lists
and numpy arrays are read as values. ``slice_thd_batch_for_cp(..., cp_group=g)`` also checks that
the process group's rank and size are the ones requested, as Megatron-Bridge's packed CP
partitioning does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from seqpack.core.alignment import cp_multiple
from seqpack.core.arguments import is_int, positive_int
from seqpack.core.errors import AlignmentError, InputError, UsageError
from seqpack.packing.visual_keys import ROW_VISUAL_KEYS
from seqpack.training.boundaries import boundary_vector, check_boundaries, physical_boundaries_for_cp

__all__ = ["AXES_FIRST_KEYS", "CP_METADATA_KEYS", "slice_thd_batch_for_cp", "thd_partition_indices"]

#: Keys that describe the whole row and are never sliced (besides anything starting with ``cu_seqlens``
#: or ``max_seqlen``, or ending in ``_argmin``): bookkeeping, and a VLM row's patch rows and grids.
CP_METADATA_KEYS: frozenset[str] = frozenset({"token_count", "attention_mask", "total_tokens", *ROW_VISUAL_KEYS})
#: Per-token keys laid out axes first, ``[k, 1, T]`` (M-RoPE ids, Hugging Face's layout): sliced along dim 2.
AXES_FIRST_KEYS: frozenset[str] = frozenset({"mrope_position_ids"})


def _check_topology(cp_size: Any, cp_rank: Any) -> tuple[int, int]:
    cp_size = positive_int("cp_size", cp_size)
    if not is_int(cp_rank) or not 0 <= cp_rank < cp_size:
        raise UsageError(
            f"cp_rank must be an integer in [0, {cp_size - 1}] for cp_size={cp_size}, got {cp_rank!r}",
            field="cp_rank",
        )
    return cp_size, cp_rank


def _fix(cp_size: int) -> str:
    return (
        f"pad every packed sequence to a multiple of {cp_multiple(cp_size)} "
        f"(pad_seq_to_mult from derive_alignment(cp={cp_size}); include TP/SP and eval CP) and rebuild the packs"
    )


def thd_partition_indices(
    cu_seqlens_padded: Any, cp_size: int, cp_rank: int, *, total_tokens: int | None = None
) -> torch.Tensor:
    """Positions (int64, on the boundaries' device) of the THD row that CP rank ``cp_rank`` holds.

    ``cu_seqlens_padded`` are the physical boundaries (1-D or ``[1, N]``); ``total_tokens``
    defaults to their last entry and must equal it when given. With ``cp_size == 1`` the result
    is ``arange(T)``. Raises AlignmentError when ``T`` or a sequence length is not a multiple of
    ``2*cp_size``.

    >>> thd_partition_indices([0, 8, 12, 16], 2, 0).tolist()
    [0, 1, 6, 7, 8, 11, 12, 15]
    """
    cp_size, cp_rank = _check_topology(cp_size, cp_rank)
    _check_int32(cu_seqlens_padded, "cu_seqlens_padded")
    cu = boundary_vector(cu_seqlens_padded, "cu_seqlens_padded")
    check_boundaries(cu, "cu_seqlens_padded")
    cu = cu.to(torch.int64)
    end = int(cu[-1].item())
    if total_tokens is not None and int(total_tokens) != end:
        raise AlignmentError(
            f"the row has {total_tokens} tokens but its physical boundaries end at {end}; "
            "tokens past the last boundary would be split wrongly",
            field="cu_seqlens_padded",
            fix="add the tail as its own (padding) sequence, or drop it",
        )
    if cp_size == 1:
        return torch.arange(end, dtype=torch.int64, device=cu.device)
    multiple = 2 * cp_size
    lengths = cu[1:] - cu[:-1]
    bad = torch.nonzero(lengths % multiple)
    if bad.numel():
        i = int(bad[0, 0].item())
        more = bad.numel() - 1
        others = f" ({more} more sequence(s) also misaligned)" if more else ""
        raise AlignmentError(
            f"sequence {i} has physical length {int(lengths[i])}, not a multiple of 2*CP={multiple} "
            f"(CP={cp_size}){others}",
            field="cu_seqlens_padded",
            fix=_fix(cp_size),
        )
    # every length divisible by 2*CP implies T = sum of lengths is divisible too (TE checks T first)
    chunk = lengths // multiple
    seq = torch.repeat_interleave(torch.arange(lengths.numel(), device=cu.device), 2 * chunk)
    local_start = torch.cumsum(2 * chunk, 0) - 2 * chunk
    within = torch.arange(seq.numel(), device=cu.device) - local_start[seq]
    c = chunk[seq]
    second = within >= c
    chunk_index = torch.where(second, multiple - 1 - cp_rank, cp_rank)
    return cu[:-1][seq] + chunk_index * c + within - second.to(torch.int64) * c


def _check_int32(value: Any, field: str) -> None:
    if isinstance(value, torch.Tensor) and value.dtype != torch.int32:
        raise InputError(
            f"{field} is a {value.dtype} tensor; Transformer Engine's THD partition only takes int32 boundaries",
            field=field,
            fix="build boundaries as int32 (the canonical THD batch does), or convert with .to(torch.int32)",
        )


def _check_group(cp_group: Any, cp_size: int, cp_rank: int) -> None:
    """The process group must be the one the caller names (Megatron-Bridge's packed CP partitioning check)."""
    if cp_group is None:
        return
    try:
        g_rank, g_size = int(cp_group.rank()), int(cp_group.size())
    except (AttributeError, TypeError) as exc:
        raise UsageError(f"cp_group must be a process group with rank() and size(): {exc}", field="cp_group") from exc
    if (g_rank, g_size) != (cp_rank, cp_size):
        raise UsageError(
            f"the context-parallel group has rank {g_rank} and size {g_size}, but rank {cp_rank} and size "
            f"{cp_size} were requested",
            field="cp_group",
            fix="pass the CP group of this rank, or the rank and size it reports",
        )


def _is_metadata(key: str) -> bool:
    return key.startswith(("cu_seqlens", "max_seqlen")) or key.endswith("_argmin") or key in CP_METADATA_KEYS


def slice_thd_batch_for_cp(
    batch: Mapping[str, Any], cp_size: int, cp_rank: int, *, cp_group: Any = None
) -> dict[str, Any]:
    """The part of a packed THD micro-batch that CP rank ``cp_rank`` holds.

    Every per-token tensor (``[1, T, ...]``: tokens, labels, loss_mask, position_ids, padding_mask,
    ``vision_index``, extra keys) is index-selected along dim 1 with :func:`thd_partition_indices`
    over the padded boundaries (the real ones when no padded array exists; legacy ``cu_seqlens``
    trimmed before its sentinels); the axes-first M-RoPE ids ``[3, 1, T]`` along dim 2. Boundary
    arrays, ``max_seqlen*`` and a VLM row's patch rows and grids stay global; non-tensor values and
    ``None`` are copied. With ``cp_size == 1`` a shallow copy is returned. ``cp_group`` (a process
    group, optional) must report exactly ``cp_rank`` and ``cp_size``. Boundary tensors must be int32.
    """
    cp_size, cp_rank = _check_topology(cp_size, cp_rank)
    _check_group(cp_group, cp_size, cp_rank)
    if not isinstance(batch, Mapping):
        raise UsageError(f"batch must be a mapping of names to tensors, got {type(batch).__name__}")
    out = dict(batch)
    if cp_size == 1:
        return out
    physical = physical_boundaries_for_cp(batch)
    for key in ("cu_seqlens_q_padded", "cu_seqlens_q", "cu_seqlens", "cu_seqlens_kv_padded", "cu_seqlens_kv"):
        _check_int32(batch.get(key), key)
    tokens = batch.get("tokens")
    if not isinstance(tokens, torch.Tensor):
        raise InputError("batch has no tokens tensor to slice", field="tokens")
    total = int(tokens.shape[1])
    index = thd_partition_indices(physical.to(torch.int32), cp_size, cp_rank, total_tokens=total)
    for key, value in batch.items():
        if _is_metadata(key) or not isinstance(value, torch.Tensor):
            continue
        if key in AXES_FIRST_KEYS:
            if value.dim() != 3 or value.shape[1] != 1 or value.shape[2] != total:
                raise InputError(f"expected [k, 1, {total}] (axes first), got {list(value.shape)}", field=key)
            out[key] = value.index_select(2, index.to(value.device))
            continue
        if value.dim() < 2 or value.shape[0] != 1 or value.shape[1] != total:
            raise InputError(
                f"per-token tensor has shape {list(value.shape)}; expected [1, {total}, ...] like tokens "
                "(a packed THD micro-batch is one physical row)",
                field=key,
            )
        out[key] = value.index_select(1, index.to(value.device))
    return out

