"""Forward/backward of one packed micro-batch with the MoE and MTP options, and its unpacked counterpart.

:func:`options_step` runs :class:`~reference_impl.training.model.TinyGPT` (with ``moe`` and/or
``mtp`` set) on a canonical packed row and returns, besides the LM loss pieces, the router
statistics of every MoE layer (:class:`~reference_impl.training.moe.RouterStats`, padding left
out through the batch's ``padding_mask``) and the MTP loss pieces of every depth (targets rolled
inside each sequence, :func:`~reference_impl.training.mtp.with_mtp_streams`).
:func:`unpacked_options` runs every sequence alone. With correct packing:

* LM and MTP per-sequence loss sums agree, and the gradient of ``lm_sum + sum of mtp_sums`` of
  the row equals the sum of the per-sequence gradients (both are sums over tokens);
* the router statistics of the row equal the sums of the per-sequence statistics, so the
  load-balancing loss, the z-loss and the expert-bias update computed from them agree. (The
  load-balancing loss itself is not a sum over tokens: it is defined per micro-batch, so the
  comparison is with the same tokens' statistics, not with a mean of per-sequence losses.)

``count_padding`` (the router counts padding) and ``mtp_roll`` (``"row"``: MTP rolled across
boundaries) are the negative controls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from reference_impl.errors import UsageError
from reference_impl.training.attention import attention_mask
from reference_impl.training.boundaries import thd_layout
from reference_impl.training.loss import masked_loss_pieces, token_cross_entropy
from reference_impl.training.model import TinyGPT
from reference_impl.training.moe import RouterStats, Routing
from reference_impl.training.mtp import with_mtp_streams
from reference_impl.training.step import sequence_loss_sums, split_sequences

__all__ = ["OptionsStepResult", "mtp_objective", "options_step", "padding_mask_of", "sum_router_stats",
           "unpacked_options"]


def padding_mask_of(batch: Mapping[str, Any]) -> torch.Tensor:
    """The batch's ``padding_mask`` row ``[T]`` (True = not a real token), or one derived from its boundaries."""
    value = batch.get("padding_mask")
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).to(torch.bool)
    _, real = thd_layout(batch).token_segments()
    return ~real


@dataclass
class OptionsStepResult:
    """LM, router and MTP numbers of one micro-batch (all sums over its tokens).

    ``router`` holds one :class:`RouterStats` per MoE layer (trunk, then MTP layers);
    ``mtp_loss_sums`` / ``mtp_token_counts`` one entry per MTP depth; ``*_sequences`` the
    per-sequence sums (by physical segment) of the LM loss and of every MTP depth.
    ``grads`` are of ``lm_loss_sum + sum(mtp_loss_sums)`` when asked for.
    """

    lm_loss_sum: float
    lm_token_count: float
    lm_sequences: list[float]
    router: list[RouterStats]
    mtp_loss_sums: list[float]
    mtp_token_counts: list[float]
    mtp_sequences: list[list[float]]
    grads: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    def to_dict(self, model: TinyGPT | None = None) -> dict[str, Any]:
        """JSON-able summary; router losses need the ``model`` (for its MoE config)."""
        moe = model.config.moe if model is not None else None
        return {
            "lm_loss_sum": self.lm_loss_sum,
            "lm_token_count": self.lm_token_count,
            "router": [s.summary(moe) for s in self.router] if moe is not None else len(self.router),
            "mtp_loss_sums": self.mtp_loss_sums,
            "mtp_token_counts": self.mtp_token_counts,
        }


def mtp_objective(loss_sums: list[torch.Tensor], counts: list[torch.Tensor], scaling: float) -> torch.Tensor:
    """Megatron-Core's MTP term: ``scaling / D * sum_k loss_sum_k / max(count_k, 1)`` over the ``D`` depths."""
    if not loss_sums:
        return torch.zeros(())
    return sum(s / c.clamp(min=1) for s, c in zip(loss_sums, counts)) * (scaling / len(loss_sums))


def options_step(
    model: TinyGPT,
    batch: Mapping[str, Any],
    *,
    mode: str = "thd",
    count_padding: bool = False,
    mtp_roll: str = "sequence",
    grads: bool = True,
) -> OptionsStepResult:
    """Forward (and backward when ``grads``) of one whole packed row with the model's options."""
    layout = thd_layout(batch)
    everything = torch.arange(layout.total_tokens)
    mask = attention_mask(layout, everything, everything, mode)
    routing = Routing(padding_mask=padding_mask_of(batch), count_padding=count_padding)
    tokens, positions = batch["tokens"][0], batch["position_ids"][0]
    labels, loss_mask = batch["labels"][0], batch["loss_mask"][0]
    context = torch.enable_grad() if grads else torch.no_grad()
    with context:
        hidden = model.trunk(tokens, positions, mask, routing=routing)
        losses = token_cross_entropy(model.head(hidden), labels, loss_mask)
        lm_sum, lm_count = masked_loss_pieces(losses, loss_mask)
        objective = lm_sum
        lm_seq, _ = sequence_loss_sums(losses, loss_mask, layout)
        mtp_sums, mtp_counts, mtp_seq = [], [], []
        if model.config.mtp is not None:
            depths = model.config.mtp.num_layers
            streams = with_mtp_streams(batch, depths, mtp_roll)
            logits = model.mtp_logits(hidden, streams, mask, routing=routing)
            for k, depth_logits in enumerate(logits):
                k_mask = streams["mtp_loss_mask"][0, :, k]
                k_losses = token_cross_entropy(depth_logits, streams["mtp_labels"][0, :, k], k_mask)
                s, c = masked_loss_pieces(k_losses, k_mask)
                objective = objective + s
                mtp_sums.append(float(s.detach()))
                mtp_counts.append(float(c))
                mtp_seq.append(sequence_loss_sums(k_losses.detach(), k_mask, layout)[0][:-1].tolist())
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        grad_map: dict[str, torch.Tensor] = {}
        if grads:
            values = torch.autograd.grad(objective, [p for _, p in named], allow_unused=True)
            grad_map = {n: torch.zeros_like(p) if g is None else g for (n, p), g in zip(named, values)}
    return OptionsStepResult(
        lm_loss_sum=float(lm_sum.detach()),
        lm_token_count=float(lm_count),
        lm_sequences=lm_seq.detach()[:-1].tolist(),
        router=[s.detach() for s in routing.stats],
        mtp_loss_sums=mtp_sums,
        mtp_token_counts=mtp_counts,
        mtp_sequences=mtp_seq,
        grads=grad_map,
    )


def sum_router_stats(results: list[OptionsStepResult]) -> list[RouterStats]:
    """Layer-wise sums of the router statistics of several results (empty when none has MoE layers)."""
    if not results or not results[0].router:
        return []
    total = list(results[0].router)
    for res in results[1:]:
        if len(res.router) != len(total):
            raise UsageError("results come from models with different numbers of MoE layers")
        total = [a + b for a, b in zip(total, res.router)]
    return total


def unpacked_options(model: TinyGPT, batch: Mapping[str, Any], *, grads: bool = True) -> list[OptionsStepResult]:
    """:func:`options_step` of every non-empty sequence of ``batch`` run alone (real tokens, positions from 0)."""
    return [options_step(model, piece, grads=grads) for piece in split_sequences(batch) if piece["tokens"].shape[1]]
