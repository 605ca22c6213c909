"""A mixture-of-experts MLP for the reference model, with Megatron-Core's router statistics.

:class:`MoEMLP` replaces the dense MLP of a block when :class:`MoEConfig` is given: a linear
router scores ``num_experts`` experts, every token goes to its ``topk`` best, and the output is the
probability-weighted sum of those experts' two-layer MLPs. The router follows Megatron-Core's
``TopKRouter.routing`` (``megatron/core/transformer/moe/router.py`` and ``moe_utils.py``; line
numbers of main at d98e8a64 in ``docs/moe-mtp.md``):

* routing: ``topk_routing_with_score_function`` (softmax over the top-k logits, or sigmoid scores
  with the optional expert bias used for *selection only*, normalised over the top k);
* optional token dropping: ``apply_router_token_dropping`` with capacity
  ``ceil(T * topk / E * capacity_factor)``, where ``T`` counts *every* token of the micro-batch,
  padding included, and padding tokens compete for capacity (no mask is applied there);
* load-balancing loss (``switch_load_balancing_loss_func`` via ``compute_routing_scores_for_aux_loss``):
  ``E * coeff / (topk * T**2) * sum_i P_i * f_i`` with ``P_i`` the summed full-softmax (or
  normalised sigmoid) score of expert ``i``, ``f_i`` the tokens whose plain top-k includes ``i``,
  and ``T = sum_i f_i / topk``: padding rows are zeroed out of both before the sums;
* z-loss (``z_loss_func``): ``coeff * mean over non-padding tokens of logsumexp(logits)**2``;
* expert-bias statistics (``_apply_expert_bias``): tokens per expert of the *real* routing map
  (after bias and dropping), padding excluded, summed over the micro-batches of a step; the bias
  then moves by ``rate * sign(mean - load)`` (``get_updated_expert_bias``).

Every such number is a function of per-token sums, collected in :class:`RouterStats`. The sums
add over tokens, so the statistics of a packed micro-batch equal the sums of its sequences run
alone, and the losses computed from them agree, exactly when the router ignores padding. Setting
``count_padding`` on :class:`Routing` makes the router count padding like a real token: the
negative control of the smoke test.

Megatron-Core still *dispatches* padded positions to experts (only the statistics are masked);
:class:`RouterStats` counts them as ``dispatched_padding``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, UsageError

__all__ = [
    "DROP_POLICIES",
    "SCORE_FUNCTIONS",
    "MoEConfig",
    "MoEMLP",
    "RouterStats",
    "Routing",
    "expert_capacity",
    "load_balancing_loss",
    "updated_expert_bias",
    "z_loss",
]

SCORE_FUNCTIONS: tuple[str, ...] = ("softmax", "sigmoid")
DROP_POLICIES: tuple[str, ...] = ("probs", "position")


@dataclass(frozen=True)
class MoEConfig:
    """Router and expert sizes, with Megatron-Core's names in the field help.

    ``aux_loss_coeff`` (``moe_aux_loss_coeff``, load-balancing type ``aux_loss``), ``z_loss_coeff``
    (``moe_z_loss_coeff``, None = off), ``expert_bias`` (``moe_router_enable_expert_bias``, sigmoid
    scores only), ``capacity_factor`` (``moe_expert_capacity_factor``, None = dropless),
    ``drop_policy`` (``moe_token_drop_policy``).
    """

    num_experts: int = 4
    topk: int = 2
    expert_hidden_size: int = 16
    score_function: str = "softmax"
    aux_loss_coeff: float = 1e-2
    z_loss_coeff: float | None = 1e-3
    expert_bias: bool = False
    expert_bias_update_rate: float = 1e-3
    capacity_factor: float | None = None
    drop_policy: str = "probs"

    def __post_init__(self) -> None:
        positive_int("moe.num_experts", self.num_experts, maximum=64)
        positive_int("moe.topk", self.topk, maximum=self.num_experts)
        positive_int("moe.expert_hidden_size", self.expert_hidden_size, maximum=4096)
        if self.score_function not in SCORE_FUNCTIONS:
            raise UsageError(f"moe.score_function must be one of {list(SCORE_FUNCTIONS)}, got {self.score_function!r}",
                             field="score_function")
        if self.drop_policy not in DROP_POLICIES:
            raise UsageError(f"moe.drop_policy must be one of {list(DROP_POLICIES)}, got {self.drop_policy!r}",
                             field="drop_policy")
        if self.expert_bias and self.score_function != "sigmoid":
            raise UsageError("moe.expert_bias needs score_function='sigmoid' (Megatron-Core applies the bias to "
                             "sigmoid scores only; softmax routing ignores it)", field="expert_bias")
        for name in ("aux_loss_coeff", "expert_bias_update_rate"):
            if not getattr(self, name) >= 0:
                raise UsageError(f"moe.{name} must be >= 0, got {getattr(self, name)}", field=name)
        if self.z_loss_coeff is not None and not self.z_loss_coeff >= 0:
            raise UsageError(f"moe.z_loss_coeff must be null or >= 0, got {self.z_loss_coeff}", field="z_loss_coeff")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise UsageError(f"moe.capacity_factor must be null or > 0, got {self.capacity_factor}",
                             field="capacity_factor")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def expert_capacity(num_tokens: int, topk: int, num_experts: int, capacity_factor: float) -> int:
    """Tokens one expert takes per micro-batch: ``ceil(num_tokens * topk / num_experts * capacity_factor)``."""
    return math.ceil(num_tokens * topk / num_experts * capacity_factor)


def load_balancing_loss(
    score_sum: torch.Tensor, tokens_per_expert: torch.Tensor, topk: int, coeff: float
) -> torch.Tensor:
    """Switch load-balancing loss from its sums (Megatron-Core's formula), per leading index; 0 where no token counts.

    ``score_sum`` and ``tokens_per_expert`` are ``[..., E]``; the token count is
    ``tokens_per_expert.sum(-1) / topk``. Megatron-Core divides by that count squared without a
    guard, so an all-padding micro-batch gives NaN there.
    """
    num_tokens = tokens_per_expert.sum(dim=-1) / topk
    num_experts = score_sum.shape[-1]
    scale = num_experts * coeff / (topk * num_tokens.clamp(min=1) ** 2)
    loss = (score_sum * tokens_per_expert).sum(dim=-1) * scale
    return torch.where(num_tokens > 0, loss, torch.zeros_like(loss))


def z_loss(z_sum: torch.Tensor, num_tokens: torch.Tensor | float, coeff: float) -> torch.Tensor:
    """Router z-loss from its sum: ``coeff * z_sum / max(num_tokens, 1)`` (per leading index)."""
    count = torch.as_tensor(num_tokens, dtype=z_sum.dtype, device=z_sum.device).clamp(min=1)
    return z_sum / count * coeff


def updated_expert_bias(load: torch.Tensor, bias: torch.Tensor, rate: float) -> torch.Tensor:
    """The bias after one step: each expert moves by ``rate`` towards the mean load (``get_updated_expert_bias``)."""
    mean = load.sum(dim=-1, keepdim=True) / load.shape[-1]
    return bias + torch.sign(mean - load) * rate


@dataclass
class RouterStats:
    """Per-token sums of one MoE layer over the tokens the router counted.

    ``num_tokens`` counts the tokens in the statistics (non-padding unless padding is counted);
    ``tokens_per_expert`` (``f_i``) and ``score_sum`` (``P_i``, differentiable) feed the
    load-balancing loss, ``z_sum`` (differentiable) the z-loss, ``expert_load`` the expert-bias
    update; ``dispatched`` / ``dispatched_padding`` count token-expert assignments sent to the
    experts, and those of padding positions, and ``dropped`` the assignments capacity removed.
    """

    num_tokens: torch.Tensor
    tokens_per_expert: torch.Tensor
    score_sum: torch.Tensor
    z_sum: torch.Tensor
    expert_load: torch.Tensor
    dispatched: int = 0
    dispatched_padding: int = 0
    dropped: int = 0

    def __add__(self, other: RouterStats) -> RouterStats:
        return RouterStats(
            self.num_tokens + other.num_tokens,
            self.tokens_per_expert + other.tokens_per_expert,
            self.score_sum + other.score_sum,
            self.z_sum + other.z_sum,
            self.expert_load + other.expert_load,
            self.dispatched + other.dispatched,
            self.dispatched_padding + other.dispatched_padding,
            self.dropped + other.dropped,
        )

    def detach(self) -> RouterStats:
        """The same sums without autograd history."""
        return RouterStats(*(t.detach() for t in (self.num_tokens, self.tokens_per_expert, self.score_sum,
                                                  self.z_sum, self.expert_load)),
                           self.dispatched, self.dispatched_padding, self.dropped)

    def vector(self) -> torch.Tensor:
        """Every sum of one micro-batch in one float64 vector (for an all-reduce over a context-parallel group)."""
        return torch.cat([self.num_tokens.reshape(1), self.tokens_per_expert, self.score_sum, self.z_sum.reshape(1),
                          self.expert_load]).to(torch.float64)

    @classmethod
    def from_vector(cls, vector: torch.Tensor, num_experts: int) -> RouterStats:
        """Inverse of :meth:`vector` (dispatch counters are not carried)."""
        e = num_experts
        return cls(vector[0], vector[1 : 1 + e], vector[1 + e : 1 + 2 * e], vector[1 + 2 * e],
                   vector[2 + 2 * e : 2 + 3 * e])

    def select(self, index: Any) -> RouterStats:
        """The statistics of the rows ``index`` (stats of a stack of rows carry a leading row dimension)."""
        return RouterStats(self.num_tokens[index], self.tokens_per_expert[index], self.score_sum[index],
                           self.z_sum[index], self.expert_load[index])

    def sum_rows(self, rows: Any) -> RouterStats:
        """The sums over the rows ``rows`` (a list of row indices) of a stacked forward."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        picked = self.select(index)
        return RouterStats(picked.num_tokens.sum(0), picked.tokens_per_expert.sum(0), picked.score_sum.sum(0),
                           picked.z_sum.sum(0), picked.expert_load.sum(0))

    def aux_loss(self, config: MoEConfig) -> torch.Tensor:
        """Load-balancing loss of these tokens (with the coefficient)."""
        return load_balancing_loss(self.score_sum, self.tokens_per_expert, config.topk, config.aux_loss_coeff)

    def z_loss(self, config: MoEConfig) -> torch.Tensor:
        """z-loss of these tokens (with the coefficient; 0 when z-loss is off)."""
        return z_loss(self.z_sum, self.num_tokens, config.z_loss_coeff or 0.0)

    def summary(self, config: MoEConfig) -> dict[str, Any]:
        """JSON-able numbers: the losses (without coefficients, as Megatron-Core logs them) and the counts."""
        stats = self.detach()
        aux = float(load_balancing_loss(stats.score_sum, stats.tokens_per_expert, config.topk, 1.0))
        return {
            "num_tokens": float(stats.num_tokens),
            "load_balancing_loss": aux,
            "z_loss": float(z_loss(stats.z_sum, stats.num_tokens, 1.0)),
            "tokens_per_expert": stats.tokens_per_expert.tolist(),
            "expert_load": stats.expert_load.tolist(),
            "dispatched": self.dispatched,
            "dispatched_padding": self.dispatched_padding,
            "dropped": self.dropped,
        }


@dataclass
class Routing:
    """What a forward pass tells the MoE layers, and what they report back.

    ``padding_mask`` (bool ``[T]`` or ``[B, T]``, True = not a real token) covers the tokens of
    this forward (a CP rank's slice under context parallelism, or a stack of rows); ``count_padding`` makes the router treat
    padding as real (negative control). ``outside`` (bool, same shape) marks positions that belong
    to no micro-batch (the right padding of a stack of rows): never counted, not even with
    ``count_padding``, and left out of the dispatch counters. Each MoE layer appends its
    :class:`RouterStats` to ``stats`` in layer order (trunk layers first, then MTP layers).
    """

    padding_mask: torch.Tensor | None = None
    count_padding: bool = False
    outside: torch.Tensor | None = None
    stats: list[RouterStats] = field(default_factory=list)


def _scores_for_aux(logits: torch.Tensor, config: MoEConfig) -> torch.Tensor:
    if config.score_function == "softmax":
        return torch.softmax(logits, dim=-1)
    scores = torch.sigmoid(logits)
    return scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)


