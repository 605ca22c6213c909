"""Token losses and the loss reductions Megatron-Core applies across micro-batches and ranks.

Every rank of the data-parallel x context-parallel group computes, per micro-batch, a masked sum
of token losses ``s`` and a supervised-token count ``n`` over the tokens it holds. What the
optimizer finally applies is the gradient of ``J = sum over (rank, micro-batch) of w * s`` where
the weights ``w`` depend on two settings (Megatron-Core 0.16 schedules, DDP and
finalize_model_grads):

* ``calculate_per_token_loss=True``: each rank back-propagates ``s`` itself, the gradients are
  summed over the group, the counts are all-reduced, and the gradients are divided by the global
  count ``N``: ``w = 1/N``. ``J`` is the mean loss over every supervised token of the step.
* ``calculate_per_token_loss=False``: each micro-batch back-propagates its own mean
  ``s / max(n, 1) / M`` (``M`` micro-batches per rank) and the gradients are averaged over the
  ``R`` ranks: ``w = 1 / (max(n, 1) * M * R)``. ``J`` is a mean of per-rank means.
* ``average_in_collective`` makes the all-reduce average instead of sum. Without per-token loss
  this only moves the ``1/R`` factor into the collective (same ``w``). With per-token loss the
  gradient would be divided by ``R`` on top of ``1/N`` (``w = 1/(N*R)``); Megatron-Core's DDP
  refuses that combination, and Bridge's config check rejects it for CP fine-tuning.

Why context-parallel fine-tuning needs per-token loss: a CP rank holds two chunks of every
sequence, and padding, prompts and masked tokens make the supervised counts differ between ranks.
Only ``w = 1/N`` weights every token equally, as a CP=1 run does; a mean of per-rank means
over-weights the tokens of ranks with few supervised tokens (rules CP-FT-PER-TOKEN-LOSS and
CP-FT-AVG-COLLECTIVE).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.core.errors import InputError, UsageError

__all__ = [
    "LossReduction",
    "all_reduce_loss_pieces",
    "backward_loss",
    "finalize_gradients",
    "masked_loss_pieces",
    "reduce_loss_pieces",
    "reduction_weights",
    "token_cross_entropy",
]


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every position ``[..., V] -> [...]``; exactly 0 where ``loss_mask == 0``.

    Labels at unsupervised positions are never read (they may be -100 or a pad id). A supervised
    label outside ``[0, V)`` raises InputError naming its position.
    """
    if logits.shape[:-1] != labels.shape or labels.shape != loss_mask.shape:
        raise InputError(
            f"logits {list(logits.shape)}, labels {list(labels.shape)} and loss_mask {list(loss_mask.shape)} "
            "do not line up",
            field="labels",
        )
    supervised = loss_mask != 0
    vocab = logits.shape[-1]
    bad = supervised & ((labels < 0) | (labels >= vocab))
    if bool(bad.any()):
        pos = torch.nonzero(bad)[0].tolist()
        raise InputError(
            f"supervised label {int(labels[tuple(pos)])} at position {pos} is outside the vocabulary [0, {vocab})",
            field="labels",
        )
    safe = torch.where(supervised, labels, torch.zeros_like(labels))
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(supervised, nll, torch.zeros_like(nll))


