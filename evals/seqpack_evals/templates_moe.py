"""Tasks on MoE and MTP with packed sequences: dispatch widths, router statistics, MTP targets, aux-loss logging.

Every value comes from the code: ``validate_config`` (the ``moe`` rule family and the report's
``moe_dispatch``), ``plan`` with an MoE dispatcher, the reference model's MTP roll
(:mod:`seqpack.training.mtp`). Two near-miss negatives ask MoE questions that have nothing to do
with packing (one from ``evals/data/near_miss.yaml``, section ``moe``; the one with arithmetic here).
"""

from __future__ import annotations

from typing import Any, Sequence

from seqpack.config.rules import RULES_BY_ID
from seqpack.core.errors import UsageError
from seqpack_evals import claims, tables
from seqpack_evals.builder import GenContext, make_task, override_args, paths_of
from seqpack_evals.facts import facts_for_rule, merge
from seqpack_evals.fields import choice_field, int_field, literal, percent_field, yes_no_field
from seqpack_evals.render import config_yaml
from seqpack_evals.templates_near_miss import add_near_miss, add_table
from seqpack_evals.vocab import rule_ids_field

TOPIC = "moe_mtp"
HYBRIDEP = ("model.num_moe_experts=64", "model.moe_token_dispatcher_type=flex",
            "model.moe_flex_dispatcher_backend=hybridep")


def _offline(width: int) -> tuple[str, ...]:
    return ("dataset.enable_offline_packing=true", f"dataset.offline_packing_specs.packed_sequence_size={width}",
            f"model.seq_length={width}", "dataset.dataset_kwargs.pad_to_max_length=true")


def _dispatch_width_task(ctx: GenContext) -> None:
    overrides = (*_offline(8192), *HYBRIDEP, "model.tensor_model_parallel_size=4", "model.context_parallel_size=2",
                 "model.sequence_parallel=true", "model.calculate_per_token_loss=true",
                 "dataset.offline_packing_specs.pad_seq_to_mult=8", "model.expert_model_parallel_size=8",
                 "dist.world_size=64")
    report = ctx.validate(None, list(overrides))
    if not report.ok or report.warnings:
        raise UsageError(f"dispatch task config should pass cleanly: {report.rule_ids}")
    moe = report.resolved["moe_dispatch"]
    ctx.add(make_task(
        "explicit-moe-dispatch-width-tp4-cp2-sp",
        "explicit",
        "Use the Megatron sequence packing skill: an MoE fine-tune packs offline to a fixed width of 8192 tokens "
        "with TP4, CP2 and sequence parallelism, EP8 and the HybridEP flex dispatcher. How many tokens does each "
        "rank hand to the dispatcher per micro-batch, and which pack widths give every rank a whole number of "
        "HybridEP's 64-token chunks?",
        f"Each rank holds 8192 / (CP2 x TP4) = {moe['per_rank_tokens']} tokens of a pack and dispatches all of "
        f"them, padding included. That is {moe['per_rank_tokens'] // 64} whole chunks; a pack width that is a "
        f"multiple of {moe['width_multiple']} keeps every rank on whole 64-token chunks (seqpack validate "
        "reports it as moe_dispatch).",
        [int_field("per_rank_tokens", moe["per_rank_tokens"], r"tokens per rank", r"per rank",
                   r"each rank (?:holds|dispatches|sends|hands)", says="tokens each rank dispatches per micro-batch"),
         int_field("width_multiple", moe["width_multiple"], r"multiple of", r"width multiple",
                   says="pack width multiple that keeps every rank on whole chunks")],
        claims.path_claims(["offline", "context_parallel"]),
        assertions=["Divides the pack width by CP and by TP (sequence parallelism splits the sequence)"],
        script="seqpack validate",
        command=["validate", "/dev/null", *override_args(list(overrides))],
        paths=["offline", "context_parallel"],
        topics=[TOPIC],
        truth={"moe_dispatch": moe, "overrides": list(overrides)},
    ))


