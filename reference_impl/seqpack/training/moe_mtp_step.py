"""Forward/backward of one packed micro-batch with the MoE and MTP options, and its unpacked counterpart.

:func:`options_step` runs :class:`~seqpack.training.model.TinyGPT` (with ``moe`` and/or
``mtp`` set) on a canonical packed row and returns, besides the LM loss pieces, the router
statistics of every MoE layer (:class:`~seqpack.training.moe.RouterStats`, padding left
out through the batch's ``padding_mask``) and the MTP loss pieces of every depth (targets rolled
inside each sequence, :func:`~seqpack.training.mtp.with_mtp_streams`).
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from seqpack.core.errors import UsageError
from seqpack.training.attention import attention_mask
from seqpack.training.boundaries import thd_layout
from seqpack.training.equivalence import DEFAULT_BUDGET, Row, stack_chunks, stack_rows
from seqpack.training.loss import masked_loss_pieces, token_cross_entropy
from seqpack.training.model import TinyGPT
from seqpack.training.moe import RouterStats, Routing, load_balancing_loss
from seqpack.training.mtp import with_mtp_streams
from seqpack.training.step import sequence_loss_sums, split_sequences

__all__ = ["AuxLog", "OptionsComparison", "OptionsStepResult", "average_aux_logs", "compare_options",
           "compare_router_rows", "mtp_objective", "option_terms", "options_step", "padding_mask_of",
           "stack_router_stats", "sum_router_stats", "unpacked_options"]


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
    mtp_sequence_counts: list[list[float]] = field(default_factory=list)
    mtp_logits: list[torch.Tensor] = field(default_factory=list, repr=False)

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
    keep_logits: bool = False,
) -> OptionsStepResult:
    """Forward (and backward when ``grads``) of one whole packed row with the model's options.

    ``keep_logits`` keeps every MTP depth's logits ``[T, V]`` (detached) in the result.
    """
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
        mtp_sums, mtp_counts, mtp_seq, mtp_seq_counts, kept = [], [], [], [], []
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
                seq_sums, seq_counts = sequence_loss_sums(k_losses.detach(), k_mask, layout)
                mtp_seq.append(seq_sums[:-1].tolist())
                mtp_seq_counts.append(seq_counts[:-1].tolist())
                if keep_logits:
                    kept.append(depth_logits.detach())
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
        mtp_sequence_counts=mtp_seq_counts,
        mtp_logits=kept,
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


# ------------------------------------------------------------------------------------------------
# Packed against the samples run alone (the smoke test's MoE and MTP checks)
# ------------------------------------------------------------------------------------------------


@dataclass
class OptionsComparison:
    """Largest packed-vs-unpacked differences of the MoE and MTP options over a set of packed micro-batches.

    Router: per micro-batch and MoE layer, the load-balancing loss and the z-loss (coefficients left
    out) and every count (tokens counted, tokens per expert, expert load) of the packed row against
    the sums over its sequences' samples run alone. MTP: per sequence and depth, the loss sum and the
    supervised-target count, and the logits at every real token. ``max_grad_diff``: the gradient of
    ``lm_sum + sum of mtp_sums`` of each row against the sum over its samples.
    """

    batches: int
    sequences: int
    router_layers: int
    mtp_depths: int
    max_aux_diff: float = 0.0
    max_z_diff: float = 0.0
    max_count_diff: float = 0.0
    max_mtp_loss_diff: float = 0.0
    max_mtp_count_diff: float = 0.0
    max_mtp_logit_diff: float = 0.0
    max_grad_diff: float = 0.0
    dispatched_padding: int = 0

    def router_ok(self, tolerance: float) -> bool:
        """Every router statistic agrees within ``tolerance`` (counts exactly)."""
        return self.sequences > 0 and max(self.max_aux_diff, self.max_z_diff) <= tolerance and self.max_count_diff == 0

    def mtp_ok(self, tolerance: float) -> bool:
        """Every MTP number agrees within ``tolerance`` (counts exactly)."""
        return (self.sequences > 0 and self.max_mtp_count_diff == 0
                and max(self.max_mtp_loss_diff, self.max_mtp_logit_diff, self.max_grad_diff) <= tolerance)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dict(self.__dict__)


def _largest(values: torch.Tensor) -> float:
    return float(values.abs().max()) if values.numel() else 0.0


def _router_diffs(out: OptionsComparison, packed: Sequence[RouterStats], summed: Sequence[RouterStats],
                  moe: Any) -> None:
    """Fold one micro-batch's router statistics, per layer, against the sums over its samples into ``out``."""
    for p, u in zip(packed, summed):
        aux = load_balancing_loss(p.score_sum, p.tokens_per_expert, moe.topk, 1.0)
        aux_u = load_balancing_loss(u.score_sum, u.tokens_per_expert, moe.topk, 1.0)
        out.max_aux_diff = max(out.max_aux_diff, abs(float(aux - aux_u)))
        out.max_z_diff = max(out.max_z_diff, abs(float(p.z_loss(moe) - u.z_loss(moe))) / (moe.z_loss_coeff or 1.0))
        for a, b in ((p.num_tokens, u.num_tokens), (p.tokens_per_expert, u.tokens_per_expert),
                     (p.expert_load, u.expert_load)):
            out.max_count_diff = max(out.max_count_diff, _largest(a - b))