def masked_loss_pieces(token_losses: torch.Tensor, loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum of loss_mask * token_losses, sum of loss_mask)``: the per-micro-batch pieces every reduction uses."""
    mask = loss_mask.to(token_losses.dtype)
    return (token_losses * mask).sum(), mask.sum()


def _as_grid(pieces: Sequence[Any]) -> list[list[tuple[float, float]]]:
    if not isinstance(pieces, Sequence) or not pieces:
        raise UsageError("pieces must be a non-empty list (one entry per rank)", field="pieces")
    grid: list[list[tuple[float, float]]] = []
    for r, rank in enumerate(pieces):
        if not isinstance(rank, Sequence) or not rank:
            raise UsageError(f"rank {r}: expected a (sum, count) pair or a list of them", field="pieces")
        first = rank[0]
        micro = [rank] if not isinstance(first, Sequence) else list(rank)
        row = []
        for m, pair in enumerate(micro):
            if not isinstance(pair, Sequence) or len(pair) != 2:
                raise UsageError(f"rank {r}, micro-batch {m}: expected a (sum, count) pair, got {pair!r}")
            s, n = float(pair[0]), float(pair[1])
            if not (math.isfinite(s) and math.isfinite(n)) or n < 0:
                raise UsageError(f"rank {r}, micro-batch {m}: sum {s} and count {n} must be finite, count >= 0")
            row.append((s, n))
        grid.append(row)
    if len({len(row) for row in grid}) != 1:
        raise UsageError(
            f"every rank must run the same number of micro-batches, got {[len(row) for row in grid]}",
            field="pieces",
        )
    return grid


def reduction_weights(
    counts: Sequence[Sequence[float]], *, calculate_per_token_loss: bool, average_in_collective: bool
) -> list[list[float]]:
    """Weight ``w[rank][micro_batch]`` of each loss sum in the objective whose gradient is applied.

    ``counts[r][m]`` is the supervised-token count of micro-batch ``m`` on rank ``r`` (every rank
    of the data-parallel x context-parallel group, same number of micro-batches each). See the
    module docstring for the formulas.
    """
    ranks = len(counts)
    if ranks == 0 or any(len(row) != len(counts[0]) or not row for row in counts):
        raise UsageError("counts must be a non-empty [rank][micro_batch] grid with equal rows", field="counts")
    micro = len(counts[0])
    if calculate_per_token_loss:
        total = float(sum(sum(row) for row in counts))
        weight = 1.0 / total if total > 0 else 1.0  # nothing supervised: gradients stay unscaled (all zero)
        if average_in_collective:
            weight /= ranks
        return [[weight] * micro for _ in counts]
    return [[1.0 / (max(float(n), 1.0) * micro * ranks) for n in row] for row in counts]


@dataclass(frozen=True)
class LossReduction:
    """Result of :func:`reduce_loss_pieces`.

    ``objective`` is the loss whose gradient the optimizer applies (``sum w * s``);
    ``token_mean`` is the mean loss over every supervised token of the step (the CP=1 per-token
    value); they agree for ``calculate_per_token_loss=True, average_in_collective=False``.
    """

    calculate_per_token_loss: bool
    average_in_collective: bool
    num_ranks: int
    num_microbatches: int
    global_loss_sum: float
    global_token_count: float
    token_counts: tuple[tuple[float, ...], ...]
    weights: tuple[tuple[float, ...], ...]
    objective: float
    token_mean: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (NaN token mean becomes None)."""
        return {
            "calculate_per_token_loss": self.calculate_per_token_loss,
            "average_in_collective": self.average_in_collective,
            "num_ranks": self.num_ranks,
            "num_microbatches": self.num_microbatches,
            "global_loss_sum": self.global_loss_sum,
            "global_token_count": self.global_token_count,
            "token_counts": [list(row) for row in self.token_counts],
            "weights": [list(row) for row in self.weights],
            "objective": self.objective,
            "token_mean": None if math.isnan(self.token_mean) else self.token_mean,
        }


def reduce_loss_pieces(
    pieces: Sequence[Any], *, calculate_per_token_loss: bool, average_in_collective: bool
) -> LossReduction:
    """Reduce per-rank ``(loss_sum, token_count)`` pieces the way Megatron-Core would.

    ``pieces[r]`` is one ``(sum, count)`` pair (one micro-batch) or a list of pairs (one per
    micro-batch) for rank ``r`` of the data-parallel x context-parallel group.
    """
    grid = _as_grid(pieces)
    weights = reduction_weights(
        [[n for _, n in row] for row in grid],
        calculate_per_token_loss=calculate_per_token_loss,
        average_in_collective=average_in_collective,
    )
    total_sum = sum(s for row in grid for s, _ in row)
    total_count = sum(n for row in grid for _, n in row)
    objective = sum(w * s for wrow, row in zip(weights, grid) for w, (s, _) in zip(wrow, row))
    return LossReduction(
        calculate_per_token_loss=bool(calculate_per_token_loss),
        average_in_collective=bool(average_in_collective),
        num_ranks=len(grid),
        num_microbatches=len(grid[0]),
        global_loss_sum=total_sum,
        global_token_count=total_count,
        token_counts=tuple(tuple(n for _, n in row) for row in grid),
        weights=tuple(tuple(row) for row in weights),
        objective=objective,
        token_mean=total_sum / total_count if total_count > 0 else math.nan,
    )