def _one_hot(indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    shape = (*indices.shape[:-1], num_experts)
    return torch.zeros(shape, dtype=torch.bool, device=indices.device).scatter(-1, indices, True)


class MoEMLP(nn.Module):
    """Router plus ``num_experts`` two-layer GELU experts; ``forward(x [..., T, H], routing) -> [..., T, H]``.

    Each row of a stack ``[B, T, H]`` is one micro-batch: token dropping and the statistics are per row.
    """

    def __init__(self, config: MoEConfig, hidden_size: int, draw: Callable[..., nn.Parameter]) -> None:
        super().__init__()
        self.config = config
        e, h, f = config.num_experts, hidden_size, config.expert_hidden_size
        self.router = draw(h, e)
        self.expert_fc1 = draw(e, h, f)
        self.expert_fc2 = draw(e, f, h)
        self.register_buffer("expert_bias", torch.zeros(e, dtype=self.router.dtype))

    def route(
        self, logits: torch.Tensor, padding: torch.Tensor, counted: torch.Tensor | None = None,
        outside: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, RouterStats]:
        """``(probs [..., T, E], routing_map [..., T, E], stats)`` for router ``logits`` ``[..., T, E]``.

        ``padding`` (bool ``[..., T]``) marks the positions that are not real tokens; the statistics
        leave out the positions ``counted`` marks False (default: the real tokens); the dispatch
        counters leave out the positions ``outside`` marks. Statistics are summed over ``T``, so they
        keep the leading dimensions.
        """
        cfg = self.config
        num_tokens, num_experts = logits.shape[-2:]
        valid = (~padding if counted is None else counted).to(logits.dtype)
        # selection and combine weights (topk_routing_with_score_function)
        if cfg.score_function == "softmax":
            top_logits, top = torch.topk(logits, cfg.topk, dim=-1)
            weights = torch.softmax(top_logits, dim=-1)
        else:
            scores = torch.sigmoid(logits)
            select = scores + self.expert_bias if cfg.expert_bias else scores
            _, top = torch.topk(select, cfg.topk, dim=-1)
            weights = scores.gather(-1, top)
            if cfg.topk > 1:
                weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        probs = torch.zeros_like(logits).scatter(-1, top, weights)
        routing_map = _one_hot(top, num_experts)
        dropped = 0
        if cfg.capacity_factor is not None:  # apply_router_token_dropping: every row competes, padding too
            capacity = expert_capacity(num_tokens, cfg.topk, num_experts, cfg.capacity_factor)
            if capacity < num_tokens:
                rank_by = probs if cfg.drop_policy == "probs" else routing_map.to(logits.dtype)
                _, keep = torch.topk(rank_by.detach(), capacity, dim=-2)
                kept = torch.zeros_like(routing_map).scatter(-2, keep, True) & routing_map
                dropped = int(routing_map.sum() - kept.sum())
                routing_map = kept
                probs = probs * kept
        # statistics over the non-padding tokens (compute_routing_scores_for_aux_loss, z_loss_func, expert bias)
        aux_scores = _scores_for_aux(logits, cfg)
        _, aux_top = torch.topk(aux_scores.detach(), cfg.topk, dim=-1)
        aux_map = _one_hot(aux_top, num_experts).to(logits.dtype) * valid[..., None]
        stats = RouterStats(
            num_tokens=valid.sum(dim=-1),
            tokens_per_expert=aux_map.sum(dim=-2),
            score_sum=(aux_scores * valid[..., None]).sum(dim=-2),
            z_sum=(torch.logsumexp(logits, dim=-1).square() * valid).sum(dim=-1),
            expert_load=(routing_map.to(logits.dtype) * valid[..., None]).sum(dim=-2).detach(),
            dispatched=int(routing_map.sum() if outside is None else routing_map[~outside].sum()),
            dispatched_padding=int(routing_map[padding if outside is None else padding & ~outside].sum()),
            dropped=dropped,
        )
        return probs, routing_map, stats

    def forward(self, x: torch.Tensor, routing: Routing | None = None) -> torch.Tensor:
        """Probability-weighted sum of the chosen experts' outputs; stats go to ``routing.stats``."""
        if x.dim() not in (2, 3):
            raise InputError(f"MoE input must be [T, H] or [B, T, H], got {list(x.shape)}")
        masks = {}
        for name in ("padding_mask", "outside"):
            given = getattr(routing, name) if routing is not None else None
            if given is not None:
                if given.numel() != x[..., 0].numel():
                    raise InputError(f"{name} covers {given.numel()} tokens but the MoE layer got {x[..., 0].numel()}",
                                     field=name)
                masks[name] = given.to(device=x.device, dtype=torch.bool).reshape(x.shape[:-1])
        outside = masks.get("outside")
        padding = masks.get("padding_mask", torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device))
        if outside is not None:
            padding = padding | outside
        counted = None
        if routing is not None and routing.count_padding:
            counted = torch.ones_like(padding) if outside is None else ~outside
        probs, _, stats = self.route(x @ self.router, padding, counted, outside)
        hidden = torch.nn.functional.gelu(torch.einsum("...th,ehf->...etf", x, self.expert_fc1))
        outputs = torch.einsum("...etf,efh->...eth", hidden, self.expert_fc2)
        if routing is not None:
            routing.stats.append(stats)
        return torch.einsum("...te,...eth->...th", probs, outputs)