def stack_router_stats(model: TinyGPT, rows: Sequence[Row], *, count_padding: bool = False,
                       budget: int = DEFAULT_BUDGET) -> tuple[list[list[RouterStats]], int]:
    """Router statistics of every row run as its own micro-batch (one :class:`RouterStats` per MoE layer
    and row), from stacked forwards without gradients (:meth:`TinyGPT.token_outputs` with
    :meth:`TinyGPT.token_routing`), and the token-expert assignments of the rows' padding dispatched."""
    out: list[list[RouterStats]] = [[] for _ in rows]
    dispatched_padding = 0
    with torch.no_grad():
        for chunk in stack_chunks(rows, budget):
            stack = stack_rows([rows[i] for i in chunk])
            routing = model.token_routing(stack, count_padding=count_padding)
            model.token_outputs(stack, routing)
            dispatched_padding += sum(s.dispatched_padding for s in routing.stats)
            for j, i in enumerate(chunk):
                out[i] = [s.select(j) for s in routing.stats]
    return out, dispatched_padding


def compare_router_rows(model: TinyGPT, packed: Sequence[Row], unpacked: Sequence[Row], match: Sequence[int], *,
                        count_padding: bool = False, budget: int = DEFAULT_BUDGET) -> OptionsComparison:
    """The router half of :func:`compare_options` on the batched rows of the smoke test
    (:mod:`seqpack.training.equivalence`): per packed row and MoE layer, its statistics against
    the sums over its sequences' unpacked rows. ``match[k]``: the unpacked row of packed sequence ``k``
    (the packed rows number their sequences consecutively); a row with an unmatched sequence is left
    out (the equivalence check counts it). ``count_padding`` applies to the packed side only."""
    moe = model.config.moe
    if moe is None:
        raise UsageError("this model has no MoE layers (TinyGPTConfig.moe is None)", field="moe")
    out = OptionsComparison(batches=0, sequences=0, router_layers=0, mtp_depths=0)
    p_stats, out.dispatched_padding = stack_router_stats(model, packed, count_padding=count_padding, budget=budget)
    u_stats, _ = stack_router_stats(model, unpacked, budget=budget)
    first = 0
    for row, stats in zip(packed, p_stats):
        slots = list(match[first : first + len(row.sequences)])
        first += len(row.sequences)
        if not slots or min(slots) < 0:
            continue
        summed = [sum(layer[1:], layer[0]) for layer in zip(*(u_stats[j] for j in slots))]
        out.batches += 1
        out.sequences += len(slots)
        out.router_layers = len(stats)
        _router_diffs(out, stats, summed, moe)
    return out