# --- torch.distributed side -------------------------------------------------------------------


def backward_loss(
    loss_sum: torch.Tensor,
    token_count: torch.Tensor | float,
    *,
    calculate_per_token_loss: bool,
    num_microbatches: int = 1,
) -> torch.Tensor:
    """The scalar one micro-batch back-propagates: ``s`` (per-token) or ``s / max(n, 1) / M`` (mean)."""
    if calculate_per_token_loss:
        return loss_sum
    count = torch.as_tensor(token_count, dtype=loss_sum.dtype, device=loss_sum.device)
    return loss_sum / torch.clamp(count, min=1.0) / num_microbatches


def _group_size(group: Any) -> int:
    import torch.distributed as dist

    return dist.get_world_size(group=group) if dist.is_initialized() else 1


def all_reduce_loss_pieces(
    loss_sum: torch.Tensor | float, token_count: torch.Tensor | float, group: Any = None
) -> tuple[float, float]:
    """Global ``(loss_sum, token_count)`` over ``group`` (detached; a no-op without torch.distributed)."""
    import torch.distributed as dist

    buf = torch.tensor([float(loss_sum), float(token_count)], dtype=torch.float64)
    if dist.is_initialized() and _group_size(group) > 1:
        dist.all_reduce(buf, group=group)
    return float(buf[0]), float(buf[1])


def finalize_gradients(
    parameters: Iterable[torch.nn.Parameter],
    *,
    local_token_count: torch.Tensor | float,
    calculate_per_token_loss: bool,
    average_in_collective: bool,
    group: Any = None,
) -> float:
    """Reduce ``.grad`` of ``parameters`` over ``group`` as Megatron-Core's DDP + finalize step would.

    Mean loss: scale by ``1/R`` then sum (or sum then divide, ``average_in_collective``).
    Per-token loss: sum (divided by ``R`` too under ``average_in_collective``, which Megatron-Core
    rejects), then divide by the global supervised-token count. Gloo has no averaging all-reduce,
    so averaging is a sum followed by a division. Under a group of several ranks a trainable
    parameter without a gradient on this rank (none of its tokens reached it) joins with zeros, so
    every rank reduces a buffer of the same size. Returns the global token count.
    """
    import torch.distributed as dist

    ranks = _group_size(group)
    distributed = dist.is_initialized() and ranks > 1
    params = list(parameters)
    if distributed:  # every rank reduces the same buffer, as Megatron-Core's DDP grad buffers do: a parameter
        for p in params:  # this rank's tokens did not reach (a vision stem without images here) counts zero
            if p.grad is None and p.requires_grad:
                p.grad = torch.zeros_like(p)
    params = [p for p in params if p.grad is not None]
    if params:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if not calculate_per_token_loss and not average_in_collective:
            flat = flat / ranks
        if distributed:
            dist.all_reduce(flat, group=group)
        if average_in_collective:
            flat = flat / ranks
        offset = 0
        for p in params:
            size = p.grad.numel()
            p.grad.copy_(flat[offset : offset + size].view_as(p.grad))
            offset += size
    count = torch.tensor([float(local_token_count)], dtype=torch.float64)
    if distributed:
        dist.all_reduce(count, group=group)
    total = float(count[0])
    if calculate_per_token_loss and total > 0:
        for p in params:
            p.grad.div_(total)
    return total
