"""Reference forward/backward of one canonical packed micro-batch, and its unpacked counterpart.

:func:`reference_step` runs :class:`~seqpack.training.model.TinyGPT` on a packed row and
returns the loss sum, the supervised-token count, per-sequence loss sums and the gradients of the
loss sum. :func:`split_sequences` cuts the row back into its sequences (real tokens only, position
ids from 0) and :func:`unpacked_reference` runs each of them alone: with correct packing the
per-sequence numbers of both agree to rounding.

Gradients here are of the loss *sum* (not divided by the token count), so per-sequence gradients
add up to the packed one; divide by ``token_count`` for the per-token mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from seqpack.core.errors import InputError
from seqpack.training.attention import attention_mask
from seqpack.training.boundaries import ThdLayout, thd_layout
from seqpack.training.context_parallel import thd_partition_indices
from seqpack.training.loss import masked_loss_pieces, token_cross_entropy
from seqpack.training.model import TinyGPT

__all__ = [
    "SequenceLoss",
    "StepResult",
    "cp_rank_pieces",
    "packed_forward",
    "reference_step",
    "sequence_loss_sums",
    "split_sequences",
    "unpacked_reference",
]


def _row(batch: Mapping[str, Any], key: str) -> torch.Tensor:
    value = batch.get(key)
    if not isinstance(value, torch.Tensor):
        raise InputError(f"batch needs a tensor '{key}' of shape [1, T]", field=key)
    if value.dim() != 2 or value.shape[0] != 1:
        raise InputError(f"'{key}' must have shape [1, T], got {list(value.shape)}", field=key)
    return value[0]


@dataclass(frozen=True)
class SequenceLoss:
    """Loss sum and supervised-token count of one packed sequence (by physical segment)."""

    index: int
    loss_sum: float
    token_count: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"index": self.index, "loss_sum": self.loss_sum, "token_count": self.token_count}


@dataclass
class StepResult:
    """Outcome of one reference forward/backward.

    ``grads`` maps parameter names to the gradient of ``loss_sum``; ``sequence_grads`` (when asked
    for) holds one such dict per sequence. ``unassigned_token_count`` counts supervised positions
    past the last boundary (they are in ``loss_sum`` but in no sequence).
    """

    loss_sum: float
    token_count: float
    sequences: list[SequenceLoss]
    unassigned_token_count: float = 0.0
    grads: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    sequence_grads: list[dict[str, torch.Tensor]] | None = field(default=None, repr=False)
    logits: torch.Tensor | None = field(default=None, repr=False)

    @property
    def loss(self) -> float:
        """Mean loss per supervised token (NaN when nothing is supervised)."""
        return self.loss_sum / self.token_count if self.token_count else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (tensors reduced to a gradient norm)."""
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in self.grads.values())) if self.grads else None
        return {
            "loss_sum": self.loss_sum,
            "token_count": self.token_count,
            "loss": None if self.token_count == 0 else self.loss,
            "unassigned_token_count": self.unassigned_token_count,
            "sequences": [s.to_dict() for s in self.sequences],
            "grad_norm": None if norm is None else float(norm),
        }


def packed_forward(model: TinyGPT, batch: Mapping[str, Any], *, mode: str = "thd") -> torch.Tensor:
    """Logits ``[T, V]`` of a whole packed row (no context parallelism)."""
    tokens = _row(batch, "tokens")
    positions = _row(batch, "position_ids")
    layout = thd_layout(batch)
    everything = torch.arange(layout.total_tokens)
    inputs = {k: v[0] for k, v in model.batch_inputs(batch).items()}  # images, M-RoPE ids (VLM options)
    return model(tokens, positions, attention_mask(layout, everything, everything, mode), inputs=inputs)