def compare_options(
    model: TinyGPT,
    pairs: Sequence[tuple[Mapping[str, Any], Sequence[tuple[int, Mapping[str, Any]]]]],
    *,
    count_padding: bool = False,
    mtp_roll: str = "sequence",
) -> OptionsComparison:
    """Compare packed rows with their samples run alone (see :class:`OptionsComparison`).

    ``pairs``: for each packed micro-batch, the list of ``(sequence index, sample batch)`` of its
    sequences (the index counts the row's physical sequences, zero-length ones included; the
    sample batch is the sample alone, positions from 0). ``count_padding`` and ``mtp_roll`` apply to
    the packed side only: the negative controls.
    """
    moe = model.config.moe
    depths = model.config.mtp.num_layers if model.config.mtp is not None else 0
    out = OptionsComparison(batches=0, sequences=0, router_layers=0, mtp_depths=depths)
    for batch, samples in pairs:
        if not samples:
            continue
        packed = options_step(model, batch, count_padding=count_padding, mtp_roll=mtp_roll, keep_logits=True)
        alone = [(k, options_step(model, sample, keep_logits=True)) for k, sample in samples]
        out.batches += 1
        out.sequences += len(alone)
        out.router_layers = len(packed.router)
        out.dispatched_padding += sum(s.dispatched_padding for s in packed.router)
        _router_diffs(out, packed.router, sum_router_stats([res for _, res in alone]), moe)
        layout = thd_layout(batch)
        starts = layout.physical[:-1].tolist()
        for d in range(depths):
            for k, res in alone:
                out.max_mtp_loss_diff = max(out.max_mtp_loss_diff,
                                            abs(packed.mtp_sequences[d][k] - res.mtp_loss_sums[d]))
                out.max_mtp_count_diff = max(out.max_mtp_count_diff,
                                             abs(packed.mtp_sequence_counts[d][k] - res.mtp_token_counts[d]))
                n = res.mtp_logits[d].shape[0]
                rows = packed.mtp_logits[d][starts[k] : starts[k] + n]
                out.max_mtp_logit_diff = max(out.max_mtp_logit_diff, _largest(rows - res.mtp_logits[d]))
        total = {name: sum(res.grads[name] for _, res in alone) for name in packed.grads}
        out.max_grad_diff = max(out.max_grad_diff, max(_largest(packed.grads[n] - total[n]) for n in total))
    return out


# ------------------------------------------------------------------------------------------------
# Training-step terms and logged values (global-batch path)
# ------------------------------------------------------------------------------------------------


@dataclass
class AuxLog:
    """Auxiliary losses of one micro-batch as Megatron-Core logs them (coefficients left out).

    ``load_balancing_loss`` and ``z_loss`` hold one value per MoE layer (trunk, then MTP layers),
    ``mtp_loss`` one per MTP depth (masked sum over rolled tokens / their count), ``expert_load``
    the real tokens per expert of every MoE layer (the expert-bias statistic), ``real_tokens`` the
    micro-batch's non-padding tokens. Values are those of the whole micro-batch (summed over the
    context-parallel group), i.e. the CP=1 numbers.
    """

    real_tokens: float = 0.0
    load_balancing_loss: list[float] = field(default_factory=list)
    z_loss: list[float] = field(default_factory=list)
    mtp_loss: list[float] = field(default_factory=list)
    expert_load: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"real_tokens": self.real_tokens, "load_balancing_loss": self.load_balancing_loss, "z_loss": self.z_loss, "mtp_loss": self.mtp_loss,
                "expert_load": self.expert_load}


def average_aux_logs(logs: list[AuxLog]) -> dict[str, Any]:
    """What one step logs: each loss averaged over the layers, then over the micro-batches that ran.

    Megatron-Core's trackers add every micro-batch's value per layer and scale by ``loss_scale``
    when reporting (``moe_logging.py`` ``MoEMetricsTracker.report``/``_aggregate``,
    ``MTPLossLoggingHelper.track_mtp_metrics``); Megatron-Bridge passes ``1 / get_num_microbatches()``
    (``training/utils/train_utils.py``). With global-batch packing the number of micro-batches
    changes every step, so the scale here is ``1 / len(logs)``: a step with 3 micro-batches and one
    with 5 report comparable numbers. ``mtp_loss`` stays per depth; ``expert_load`` is *summed* over
    the micro-batches (the expert bias moves once per step from the step's counts). Empty keys are
    left out.

    A micro-batch without a real token (a global-batch filler pack) has no routing statistics; it
    is left out of the averages (``micro_batches`` counts the ones averaged, ``filler_micro_batches``
    the others). Megatron-Core has no such guard: its load-balancing loss divides by the squared
    number of counted tokens, which is 0 there.
    """
    if not logs:
        return {}
    ran = [log for log in logs if log.real_tokens > 0]
    out: dict[str, Any] = {"micro_batches": len(ran), "filler_micro_batches": len(logs) - len(ran)}
    if not ran:
        return out
    for key in ("load_balancing_loss", "z_loss"):
        per_mb = [sum(getattr(log, key)) / len(getattr(log, key)) for log in ran if getattr(log, key)]
        if per_mb:
            out[key] = sum(per_mb) / len(ran)
    depths = len(ran[0].mtp_loss)
    if depths:
        out["mtp_loss"] = [sum(log.mtp_loss[k] for log in ran) / len(ran) for k in range(depths)]
    if logs[0].expert_load:
        out["expert_load"] = [[sum(col) for col in zip(*layer)] for layer in zip(*(log.expert_load for log in logs))]
    return out


