"""A CPU stand-in for Transformer Engine's ``thd_get_partitioned_indices`` and a fake CP group.

The lane has no Transformer Engine (its kernel needs CUDA), so Megatron-Core's
``megatron.core.utils.tex`` is ``None`` there. To run Megatron-Bridge's and Megatron-Core's
context-parallel glue on CPU, :func:`te_stand_in` puts an object whose
``thd_get_partitioned_indices`` follows TE's documented contract in its place and restores the
original afterwards, and :func:`fake_cp_group` opens torch's single-process ``fake`` backend as a
group of the requested size and rank.

The contract (TE ``thd_get_partitioned_indices(cu_seqlens, total_tokens, world_size, rank)``):

* host checks: ``cu_seqlens`` is a 1-D int32 tensor with at least two entries; ``world_size > 0``
  and ``0 <= rank < world_size``; ``total_tokens > 0`` and divisible by ``2 * world_size``;
* a device-side assertion that every boundary is divisible by ``2 * world_size``;
* each sequence ``[s, e)`` is cut into ``2 * world_size`` chunks of ``c = (e - s) / (2 * world_size)``
  tokens; rank ``r`` takes chunk ``r`` then chunk ``2 * world_size - 1 - r``, sequences in order;
  the result is int32 with ``total_tokens / world_size`` entries;
* ``total_tokens`` is meant to be ``cu_seqlens[-1]``; for any other value the kernel's output is
  not defined by the contract (tokens past the last boundary get overlapping indices), so the
  stand-in raises :class:`OutsideTEContract` there instead of inventing an answer.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch


class OutsideTEContract(RuntimeError):
    """The inputs are outside what Transformer Engine's partition defines (its output is garbage there)."""


def thd_get_partitioned_indices(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int, rank: int) -> torch.Tensor:
    """Indices of the THD stream that CP rank ``rank`` holds, per the contract in the module docstring."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32:
        raise RuntimeError(f"cu_seqlens must be int32, got {getattr(cu_seqlens, 'dtype', type(cu_seqlens))}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise RuntimeError(f"cu_seqlens must be 1-D with at least 2 entries, got shape {tuple(cu_seqlens.shape)}")
    if world_size <= 0 or not 0 <= rank < world_size:
        raise RuntimeError(f"bad rank {rank} for world size {world_size}")
    chunks = 2 * world_size
    if total_tokens <= 0 or total_tokens % chunks:
        raise RuntimeError(f"total_tokens {total_tokens} must be positive and divisible by {chunks}")
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if any(b % chunks for b in bounds):
        raise RuntimeError(f"device-side assert: a boundary of {bounds} is not divisible by {chunks}")
    if bounds[-1] != total_tokens:
        raise OutsideTEContract(f"total_tokens {total_tokens} differs from the last boundary {bounds[-1]}")
    taken: list[int] = []
    for start, end in zip(bounds, bounds[1:]):
        c = (end - start) // chunks
        for chunk in (rank, chunks - 1 - rank):
            taken.extend(range(start + chunk * c, start + (chunk + 1) * c))
    return torch.tensor(taken, dtype=torch.int32)


@contextlib.contextmanager
def te_stand_in() -> Iterator[None]:
    """``megatron.core.utils.tex`` replaced by the stand-in for the duration of the block."""
    import megatron.core.utils as mcore_utils

    saved = mcore_utils.tex
    mcore_utils.tex = types.SimpleNamespace(thd_get_partitioned_indices=thd_get_partitioned_indices)
    try:
        yield
    finally:
        mcore_utils.tex = saved


@contextlib.contextmanager
def fake_cp_group(size: int, rank: int) -> Iterator[torch.distributed.ProcessGroup]:
    """The default group of torch's single-process ``fake`` backend, of ``size`` ranks, seen from ``rank``."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
