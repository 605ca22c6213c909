"""Rotary position embedding (RoPE) of the reference model: angle tables and the rotate-half rotation.

Shared by the text model (:mod:`.model`) and multimodal RoPE (:mod:`.mrope`).
"""

from __future__ import annotations

import torch

__all__ = ["apply_rope", "rope_tables", "rotate"]


def rope_tables(position_ids: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` ``[..., T, 1, head_dim / 2]`` of the rotary angles of ``position_ids`` ``[..., T]``."""
    half = head_dim // 2
    inv_freq = base ** (-torch.arange(half, dtype=dtype, device=position_ids.device) / half)
    angles = position_ids.to(dtype)[..., None] * inv_freq
    return angles.cos().unsqueeze(-2), angles.sin().unsqueeze(-2)


def rotate(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate ``x`` ``[..., T, heads, d]`` by :func:`rope_tables` (rotate-half convention)."""
    cos, sin = tables
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def apply_rope(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate ``x`` ``[..., T, heads, d]`` by the angles of ``position_ids`` ``[..., T]`` (rotate-half convention)."""
    return rotate(x, rope_tables(position_ids, x.shape[-1], base, x.dtype))
