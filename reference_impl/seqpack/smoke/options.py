"""The smoke test's checks of the reference model's MoE and MTP options.

With ``moe`` on, ``moe_router_statistics`` compares, per packed micro-batch and MoE layer, the
load-balancing loss, the z-loss and the expert-load counts (the expert-bias statistic) with the
sums over its sequences' samples run alone: they agree only when alignment and width padding stay
out of every routing statistic. With ``mtp`` on, ``mtp_equals_unpacked`` compares every
sequence's MTP loss sum, supervised-target count and logits at every real token, and the
gradients: they agree only when MTP inputs and targets roll inside each sequence. Both run on the
rows of the smoke test's batched equivalence check (packed micro-batches and the independently
tokenized samples, each a row of a padded stack): the MTP numbers are that check's ``mtp_*``
outputs and losses, the router statistics come from the same stacks with each row routed as its
own micro-batch.
Faults ``router_counts_padding`` and ``mtp_cross_boundary`` are the negative controls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["OPTION_CHECKS", "OPTION_FAULTS", "model_options", "option_checks"]

#: Checks added when the reference model has the option (no option: no check, never a skipped one).
OPTION_CHECKS: dict[str, str] = {"moe": "moe_router_statistics", "mtp": "mtp_equals_unpacked"}
#: Negative controls: the router counts padding; MTP rolls across sequence boundaries.
OPTION_FAULTS: tuple[str, ...] = ("router_counts_padding", "mtp_cross_boundary")


def model_options(moe: bool = False, mtp: bool = False) -> dict[str, bool]:
    """The reference-model options two flags turn on (``seqpack smoke --moe --mtp``, the MCP tool's arguments)."""
    return {name: True for name, on in (("moe", moe), ("mtp", mtp)) if on}


def option_checks(model: Any, packed: Sequence[Any], unpacked: Sequence[Any], match: Sequence[int], equivalence: Any,
                  faults: Sequence[str], tolerance: float, budget: int, *,
                  padding_mask_mismatches: int = 0, mtp_roll: str | None = None) -> list[Any]:
    """The option checks of ``model`` (none for a dense model) on the smoke test's rows.

    ``packed``, ``unpacked`` and ``match`` are the rows of the batched equivalence check and
    ``equivalence`` its :class:`~seqpack.training.equivalence.EquivalenceResult`: the MTP
    check reads its per-name differences of the ``mtp_*`` outputs and losses (the model's
    ``token_outputs`` / ``token_losses`` carry them), the MoE check runs both stacks again, without
    gradients, for the router statistics (:func:`~seqpack.training.moe_mtp_step.compare_router_rows`).
    The reference router takes its padding from the boundaries; ``padding_mask_mismatches`` counts the
    batches whose ``padding_mask`` field (what Megatron-Core's router reads) disagrees with them, and
    fails the MoE check unless it is 0.
    """
    from seqpack.smoke.report import Check
    from seqpack.training.moe_mtp_step import compare_router_rows

    cfg = model.config
    unmatched = sum(1 for m in match if m < 0)
    out = []
    if cfg.moe is not None:
        res = compare_router_rows(model, packed, unpacked, match, budget=budget,
                                  count_padding="router_counts_padding" in faults)
        ok = res.router_ok(tolerance) and unmatched == 0 and padding_mask_mismatches == 0
        wrong_mask = (f"; {padding_mask_mismatches} batch(es) carry a padding_mask that disagrees with their "
                      "boundaries" if padding_mask_mismatches else "")
        out.append(Check(
            "moe_router_statistics", ok,
            {"batches": res.batches, "sequences": res.sequences, "moe_layers": res.router_layers,
             "max_aux_loss_diff": res.max_aux_diff, "max_z_loss_diff": res.max_z_diff,
             "max_count_diff": res.max_count_diff, "dispatched_padding": res.dispatched_padding,
             "unmatched": unmatched, "batches_with_wrong_padding_mask": padding_mask_mismatches},
            tolerance,
            f"{res.batches} micro-batches x {res.router_layers} MoE layers: load-balancing loss, z-loss and expert "
            f"loads of each packed micro-batch vs its samples alone: max |aux diff| {res.max_aux_diff:.2e}, "
            f"max |z diff| {res.max_z_diff:.2e}, max count diff {res.max_count_diff:g} "
            f"({res.dispatched_padding} padded token-expert assignments dispatched){wrong_mask}",
            None if ok else "pass the batch's padding_mask to the router so alignment and width padding stay out of "
            "the load-balancing loss, the z-loss and the expert-bias counts",
        ))
    if cfg.mtp is not None:
        depths = range(1, cfg.mtp.num_layers + 1)
        loss = max(equivalence.loss_diffs[f"mtp_{k}"] for k in depths)
        count = max(equivalence.count_diffs[f"mtp_{k}"] for k in depths)
        logit = max(equivalence.output_diffs[f"mtp_logits_{k}"] for k in depths)
        grad = equivalence.max_grad_diff
        ok = (equivalence.sequences > 0 and unmatched == 0 and count == 0
              and max(loss, logit, grad) <= tolerance)
        out.append(Check(
            "mtp_equals_unpacked", ok,
            {"sequences": equivalence.sequences, "depths": cfg.mtp.num_layers, "max_mtp_loss_diff": loss,
             "max_mtp_count_diff": count, "max_mtp_logit_diff": logit, "max_grad_diff": grad,
             "unmatched": unmatched},
            tolerance,
            f"{equivalence.sequences} sequences x {cfg.mtp.num_layers} MTP depth(s), packed rows rolled by "
            f"{mtp_roll or 'seqpack (inside each sequence)'}: max |MTP loss diff| "
            f"{loss:.2e}, max |logit diff| {logit:.2e}, target count diff {count:g}, max |grad diff| {grad:.2e}",
            None if ok else (
                f"{mtp_roll} rolls windows of cu_seqlens_q (the real boundaries) over a row laid out by the padded "
                "ones, so sequences after alignment padding train on wrong MTP targets: keep per-sequence alignment "
                "at 1 (CP=1, no SP) for packed MTP, use a Megatron-Core with the fix (NVIDIA/Megatron-LM#4495), or "
                "set mtp_num_layers=0" if mtp_roll and "mtp_cross_boundary" not in faults else
                "roll MTP inputs and targets inside each packed sequence (the last token of a sequence "
                "gets no target from the next one), with the physical (padded) boundaries"),
            None if ok or not mtp_roll or "mtp_cross_boundary" in faults else "MTP-PACKED-ALIGNMENT-ROLL",
        ))
    return out