def sequence_loss_sums(
    token_losses: torch.Tensor, loss_mask: torch.Tensor, layout: ThdLayout, positions: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss sums and counts per physical sequence, shape ``[n + 1]`` (the last bucket: past the last boundary).

    ``positions`` are the global row positions of the given tokens (a CP rank's partition
    indices); by default the tokens are the whole row.
    """
    seq_id, _ = layout.token_segments()
    if positions is not None:
        seq_id = seq_id[positions.cpu()]
    seq_id = seq_id.to(token_losses.device)
    mask = loss_mask.to(token_losses.dtype)
    buckets = layout.num_sequences + 1
    sums = torch.zeros(buckets, dtype=token_losses.dtype, device=token_losses.device).index_add(
        0, seq_id, token_losses * mask
    )
    counts = torch.zeros(buckets, dtype=token_losses.dtype, device=token_losses.device).index_add(0, seq_id, mask)
    return sums, counts


def _param_grads(model: torch.nn.Module, scalar: torch.Tensor, retain: bool) -> dict[str, torch.Tensor]:
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    grads = torch.autograd.grad(scalar, params, retain_graph=retain, allow_unused=True)
    return {n: torch.zeros_like(p) if g is None else g for n, p, g in zip(names, params, grads)}


def reference_step(
    model: TinyGPT,
    batch: Mapping[str, Any],
    *,
    mode: str = "thd",
    per_sequence_grads: bool = False,
    keep_logits: bool = False,
) -> StepResult:
    """Forward and backward of one packed micro-batch on one process.

    Does not touch ``.grad`` of the parameters (gradients are returned, not accumulated).
    """
    layout = thd_layout(batch)
    labels = _row(batch, "labels")
    loss_mask = _row(batch, "loss_mask")
    logits = packed_forward(model, batch, mode=mode)
    losses = token_cross_entropy(logits, labels, loss_mask)
    loss_sum, count = masked_loss_pieces(losses, loss_mask)
    sums, counts = sequence_loss_sums(losses, loss_mask, layout)
    n = layout.num_sequences
    sequence_grads = None
    if per_sequence_grads:
        sequence_grads = [_param_grads(model, sums[i], retain=True) for i in range(n)]
    grads = _param_grads(model, loss_sum, retain=False)
    loss_sum, count, sums, counts = loss_sum.detach(), count.detach(), sums.detach(), counts.detach()
    return StepResult(
        loss_sum=float(loss_sum),
        token_count=float(count),
        sequences=[SequenceLoss(i, float(sums[i]), float(counts[i])) for i in range(n)],
        unassigned_token_count=float(counts[n]),
        grads=grads,
        sequence_grads=sequence_grads,
        logits=logits.detach() if keep_logits else None,
    )


def split_sequences(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each sequence of a packed row as its own canonical micro-batch: real tokens only, positions from 0.

    One entry per sequence, zero-length ones included (with ``T = 0``).
    """
    layout = thd_layout(batch)
    rows = {key: _row(batch, key) for key in ("tokens", "labels", "loss_mask")}
    out = []
    for i, (start, length) in enumerate(zip(layout.physical[:-1].tolist(), layout.real_lengths().tolist())):
        piece = {key: value[start : start + length][None].clone() for key, value in rows.items()}
        piece["position_ids"] = torch.arange(length, dtype=torch.int64)[None]
        piece["padding_mask"] = torch.zeros(1, length, dtype=torch.bool)
        cu = torch.tensor([0, length], dtype=torch.int32)
        piece.update(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=length, max_seqlen_kv=length)
        piece["sequence_index"] = i
        out.append(piece)
    return out


def unpacked_reference(model: TinyGPT, batch: Mapping[str, Any], *, mode: str = "thd") -> list[StepResult]:
    """:func:`reference_step` of every sequence of ``batch`` run alone (see :func:`split_sequences`)."""
    results = []
    for piece in split_sequences(batch):
        if piece["tokens"].shape[1] == 0:
            zeros = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
            results.append(StepResult(0.0, 0.0, [SequenceLoss(0, 0.0, 0.0)], grads=zeros))
        else:
            results.append(reference_step(model, piece, mode=mode))
    return results


def cp_rank_pieces(
    token_losses: torch.Tensor, loss_mask: torch.Tensor, physical: torch.Tensor, cp_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The ``(loss_sum, token_count)`` each CP rank would compute, from a whole-row forward.

    Differentiable in ``token_losses``: with context parallelism the gradient the optimizer
    applies is that of ``sum w_r * s_r`` (weights from :func:`~seqpack.training.loss.reduction_weights`),
    which this lets a single process evaluate.
    """
    pieces = []
    for rank in range(cp_size):
        index = thd_partition_indices(physical.to(torch.int32), cp_size, rank, total_tokens=token_losses.shape[0])
        index = index.to(token_losses.device)
        pieces.append(masked_loss_pieces(token_losses[index], loss_mask[index]))
    return pieces