def _as_mapping(overrides: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` overrides as the dotted mapping ``config_yaml`` takes (values read as YAML scalars)."""
    import yaml

    return {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in overrides)}


def _scenario_tasks(ctx: GenContext) -> None:
    for r in tables.rows("moe", "scenarios", ("slug", "story", "overrides", "graded")):
        slug, story = r["slug"], r["story"]
        overrides = tables.strings(r["overrides"], f"moe.yaml: scenarios: {slug}: overrides")
        graded = tables.strings(r["graded"], f"moe.yaml: scenarios: {slug}: graded")
        text = config_yaml(_as_mapping(overrides))
        report = ctx.validate(text)
        fired = report.rule_ids
        missing = [r for r in graded if r not in fired]
        if missing:
            raise UsageError(f"scenario {slug}: expected {missing} to fire, got {fired}")
        fields, forbidden, sentences = merge([fact for rid in graded for fact in facts_for_rule(report, rid)])
        paths = paths_of(report)
        findings = [f for f in report.violations + report.warnings if f.rule_id in graded]
        ctx.add(make_task(
            f"implicit-{slug}",
            "implicit",
            f"{story}\n\n```yaml\n{text}```",
            ("This config is rejected:\n" if report.violations else "This config passes with a warning:\n")
            + "".join(f"[{f.rule_id}] {f.message}\n" for f in findings) + " ".join(sentences),
            [rule_ids_field(list(graded), says="rules that flag it")] + fields,
            forbidden + claims.path_claims(paths),
            assertions=[f"Identifies the problem checked by {rid}: {RULES_BY_ID[rid].title}" for rid in graded],
            script="seqpack validate",
            command=["validate", "/dev/null", *override_args(list(overrides))],
            paths=paths,
            topics=["rules", TOPIC],
            rule_ids=list(graded),
            truth={"violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings],
                   "messages": [f.one_line() for f in findings], "resolved": report.resolved, "config": text},
        ))


def mtp_target_counts(lengths: Sequence[int], multiple: int = 1) -> dict[str, int]:
    """MTP depth-1 supervised targets of fully supervised sequences packed in one row, per roll rule."""
    import torch

    from seqpack.packing.thd import build_thd_batch
    from seqpack.training.boundaries import thd_layout
    from seqpack.training.mtp import roll_packed

    rows = [{"tokens": list(range(1, n + 1)), "labels": list(range(2, n + 2)), "loss_mask": [1] * n} for n in lengths]
    batch = build_thd_batch(rows, pad_seq_to_mult=multiple)
    layout = thd_layout(batch)
    mask = batch["loss_mask"][0]
    return {mode: int(torch.count_nonzero(roll_packed(mask, layout, mode)))
            for mode in ("sequence", "row", "mcore_real_offsets")}


def _mtp_targets_task(ctx: GenContext) -> None:
    lengths = (7, 4, 9, 5)
    counts = mtp_target_counts(lengths)
    ctx.add(make_task(
        "explicit-mtp-targets-packed-row",
        "explicit",
        "With the Megatron sequence packing skill: four SFT samples of 7, 4, 9 and 5 tokens, every label "
        "supervised, are packed into one row (no alignment padding) for a model with one MTP layer. How many "
        "positions get a supervised MTP target, and how many would a roll over the whole packed row give?",
        f"Megatron-Core (since core_v0.16.0) rolls the MTP targets inside each packed sequence: the last token of "
        f"every sequence gets no target, so {sum(lengths)} tokens give {counts['sequence']} MTP targets. A roll "
        f"over the whole row would hand the last token of each sequence but the final one a target from the next "
        f"sequence: {counts['row']} targets, {counts['row'] - counts['sequence']} of them across a boundary.",
        [int_field("mtp_targets", counts["sequence"], r"MTP targets", r"supervised MTP", says="MTP targets in the row"),
         int_field("row_roll_targets", counts["row"], r"whole row", r"across (?:the|a) boundar",
                   says="targets a roll over the whole row gives")],
        claims.path_claims(["offline"]),
        assertions=["Says the roll must stop at every sequence boundary"],
        script="seqpack rules",
        command=["rules", "PACK-MTP-DOCUMENTED"],
        paths=["offline"],
        topics=[TOPIC],
        truth={"lengths": list(lengths), "counts": counts},
    ))


def _mtp_alignment_roll_task(ctx: GenContext) -> None:
    lengths = (7, 4, 9, 5)
    counts = mtp_target_counts(lengths, multiple=4)
    ctx.add(make_task(
        "explicit-mtp-roll-alignment-padding",
        "explicit",
        "Using the sequence packing skill: the same four fully supervised samples (7, 4, 9 and 5 tokens) are packed "
        "with pad_seq_to_mult 4 for CP2, so each sequence is padded to a multiple of 4. Megatron-Core's packed MTP "
        "roll takes its windows from cu_seqlens_q. How many MTP targets does that roll supervise, against how many "
        "a correct per-sequence roll supervises, and which seqpack rule warns about it?",
        f"A correct roll supervises {counts['sequence']} MTP targets. Megatron-Core reads cu_seqlens_q (the real "
        f"boundaries) as physical offsets while the row is laid out by the padded ones, so its windows drift after "
        f"the first sequence and it supervises {counts['mcore_real_offsets']}, partly with wrong targets. "
        "MTP-PACKED-ALIGNMENT-ROLL warns about MTP with alignment padding.",
        [int_field("correct_targets", counts["sequence"], r"correct", r"per[- ]sequence roll",
                   says="MTP targets of a per-sequence roll"),
         int_field("mcore_targets", counts["mcore_real_offsets"], r"Megatron-Core", r"cu_seqlens_q",
                   says="MTP targets of Megatron-Core's roll"),
         rule_ids_field(["MTP-PACKED-ALIGNMENT-ROLL"], says="the rule that warns")],
        claims.path_claims(["offline", "context_parallel"]),
        assertions=["Explains that the real boundaries are used as physical offsets of a padded layout"],
        script="seqpack rules",
        command=["rules", "MTP-PACKED-ALIGNMENT-ROLL"],
        paths=["offline", "context_parallel"],
        topics=[TOPIC],
        rule_ids=["MTP-PACKED-ALIGNMENT-ROLL"],
        truth={"lengths": list(lengths), "pad_seq_to_mult": 4, "counts": counts},
    ))


def _plan_task(ctx: GenContext) -> None:
    from seqpack.verbs import PlanOptions, plan

    lengths = (900, 300, 1500, 700, 2000, 120, 3000, 800, 450, 1250)
    result = plan(PlanOptions(lengths=list(lengths), candidates=(4096,), token_slots=8192,
                              moe_dispatcher="hybridep", ep=2))
    d = result.rows[0].dispatch
    share = 100 * d["dispatch_padding_share"]
    added = 100 * d["dispatcher_padding_share"]
    ctx.add(make_task(
        "explicit-moe-plan-hybridep-padding",
        "explicit",
        "Use seqpack's planner: samples of " + ", ".join(map(str, lengths)) + " tokens, 4096-token packs of "
        "variable width, 8192 token slots per step, an MoE model with eager HybridEP on 2 expert-parallel ranks. "
        "What share of the tokens the dispatcher sends are padding, and how much of that does HybridEP itself add?",
        f"seqpack plan --moe-dispatcher hybridep --ep 2: {share:.1f}% of the dispatched tokens are padding, "
        f"{added:.1f} points of it added by HybridEP's uneven-input padding (each micro-batch padded to the "
        "largest of its EP group, rounded up to 64 tokens).",
        [percent_field("dispatch_padding_share", share, r"padding", r"dispatched", says="padding share of dispatched tokens"),
         percent_field("dispatcher_padding_share", added, r"HybridEP", r"added", says="share added by the dispatcher")],
        claims.path_claims(["offline"]),
        script="seqpack plan",
        command=["plan", "--lengths", ",".join(map(str, lengths)), "--candidates", "4096", "--token-slots", "8192",
                 "--moe-dispatcher", "hybridep", "--ep", "2"],
        paths=["offline"],
        topics=[TOPIC],
        truth={"dispatch": d},
    ))


def _energon_mtp_task(ctx: GenContext) -> None:
    from seqpack.training.mtp import PACKED_ROLL_SINCE

    overrides = ("dataset.kind=energon", "dataset.packing_buffer_size=16", "model.calculate_per_token_loss=true",
                 "model.mtp_num_layers=1")
    report = ctx.validate(None, list(overrides))
    rule = RULES_BY_ID["PACK-ENERGON-NO-MTP"]
    if "PACK-ENERGON-NO-MTP" not in [f.rule_id for f in report.violations + report.warnings]:
        raise UsageError("the Energon MTP task expects PACK-ENERGON-NO-MTP to fire (for Bridge main)")
    versions = ("core_v0.15.0", "core_v0.16.0", "core_v0.17.0", "core_v0.19.0")
    ctx.add(make_task(
        "explicit-energon-mtp-versions",
        "explicit",
        "With the Megatron sequence packing skill: one Megatron-Bridge page says Energon native packing supports "
        "MTP through Megatron-Core's boundary-aware token rolling, another says packing and MTP are incompatible. "
        "Does Megatron-Bridge at 067f987 accept Energon packing with mtp_num_layers=1, and since which Megatron-Core "
        "release does the MTP roll stay inside each packed sequence?",
        f"No: Megatron-Bridge main at 067f987 rejects it; Megatron-Bridge PR #5990 (merged 2026-09-07) drops that check "
        "and megatron-bridge 0.6.2 lacks Energon native packing altogether. seqpack's rule for this is "
        f"{rule.id} ({rule.severity}: {rule.title}). Megatron-Core rolls "
        f"MTP targets per packed sequence since {PACKED_ROLL_SINCE}; the incompatibility statement describes the "
        "releases before it, and the supported-statement describes a later Bridge.",
        [yes_no_field("bridge_accepts", False, [r"(?<!not )accepts\b", r"\bis supported\b"],
                      [r"\brejects?\b", r"not (?:accepted|supported)", r"does not (?:accept|support)"],
                      anywhere=True, says="Bridge 067f987 accepts Energon packing with MTP"),
         choice_field("packed_roll_since", PACKED_ROLL_SINCE, {v: (literal(v), literal(v.removeprefix("core_v")))
                                                              for v in versions},
                      r"since", r"Megatron-Core", says="first Megatron-Core release with the packed MTP roll"),
         rule_ids_field(["PACK-ENERGON-NO-MTP"], says="the rule")],
        claims.path_claims(["energon"]),
        script="seqpack validate",
        command=["validate", "/dev/null", *override_args(list(overrides))],
        paths=["energon"],
        topics=["rules", TOPIC],
        rule_ids=["PACK-ENERGON-NO-MTP"],
        truth={"rule": rule.describe(), "packed_roll_since": PACKED_ROLL_SINCE},
    ))


def _ep_memory_near_miss(ctx: GenContext) -> None:
    experts, ep = 64, 8
    add_near_miss(
        ctx, "nm-moe-ep-memory",
        f"We train a {experts}-expert MoE on {ep} GPUs with expert parallelism {ep}. How many experts' weights does "
        "each GPU hold?",
        f"With EP={ep} the {experts} experts are split evenly: each GPU holds {experts} / {ep} = {experts // ep} "
        "experts.",
        [int_field("experts_per_gpu", experts // ep, r"experts per (?:GPU|rank)", r"each (?:GPU|rank) holds",
                   says="experts per GPU")],
        "mixture of experts")


def build(ctx: GenContext) -> None:
    """Add the MoE / MTP tasks to ``ctx``."""
    _dispatch_width_task(ctx)
    _scenario_tasks(ctx)
    _mtp_targets_task(ctx)
    _mtp_alignment_roll_task(ctx)
    _plan_task(ctx)
    _energon_mtp_task(ctx)
    add_table(ctx, "moe")  # near misses: MoE questions that are not about packing
    _ep_memory_near_miss(ctx)


__all__ = ["build", "mtp_target_counts"]