def _all_reduce(vector: torch.Tensor, group: Any, cp_size: int) -> torch.Tensor:
    if cp_size > 1:
        import torch.distributed as dist

        vector = vector.clone()
        dist.all_reduce(vector, group=group)
    return vector


def option_terms(
    model: TinyGPT,
    fwd: Any,
    local_batch: Mapping[str, Any],
    routing: Routing | None,
    *,
    cp_size: int = 1,
    group: Any = None,
) -> tuple[torch.Tensor, AuxLog]:
    """The MoE and MTP terms of one CP rank's micro-batch for a per-token-loss training step.

    ``fwd`` is the rank's :class:`~seqpack.training.cp_step.CPForward` (run with ``routing``),
    ``local_batch`` its slice of a batch that went through :func:`~seqpack.training.mtp.with_mtp_streams`
    first. Returns the term to add to the rank's loss sum before backward (before the gradients
    are divided by the global supervised-token count) and the micro-batch's :class:`AuxLog`.

    Scaling follows Megatron-Core with ``calculate_per_token_loss`` (router.py
    ``attach_and_log_load_balancing_loss`` / ``apply_z_loss``, multi_token_prediction.py
    ``process_mtp_loss``): the load-balancing loss times the micro-batch's non-padding tokens; the
    z-loss as ``coeff`` times the rank's summed ``logsumexp**2``; each MTP depth as ``scaling / D``
    times its masked sum times the supervised tokens over the rolled ones. One difference, so that a
    CP run gives the CP=1 gradients exactly: where Megatron-Core multiplies by the *rank's* counts
    (the load-balancing loss by its non-padding tokens times CP, the MTP term by its own supervised
    over rolled tokens; its MTP comment says exact parity would need all-reduced counts), this uses
    the counts summed over the CP group. With equal counts on every rank the two agree.
    """
    objective = fwd.losses.sum() * 0
    padding = local_batch.get("padding_mask")
    real = fwd.loss_mask.new_tensor(float(fwd.losses.shape[0]) if padding is None else float((~padding).sum()))
    log = AuxLog(real_tokens=float(_all_reduce(real.to(torch.float64).reshape(1), group, cp_size)[0]))
    mtp = model.config.mtp
    if mtp is not None:  # first: MoE layers of the MTP depths add their router statistics
        streams = {k: local_batch[k] for k in ("mtp_tokens", "mtp_position_ids")}
        logits = model.mtp_logits(fwd.hidden, streams, fwd.mask, kv_exchange=fwd.exchange, routing=routing)
        original = fwd.loss_mask.sum().detach()
        for k, depth_logits in enumerate(logits):
            k_mask = local_batch["mtp_loss_mask"][0, :, k]
            k_losses = token_cross_entropy(depth_logits, local_batch["mtp_labels"][0, :, k], k_mask)
            s, c = masked_loss_pieces(k_losses, k_mask)
            sums = _all_reduce(torch.stack([s.detach(), c, original]).to(torch.float64), group, cp_size)
            objective = objective + mtp.loss_scaling_factor / mtp.num_layers * s * sums[2] / sums[1].clamp(min=1)
            log.mtp_loss.append(float(sums[0] / sums[1].clamp(min=1)))
    moe = model.config.moe
    if moe is not None and routing is not None:
        for stats in routing.stats:
            total = RouterStats.from_vector(_all_reduce(stats.vector().detach(), group, cp_size), moe.num_experts)
            local_aux = load_balancing_loss(stats.score_sum, total.tokens_per_expert, moe.topk, moe.aux_loss_coeff)
            objective = objective + local_aux * total.num_tokens
            objective = objective + stats.z_sum * (moe.z_loss_coeff or 0.0)
            summary = total.summary(moe)
            log.load_balancing_loss.append(summary["load_balancing_loss"])
            log.z_loss.append(summary["z_loss"])
            log.expert_load.append(summary["expert_load"])
    return objective, log
