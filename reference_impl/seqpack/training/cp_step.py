"""Context-parallel forward/backward of one packed micro-batch (one process per CP rank).

Each rank holds its ``2*CP``-chunk slice of the row
(:func:`~seqpack.training.context_parallel.slice_thd_batch_for_cp`, boundaries still
global), computes queries, keys and values for its own tokens, gathers keys and values from the
CP group, and attends with the mask built from the global positions of its queries and of the
gathered keys. Gradients are then reduced over ``grad_group`` (the data-parallel x
context-parallel group; the CP group when DP is 1) with the chosen loss
reduction, so with per-token loss the result equals the CP=1 run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from seqpack.core.errors import InputError, UsageError
from seqpack.training.attention import attention_mask
from seqpack.training.boundaries import thd_layout
from seqpack.training.context_parallel import thd_partition_indices
from seqpack.training.cp_exchange import KVExchange
from seqpack.training.loss import (
    LossReduction,
    backward_loss,
    finalize_gradients,
    masked_loss_pieces,
    reduce_loss_pieces,
    token_cross_entropy,
)
from seqpack.training.model import TinyGPT
from seqpack.training.moe import Routing
from seqpack.training.step import SequenceLoss, sequence_loss_sums

__all__ = ["CPForward", "CPStepResult", "cp_forward", "cp_step"]


@dataclass
class CPStepResult:
    """Outcome of :func:`cp_step` on one rank.

    ``grads`` are the reduced gradients the optimizer would apply (of ``reduction.objective``);
    ``sequences`` are global per-sequence sums; ``positions`` are the global row positions of this
    rank's tokens, ``logits`` (when kept) are for those positions.
    """

    cp_size: int
    cp_rank: int
    local_loss_sum: float
    local_token_count: float
    reduction: LossReduction
    sequences: list[SequenceLoss]
    grads: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    positions: torch.Tensor | None = field(default=None, repr=False)
    logits: torch.Tensor | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary."""
        return {
            "cp_size": self.cp_size,
            "cp_rank": self.cp_rank,
            "local_loss_sum": self.local_loss_sum,
            "local_token_count": self.local_token_count,
            "reduction": self.reduction.to_dict(),
            "sequences": [s.to_dict() for s in self.sequences],
        }


def _row(batch: Mapping[str, Any], key: str) -> torch.Tensor:
    value = batch.get(key)
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[0] != 1:
        raise InputError(f"local batch needs '{key}' of shape [1, T/CP]", field=key)
    return value[0]


@dataclass
class CPForward:
    """One CP rank's forward of its slice: layout (global boundaries), query positions, logits, token losses.

    ``hidden`` (the trunk's output), ``mask`` and ``exchange`` let the MTP depths of the model run on
    the same slice (:func:`seqpack.training.moe_mtp_step.option_terms`).
    """

    layout: Any
    queries: torch.Tensor
    logits: torch.Tensor
    losses: torch.Tensor
    loss_mask: torch.Tensor
    hidden: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    exchange: Any = None


def cp_forward(
    model: TinyGPT,
    local_batch: Mapping[str, Any],
    *,
    cp_size: int,
    cp_rank: int,
    group: Any = None,
    mode: str = "thd",
    exchange_kv: bool = True,
    routing: Routing | None = None,
) -> CPForward:
    """Forward of this rank's ``2*CP``-chunk slice: queries are the rank's global positions, keys and values
    are gathered over ``group`` (nothing is exchanged when ``cp_size`` is 1 or ``exchange_kv`` is False).

    ``routing`` goes to the MoE layers of a MoE model (padding mask in, router statistics out)."""
    tokens = _row(local_batch, "tokens")
    layout = thd_layout(local_batch, total_tokens=tokens.shape[0] * cp_size)
    indices = [
        thd_partition_indices(layout.physical.to(torch.int32), cp_size, r, total_tokens=layout.total_tokens) for r in range(cp_size)
    ]
    queries = indices[cp_rank]
    use_exchange = exchange_kv and cp_size > 1
    keys = torch.cat(indices) if use_exchange else queries
    mask = attention_mask(layout, queries, keys, mode)
    exchange = KVExchange(group) if use_exchange else None
    inputs = {k: v[0] for k, v in model.batch_inputs(local_batch, whole_row=cp_size == 1).items()}
    hidden = model.trunk(tokens, _row(local_batch, "position_ids"), mask, kv_exchange=exchange, inputs=inputs,
                         routing=routing)
    logits = model.head(hidden)
    loss_mask = _row(local_batch, "loss_mask")
    losses = token_cross_entropy(logits, _row(local_batch, "labels"), loss_mask)
    return CPForward(layout, queries, logits, losses, loss_mask, hidden, mask, exchange)


