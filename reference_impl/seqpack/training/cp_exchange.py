"""Autograd-aware all-gather of keys and values across a context-parallel group.

Forward: every rank contributes its local ``[T/CP, ...]`` tensor and receives all of them
concatenated in group-rank order. Backward: the gradient each rank computed for the gathered
tensor is summed over the group (every rank's loss depends on every rank's keys) and each rank
keeps the slice of its own contribution. This uses only ``all_gather`` and ``all_reduce``, which
gloo supports on CPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = ["KVExchange", "gather_along_tokens"]


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        ctx.rank = dist.get_rank(group=group)
        ctx.size = dist.get_world_size(group=group)
        ctx.local_len = local.shape[0]
        parts = [torch.empty_like(local) for _ in range(ctx.size)]
        dist.all_gather(parts, local.contiguous(), group=group)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        total = grad.contiguous().clone()
        dist.all_reduce(total, group=ctx.group)
        start = ctx.rank * ctx.local_len
        return total[start : start + ctx.local_len], None


def gather_along_tokens(local: torch.Tensor, group: Any) -> torch.Tensor:
    """Concatenate every rank's ``local`` along dim 0 (rank order), differentiably. Equal shapes required."""
    return _GatherTokens.apply(local, group)


class KVExchange:
    """Callable ``(k, v) -> (k_all, v_all)`` that gathers keys and values over a CP group in one collective."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def __call__(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = gather_along_tokens(torch.cat([k, v], dim=-1), self.group)
        return both[..., : k.shape[-1]], both[..., k.shape[-1] :]
