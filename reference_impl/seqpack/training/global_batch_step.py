"""A reference training step and evaluation loop for global-batch packing.

:func:`train_step` wraps the data iterator once (:meth:`GlobalBatchPacker.wrap`), then runs the
*scheduled* number of micro-batches, which changes from step to step:

* each pack is cut for this CP rank (:func:`~seqpack.training.context_parallel.slice_thd_batch_for_cp`,
  Transformer Engine's rule); with CP > 1 keys and values are gathered over the CP group
  (:class:`~seqpack.training.cp_exchange.KVExchange`) and attention uses the global positions;
* the loss is the per-token sum (``calculate_per_token_loss``, which PACK-GLOBAL-PER-TOKEN-LOSS
  requires); gradients accumulate over the micro-batches;
* after the last micro-batch the gradients are summed over the DP x CP group and divided by the
  global supervised-token count (:func:`~seqpack.training.loss.finalize_gradients`), so the
  result is the mean loss over every supervised token of the global batch, whatever the packing;
* a model with MoE or MTP options adds their terms to every micro-batch's loss, scaled as
  Megatron-Core scales them under per-token loss, and the step reports the auxiliary losses
  averaged over the micro-batches that actually ran (``aux``, see
  :func:`~seqpack.training.moe_mtp_step.average_aux_logs`), then over the DP ranks.

:func:`evaluate` runs forward passes only, over ``eval_iters`` steps. Build the validation loader
with an :class:`~seqpack.packing.global_batch.dataset.EvaluationPlan` so a validation set
too small for every evaluation of the run is refused up front.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from seqpack.core.arguments import positive_int
from seqpack.packing.global_batch.wrap import GlobalBatchPacker, GlobalBatchStep, ParallelLayout
from seqpack.training.context_parallel import slice_thd_batch_for_cp
from seqpack.training.cp_step import cp_forward
from seqpack.training.loss import (
    all_reduce_loss_pieces,
    backward_loss,
    finalize_gradients,
    masked_loss_pieces,
)
from seqpack.training.model import TinyGPT
from seqpack.training.moe import Routing
from seqpack.training.moe_mtp_step import AuxLog, average_aux_logs, option_terms
from seqpack.training.mtp import with_mtp_streams

__all__ = ["EvalResult", "TrainStepResult", "evaluate", "micro_batch_loss", "run_micro_batches", "train_step"]


def micro_batch_loss(
    model: TinyGPT, local_batch: Mapping[str, Any], layout: ParallelLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss sum, supervised tokens)`` of this CP rank's slice of one pack (boundaries stay global)."""
    loss_sum, count, _, _ = micro_batch_terms(model, local_batch, layout)
    return loss_sum, count


def micro_batch_terms(
    model: TinyGPT, local_batch: Mapping[str, Any], layout: ParallelLayout
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, AuxLog | None]:
    """LM loss sum, supervised tokens, the MoE/MTP term to add before backward, and the aux log.

    The last two are None for a dense model. The MTP streams must be in ``local_batch`` already
    (added to the whole pack before the CP split).
    """
    cfg = model.config
    routing = None
    if cfg.moe is not None:
        padding = local_batch.get("padding_mask")
        routing = Routing(padding_mask=None if padding is None else padding[0])
    fwd = cp_forward(model, local_batch, cp_size=layout.cp_size, cp_rank=layout.cp_rank, group=layout.cp_group,
                     routing=routing)
    loss_sum, count = masked_loss_pieces(fwd.losses, fwd.loss_mask)
    if cfg.moe is None and cfg.mtp is None:
        return loss_sum, count, None, None
    extra, log = option_terms(model, fwd, local_batch, routing, cp_size=layout.cp_size, group=layout.cp_group)
    return loss_sum, count, extra, log