def cp_step(
    model: TinyGPT,
    local_batch: Mapping[str, Any],
    *,
    cp_size: int,
    cp_rank: int,
    group: Any,
    grad_group: Any = None,
    mode: str = "thd",
    exchange_kv: bool = True,
    calculate_per_token_loss: bool = True,
    average_in_collective: bool = False,
    keep_logits: bool = False,
) -> CPStepResult:
    """Forward, backward and gradient reduction of this rank's slice; ``.grad`` of the model is overwritten.

    ``exchange_kv=False`` attends to the local keys only (a deliberately wrong negative control).
    """
    if not dist.is_initialized():
        raise UsageError("cp_step needs torch.distributed to be initialised (one process per CP rank)")
    if dist.get_world_size(group=group) != cp_size or dist.get_rank(group=group) != cp_rank:
        raise UsageError(
            f"the CP group has rank {dist.get_rank(group=group)} and size {dist.get_world_size(group=group)}, "
            f"but cp_rank {cp_rank} and cp_size {cp_size} were given"
        )
    grad_group = group if grad_group is None else grad_group
    model.zero_grad(set_to_none=True)
    fwd = cp_forward(model, local_batch, cp_size=cp_size, cp_rank=cp_rank, group=group, mode=mode,
                     exchange_kv=exchange_kv)
    layout, queries, logits, losses, loss_mask = fwd.layout, fwd.queries, fwd.logits, fwd.losses, fwd.loss_mask
    loss_sum, count = masked_loss_pieces(losses, loss_mask)
    backward_loss(loss_sum, count, calculate_per_token_loss=calculate_per_token_loss).backward()
    finalize_gradients(
        model.parameters(),
        local_token_count=float(count),
        calculate_per_token_loss=calculate_per_token_loss,
        average_in_collective=average_in_collective,
        group=grad_group,
    )

    loss_sum, count = loss_sum.detach(), count.detach()
    pair = torch.tensor([float(loss_sum), float(count)], dtype=torch.float64)
    pairs = [torch.empty_like(pair) for _ in range(dist.get_world_size(group=grad_group))]
    dist.all_gather(pairs, pair, group=grad_group)
    reduction = reduce_loss_pieces(
        [(float(p[0]), float(p[1])) for p in pairs],
        calculate_per_token_loss=calculate_per_token_loss,
        average_in_collective=average_in_collective,
    )
    sums, counts = sequence_loss_sums(losses.detach(), loss_mask, layout, positions=queries)
    both = torch.stack([sums, counts]).to(torch.float64)
    dist.all_reduce(both, group=group)
    sequences = [SequenceLoss(i, float(both[0, i]), float(both[1, i])) for i in range(layout.num_sequences)]
    return CPStepResult(
        cp_size=cp_size,
        cp_rank=cp_rank,
        local_loss_sum=float(loss_sum),
        local_token_count=float(count),
        reduction=reduction,
        sequences=sequences,
        grads={n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
        positions=queries,
        logits=logits.detach() if keep_logits else None,
    )
