"""Multimodal rotary embedding (M-RoPE, Qwen2-VL's layout) for the reference model.

The head dimension's ``d/2`` rotary frequencies are split into three consecutive sections
``(temporal, height, width)`` (``mrope_section``, summing to ``d/2``); frequency ``j`` rotates by
the position id of its section's axis. Qwen2-VL splits ``d/2 = 64`` as ``(16, 24, 24)``; the
reference model uses a small split of its own head size. With the three axes equal (text), the
rotation equals plain RoPE (:func:`seqpack.training.rope.apply_rope`), which is why a text
batch gives the same numbers with either option.

Position ids come from :mod:`seqpack.data.vlm.mrope` (per sequence, restarting at 0) through the
batch key ``mrope_position_ids`` ``[3, 1, T]``; the model reads them per token, as its token input
:data:`TOKEN_INPUT` ``[..., T, 3]`` (:func:`token_positions`), so they stack with the other
per-token tensors of a row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, UsageError
from seqpack.training.rope import rope_tables, rotate

__all__ = ["TOKEN_INPUT", "apply_mrope", "check_section", "mrope_tables", "section_axes", "token_positions"]

#: The model's per-token input of M-RoPE ids: int64 ``[..., T, 3]`` (temporal, height, width).
TOKEN_INPUT = "mrope_positions"


def check_section(section: Sequence[int], head_dim: int) -> tuple[int, int, int]:
    """``section`` as three positive ints summing to ``head_dim / 2`` (UsageError otherwise)."""
    if len(section) != 3:
        raise UsageError(f"mrope_section needs 3 entries (temporal, height, width), got {list(section)}",
                         field="mrope_section")
    parts = tuple(positive_int("mrope_section", s) for s in section)
    if sum(parts) != head_dim // 2:
        raise UsageError(f"mrope_section {list(parts)} must sum to head_dim/2 = {head_dim // 2}",
                         field="mrope_section")
    return parts  # type: ignore[return-value]


def section_axes(section: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """The axis (0 temporal, 1 height, 2 width) of every rotary frequency, int64 ``[d/2]``."""
    return torch.repeat_interleave(torch.arange(3, device=device), torch.as_tensor(list(section), device=device))


def mrope_tables(
    position_ids: torch.Tensor, head_dim: int, base: float, section: Sequence[int], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` ``[..., T, 1, head_dim / 2]`` of the M-RoPE angles of ``position_ids``
    ``[3, ..., T]``: frequency ``j`` takes the angle of its section's axis (tables for
    :func:`~seqpack.training.rope.rotate`)."""
    half = head_dim // 2
    axes = section_axes(section, position_ids.device)
    freq = torch.arange(half, device=position_ids.device)
    cos, sin = rope_tables(position_ids, head_dim, base, dtype)  # [3, ..., T, 1, half]
    return cos.movedim(0, -1)[..., freq, axes], sin.movedim(0, -1)[..., freq, axes]


def apply_mrope(x: torch.Tensor, position_ids: torch.Tensor, base: float, section: Sequence[int]) -> torch.Tensor:
    """Rotate ``x`` ``[..., T, heads, d]`` by M-RoPE angles of ``position_ids`` ``[3, ..., T]``
    (rotate-half convention, as :func:`~seqpack.training.rope.apply_rope`)."""
    if position_ids.shape[0] != 3 or position_ids.shape[1:] != x.shape[:-2]:
        raise UsageError(f"M-RoPE position ids must have shape [3, {', '.join(map(str, x.shape[:-2]))}], got "
                         f"{list(position_ids.shape)}", field="mrope_position_ids")
    return rotate(x, mrope_tables(position_ids, x.shape[-1], base, section, x.dtype))


def token_positions(batch: Mapping[str, Any]) -> torch.Tensor:
    """The :data:`TOKEN_INPUT` ``[1, T, 3]`` of a canonical batch: its ``mrope_position_ids``
    ``[3, 1, T]`` axes last, or for a batch without them (text) its ``position_ids`` on all three axes."""
    key = "mrope_position_ids" if "mrope_position_ids" in batch else "position_ids"
    value = batch.get(key)
    if not isinstance(value, torch.Tensor):
        raise InputError(f"batch needs a tensor '{key}'", field=key)
    if key == "mrope_position_ids":
        if value.dim() != 3 or value.shape[0] != 3 or value.shape[1] != 1:
            raise InputError(f"'{key}' must have shape [3, 1, T], got {list(value.shape)}", field=key)
        return value.movedim(0, -1)
    if value.dim() != 2 or value.shape[0] != 1:
        raise InputError(f"'{key}' must have shape [1, T], got {list(value.shape)}", field=key)
    return value[..., None].expand(-1, -1, 3)
