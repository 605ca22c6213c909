"""The smoke test's checks of the reference model's MoE and MTP options.

With ``moe`` on, ``moe_router_statistics`` compares, per packed micro-batch and MoE layer, the
load-balancing loss, the z-loss and the expert-load counts (the expert-bias statistic) with the
sums over its sequences' samples run alone: they agree only when alignment and width padding stay
out of every routing statistic. With ``mtp`` on, ``mtp_equals_unpacked`` compares every
sequence's MTP loss sum, supervised-target count and logits at every real token, and the
gradients: they agree only when MTP inputs and targets roll inside each sequence. The samples are
the smoke test's independently tokenized ones (:func:`reference_impl.training.moe_mtp_step.compare_options`).
Faults ``router_counts_padding`` and ``mtp_cross_boundary`` are the negative controls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OPTION_CHECKS", "OPTION_FAULTS", "model_options", "option_checks"]

#: Checks added when the reference model has the option (no option: no check, never a skipped one).
OPTION_CHECKS: dict[str, str] = {"moe": "moe_router_statistics", "mtp": "mtp_equals_unpacked"}
#: Negative controls: the router counts padding; MTP rolls across sequence boundaries.
OPTION_FAULTS: tuple[str, ...] = ("router_counts_padding", "mtp_cross_boundary")


def model_options(moe: bool = False, mtp: bool = False) -> dict[str, bool]:
    """The reference-model options two flags turn on (``seqpack smoke --moe --mtp``, the MCP tool's arguments)."""
    return {name: True for name, on in (("moe", moe), ("mtp", mtp)) if on}


def _pairs(pb: Any, batches: Sequence[Mapping[str, Any]]) -> tuple[list, int]:
    from reference_impl.smoke import _key, _sequences, _single

    by_key: dict[tuple, Mapping[str, Any]] = {}
    for s in pb.samples:
        by_key.setdefault(_key(s["tokens"], s["labels"], s["loss_mask"]), s)
    pairs, unmatched = [], 0
    for batch in batches:
        found = []
        for k, (start, _, real) in enumerate(_sequences(batch)):
            if real == 0:
                continue
            sl = slice(start, start + real)
            sample = by_key.get(_key(batch["tokens"][0, sl], batch["labels"][0, sl], batch["loss_mask"][0, sl]))
            if sample is None:
                unmatched += 1
            else:
                found.append((k, _single(sample)))
        pairs.append((batch, found))
    return pairs, unmatched


def option_checks(model: Any, pb: Any, batches: Sequence[Mapping[str, Any]], faults: Sequence[str],
                  tolerance: float) -> list[Any]:
    """The option checks of ``model`` (none for a dense model) on the smoke test's batches and samples."""
    from reference_impl.smoke import Check
    from reference_impl.training.moe_mtp_step import compare_options

    cfg = model.config
    if cfg.moe is None and cfg.mtp is None:
        return []
    pairs, unmatched = _pairs(pb, batches)
    res = compare_options(model, pairs, count_padding="router_counts_padding" in faults,
                          mtp_roll="row" if "mtp_cross_boundary" in faults else "sequence")
    out = []
    if cfg.moe is not None:
        ok = res.router_ok(tolerance) and unmatched == 0
        out.append(Check(
            "moe_router_statistics", ok,
            {"batches": res.batches, "sequences": res.sequences, "moe_layers": res.router_layers,
             "max_aux_loss_diff": res.max_aux_diff, "max_z_loss_diff": res.max_z_diff,
             "max_count_diff": res.max_count_diff, "dispatched_padding": res.dispatched_padding,
             "unmatched": unmatched},
            tolerance,
            f"{res.batches} micro-batches x {res.router_layers} MoE layers: load-balancing loss, z-loss and expert "
            f"loads of each packed micro-batch vs its samples alone: max |aux diff| {res.max_aux_diff:.2e}, "
            f"max |z diff| {res.max_z_diff:.2e}, max count diff {res.max_count_diff:g} "
            f"({res.dispatched_padding} padded token-expert assignments dispatched)",
            None if ok else "pass the batch's padding_mask to the router so alignment and width padding stay out of "
            "the load-balancing loss, the z-loss and the expert-bias counts",
        ))
    if cfg.mtp is not None:
        ok = res.mtp_ok(tolerance) and unmatched == 0
        out.append(Check(
            "mtp_equals_unpacked", ok,
            {"sequences": res.sequences, "depths": res.mtp_depths, "max_mtp_loss_diff": res.max_mtp_loss_diff,
             "max_mtp_count_diff": res.max_mtp_count_diff, "max_mtp_logit_diff": res.max_mtp_logit_diff,
             "max_grad_diff": res.max_grad_diff, "unmatched": unmatched},
            tolerance,
            f"{res.sequences} sequences x {res.mtp_depths} MTP depth(s): max |MTP loss diff| "
            f"{res.max_mtp_loss_diff:.2e}, max |logit diff| {res.max_mtp_logit_diff:.2e}, target count diff "
            f"{res.max_mtp_count_diff:g}, max |grad diff| {res.max_grad_diff:.2e}",
            None if ok else "roll MTP inputs and targets inside each packed sequence (the last token of a sequence "
            "gets no target from the next one), with the physical (padded) boundaries",
        ))
    return out