@dataclass
class TrainStepResult:
    """One step on one rank. Loss numbers are global (every rank and micro-batch of the step).

    ``local_tokens[k]`` / ``local_supervised[k]``: tokens and supervised tokens this rank held in
    micro-batch ``k`` after the CP split; ``step`` is the wrapped step (packs, schedule).
    """

    num_micro_batches: int
    seqlen_sum: int
    seqlen_squared_sum: int
    loss_sum: float
    token_count: float
    local_tokens: list[int]
    local_supervised: list[float]
    sample_ids: list[list[int]]
    grads: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    step: GlobalBatchStep | None = field(default=None, repr=False)
    aux: dict[str, Any] = field(default_factory=dict)
    aux_logs: list[AuxLog] = field(default_factory=list, repr=False)

    @property
    def loss(self) -> float:
        """Mean loss per supervised token of the global batch (NaN when nothing is supervised)."""
        return self.loss_sum / self.token_count if self.token_count else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (gradients reduced to their norm)."""
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in self.grads.values())) if self.grads else None
        return {
            "num_micro_batches": self.num_micro_batches,
            "seqlen_sum": self.seqlen_sum,
            "seqlen_squared_sum": self.seqlen_squared_sum,
            "loss_sum": self.loss_sum,
            "token_count": self.token_count,
            "loss": None if not self.token_count else self.loss,
            "local_tokens": self.local_tokens,
            "local_supervised": self.local_supervised,
            "sample_ids": self.sample_ids,
            "grad_norm": norm,
            "aux": self.aux,
        }


def run_micro_batches(model: TinyGPT, step: GlobalBatchStep, *, backward: bool = True) -> TrainStepResult:
    """Run every micro-batch of ``step`` on this rank; with ``backward``, leave the reduced gradients in ``.grad``."""
    lay = step.layout
    if backward:
        model.zero_grad(set_to_none=True)
    local_sum = 0.0
    local_tokens: list[int] = []
    local_supervised: list[float] = []
    logs: list[AuxLog] = []
    mtp = model.config.mtp
    context = torch.enable_grad() if backward else torch.no_grad()
    with context:
        for batch in step.data_iterator:
            if mtp is not None:
                batch = with_mtp_streams(batch, mtp.num_layers)
            local = slice_thd_batch_for_cp(batch, lay.cp_size, lay.cp_rank)
            loss_sum, count, extra, log = micro_batch_terms(model, local, lay)
            if backward:
                objective = loss_sum if extra is None else loss_sum + extra
                backward_loss(objective, count, calculate_per_token_loss=True).backward()
            if log is not None:
                logs.append(log)
            local_sum += float(loss_sum.detach())
            local_tokens.append(int(local["tokens"].shape[1]))
            local_supervised.append(float(count))
    local_count = sum(local_supervised)
    grads: dict[str, torch.Tensor] = {}
    if backward:
        finalize_gradients(model.parameters(), local_token_count=local_count, calculate_per_token_loss=True,
                           average_in_collective=False, group=lay.dp_cp_group)
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    total_sum, total_count = all_reduce_loss_pieces(local_sum, local_count, group=lay.dp_cp_group)
    aux = _dp_average(average_aux_logs(logs), lay)
    return TrainStepResult(
        num_micro_batches=step.num_micro_batches,
        seqlen_sum=step.seqlen_sum,
        seqlen_squared_sum=step.seqlen_squared_sum,
        loss_sum=total_sum,
        token_count=total_count,
        local_tokens=local_tokens,
        local_supervised=local_supervised,
        sample_ids=[list(b["sample_ids"]) for b in step.batches],
        grads=grads,
        step=step,
        aux=aux,
        aux_logs=logs,
    )


def _dp_average(aux: dict[str, Any], lay: ParallelLayout) -> dict[str, Any]:
    """Average the logged losses over the DP ranks (Megatron-Core's trackers average over DP last)."""
    if lay.dp_size == 1 or not aux:
        return aux
    import torch.distributed as dist

    keys = [k for k in ("load_balancing_loss", "z_loss") if k in aux]
    values = [aux[k] for k in keys] + list(aux.get("mtp_loss", []))
    vector = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(vector, group=lay.dp_group)
    vector /= lay.dp_size
    out = dict(aux)
    out.update({k: float(v) for k, v in zip(keys, vector[: len(keys)])})
    if "mtp_loss" in aux:
        out["mtp_loss"] = [float(v) for v in vector[len(keys):]]
    return out


def train_step(
    model: TinyGPT,
    packer: GlobalBatchPacker,
    data_iterator: Iterator[Any],
    num_microbatches: int | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
) -> TrainStepResult:
    """Wrap the iterator for this step, run the scheduled micro-batches, reduce, and step the optimizer."""
    step = packer.wrap(data_iterator, num_microbatches)
    result = run_micro_batches(model, step, backward=True)
    if optimizer is not None:
        optimizer.step()
    return result


@dataclass(frozen=True)
class EvalResult:
    """Per-token validation loss over ``steps`` global batches."""

    steps: int
    micro_batches: list[int]
    loss_sum: float
    token_count: float

    @property
    def loss(self) -> float:
        """Mean loss per supervised validation token."""
        return self.loss_sum / self.token_count if self.token_count else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"steps": self.steps, "micro_batches": self.micro_batches, "loss_sum": self.loss_sum,
                "token_count": self.token_count, "loss": None if not self.token_count else self.loss}


def evaluate(
    model: TinyGPT,
    packer: GlobalBatchPacker,
    data_iterator: Iterator[Any],
    *,
    eval_iters: int,
    num_microbatches: int | None = None,
) -> EvalResult:
    """Forward-only evaluation over ``eval_iters`` steps with the same scheduler as training."""
    positive_int("eval_iters", eval_iters)
    total_sum = total_count = 0.0
    counts = []
    iterator = iter(data_iterator)
    for _ in range(eval_iters):
        result = run_micro_batches(model, packer.wrap(iterator, num_microbatches), backward=False)
        total_sum += result.loss_sum
        total_count += result.token_count
        counts.append(result.num_micro_batches)
    return EvalResult(steps=eval_iters, micro_batches=counts, loss_sum=total_sum, token_count=total_count)
