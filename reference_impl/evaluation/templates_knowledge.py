"""Tasks answered from knowledge plus the light tools: alignment, token slots, rules, model support.

Explicit tasks name the skill or ``seqpack``; implicit ones describe the same kind of problem in a
user's words. Every value in the checks comes from ``derive_alignment``, ``equal_slot_candidates``,
``token_slots_per_step``, ``validate_config``, ``get_rule`` or ``check_model_support``.
"""

from __future__ import annotations

from typing import Any, Sequence

from reference_impl.alignment import derive_alignment, equal_slot_candidates, token_slots_per_step
from reference_impl.config import get_rule, validate_config
from reference_impl.config.model_support import check_model_support, find_family
from reference_impl.config.rules import FAMILIES, RULES, RULES_BY_ID
from reference_impl.errors import UsageError
from reference_impl.evaluation.checks import (
    REGEX_PREFIX,
    Checks,
    any_of,
    asserts,
    number,
    states,
    tokens_re,
    word,
)
from reference_impl.evaluation.dataset import GenContext, make_task
from reference_impl.evaluation.facts import Fact, facts_for, facts_for_rule
from reference_impl.evaluation.render import config_yaml, sentence, topology_words

PAD = "dataset.offline_packing_specs.pad_seq_to_mult"


# ------------------------------------------------------------------------------------------------
# Alignment
# ------------------------------------------------------------------------------------------------

EXPLICIT_TOPOLOGIES: tuple[tuple[int, int, bool, int | None], ...] = (
    (4, 2, True, None),
    (1, 1, False, None),
    (4, 1, True, None),
    (8, 2, True, None),
    (2, 4, False, None),
    (2, 2, True, 4),
)
IMPLICIT_TOPOLOGIES: tuple[tuple[int, int, bool, int | None, int], ...] = (
    (2, 3, True, None, 6144),
    (8, 1, True, None, 8192),
    (4, 4, False, None, 32768),
    (1, 2, False, None, 4096),
)


def _alignment_checks(tp: int, cp: int, sp: bool, eval_cp: int | None) -> tuple[Checks, Any]:
    al = derive_alignment(tp, cp, sp, eval_cp)
    pad = al.pad_seq_to_mult
    wrong = sorted({al.cp_multiple, al.sp_multiple, tp, cp, 2 * tp * cp, 1} - {pad})
    checks = Checks().need(states("pad_seq_to_mult", pad))
    checks.ban(*(asserts("pad_seq_to_mult", w) for w in wrong))
    return checks, al


def _slug(tp: int, cp: int, sp: bool, eval_cp: int | None) -> str:
    return f"tp{tp}-cp{cp}{'-sp' if sp else ''}{f'-evalcp{eval_cp}' if eval_cp else ''}"


def _alignment_tasks(ctx: GenContext) -> None:
    for tp, cp, sp, eval_cp in EXPLICIT_TOPOLOGIES:
        checks, al = _alignment_checks(tp, cp, sp, eval_cp)
        topo = topology_words(tp, cp, sp, eval_cp)
        ctx.add(make_task(
            f"explicit-align-{_slug(tp, cp, sp, eval_cp)}",
            "explicit",
            f"Use the Megatron sequence packing skill (seqpack) to derive pad_seq_to_mult for offline packed SFT "
            f"with {topo}. Give the value and the formula behind it.",
            f"pad_seq_to_mult = {al.pad_seq_to_mult}. {al.explanation}. Pin it in "
            f"dataset.offline_packing_specs.pad_seq_to_mult and rebuild the packs if the topology changes.",
            [f"States pad_seq_to_mult = {al.pad_seq_to_mult}",
             "Explains it as the lcm of 2*CP (when CP>1) and CP*TP (when SP is on with TP>1)"
             + (", over the training and evaluation CP sizes" if eval_cp else ""),
             "Runs seqpack align (or the derive_alignment tool) instead of guessing"],
            checks,
            script="seqpack align",
            paths=["offline"] + (["context_parallel"] if cp > 1 or eval_cp else []),
            topics=["alignment"],
            truth=al.to_dict(),
        ))
    for tp, cp, sp, eval_cp, seq in IMPLICIT_TOPOLOGIES:
        checks, al = _alignment_checks(tp, cp, sp, eval_cp)
        ctx.add(make_task(
            f"implicit-align-{_slug(tp, cp, sp, eval_cp)}",
            "implicit",
            f"We fine-tune with Megatron-Bridge and concatenate several SFT samples into each {seq}-token row "
            f"ahead of time. The job runs with tensor parallel {tp}, context parallel {cp} and sequence "
            f"parallelism {'enabled' if sp else 'disabled'}. Every sample is padded before it goes into a row: "
            f"what should pad_seq_to_mult be, and why that number?",
            f"Set pad_seq_to_mult = {al.pad_seq_to_mult}: {al.explanation}.",
            [f"States pad_seq_to_mult = {al.pad_seq_to_mult}",
             "Derives it from the CP and TP/SP multiples rather than a fixed default"],
            checks,
            script="seqpack align",
            paths=["offline"] + (["context_parallel"] if cp > 1 else []),
            topics=["alignment"],
            truth=al.to_dict(),
        ))


# ------------------------------------------------------------------------------------------------
# Token slots
# ------------------------------------------------------------------------------------------------


def _row_check(c: Any) -> str:
    return f"{REGEX_PREFIX}(?:{tokens_re(c.pack_len)})[^\\n]{{0,80}}?{number(c.global_batch_size, as_regex=True)}"


_INVALID = r"(?:invalid|not valid|not allowed|impossible|smaller than|fewer than|less than|below|too small|" \
           r"not divisible|isn't divisible|cannot|can't|does not work|doesn't work|fails?|✗|❌)"


def _slots_task(ctx: GenContext, task_id: str, bucket: str, token_slots: int, lengths: Sequence[int], dp: int,
                prompt: str) -> None:
    rows = equal_slot_candidates(token_slots, tuple(lengths), dp)
    checks = Checks()
    lines = []
    for c in rows:
        if c.global_batch_size:
            checks.need(_row_check(c))
        if c.valid:
            lines.append(f"- {c.pack_len} tokens x GBS {c.global_batch_size} = {c.token_slots} slots: valid")
        else:
            checks.need(f"{REGEX_PREFIX}(?:{tokens_re(c.pack_len)})[^\\n]{{0,120}}?{_INVALID}")
            lines.append(f"- {c.pack_len} tokens x GBS {c.global_batch_size}: not valid, {c.reason}")
    ctx.add(make_task(
        task_id, bucket, prompt,
        f"Equal token slots ({token_slots} per step, MBS 1, DP={dp}):\n" + "\n".join(lines),
        [f"Gives the global batch size for each pack length at {token_slots} slots per step"]
        + [f"Says {c.pack_len}-token packs are invalid at DP={dp} ({c.reason})" for c in rows if not c.valid],
        checks,
        script="seqpack align",
        paths=["offline"],
        topics=["token_slots"],
        truth={"candidates": [c.to_dict() for c in rows]},
    ))


def _token_slot_tasks(ctx: GenContext) -> None:
    _slots_task(
        ctx, "explicit-slots-65536-dp8", "explicit", 65536, (2048, 4096, 8192), 8,
        "With the seqpack sequence packing skill, list equal token-slot candidates for 65,536 token slots per "
        "optimizer step at pack lengths 2048, 4096 and 8192 (offline packing, MBS 1) on a data-parallel size "
        "of 8. Which global batch size goes with each length, and are they all valid?",
    )
    _slots_task(
        ctx, "explicit-slots-65536-dp16", "explicit", 65536, (2048, 4096, 8192), 16,
        "Using seqpack (the Megatron sequence packing skill): we keep 65,536 token slots per step and compare "
        "2K, 4K and 8K offline packs on DP=16. Give the matching global batch sizes and say which combinations "
        "cannot run.",
    )
    _slots_task(
        ctx, "implicit-slots-98304-dp4", "implicit", 98304, (4096, 8192, 16384), 4,
        "I want a fair comparison of 4096-, 8192- and 16384-token rows of concatenated SFT samples in "
        "Megatron-Bridge: every optimizer step should see 98,304 token positions, one row per micro-batch, "
        "4 data-parallel replicas. What global batch size does each row length need, and does each one work "
        "with DP=4?",
    )
    slots = token_slots_per_step(4096, 24)
    checks = Checks().need(number(slots))
    ctx.add(make_task(
        "implicit-slots-per-step-4k-gbs24", "implicit",
        "Our fine-tuning job feeds one pre-concatenated 4096-token row per micro-batch and uses a global batch "
        "size of 24. How many token positions does one optimizer step process? I want to keep that number fixed "
        "if I switch to 8192-token rows, so what global batch size would that need?",
        f"One step has 4096 x 24 = {slots} token slots. Keeping {slots} slots with 8192-token rows needs "
        f"global_batch_size = {slots // 8192}.",
        [f"Computes {slots} token slots per step", f"Gives global_batch_size {slots // 8192} for 8192-token rows"],
        checks.need(states("global_batch_size", slots // 8192)),
        script="seqpack align",
        paths=["offline"],
        topics=["token_slots"],
        truth={"token_slots": slots, "gbs_8192": slots // 8192},
    ))


# ------------------------------------------------------------------------------------------------
# Rules: explicit explanations, explicit validate runs, implicit scenarios
# ------------------------------------------------------------------------------------------------

#: One rule per family for "explain rule X" tasks (rules whose fix does not depend on the config).
EXPLAIN_RULES: tuple[str, ...] = (
    "SEQ-LENGTH-MATCH",
    "CP-FT-AVG-COLLECTIVE",
    "PACK-OFFLINE-MBS1",
    "PACK-OFFLINE-PAD-CU-FIXED-WIDTH",
    "PACK-EXCLUSIVE-OFFLINE-IN-BATCH",
    "PACK-IN-BATCH-DATALOADER",
    "PACK-ENERGON-NO-PP",
    "PACK-GLOBAL-NO-CUDA-GRAPHS",
    "PACK-MTP-DOCUMENTED",
    "DATASET-KWARGS-MAX-NUM-SAMPLES",
)

_FAMILY_PATHS: dict[str, list[str]] = {
    "topology": ["offline"],
    "context_parallel": ["context_parallel"],
    "offline": ["offline"],
    "cuda_graphs": ["offline"],
    "exclusive": ["offline", "in_batch"],
    "in_batch": ["in_batch"],
    "energon": ["energon"],
    "global_batch": ["global_batch"],
    "model": ["offline"],
    "dataset": ["offline"],
}


def _paths_for(report: Any, extra: Sequence[str] = ()) -> list[str]:
    path = report.resolved["packing_path"]
    paths = [path] if isinstance(path, str) and path != "none" else list(path) if isinstance(path, list) else []
    if report.resolved["alignment"]["cp"] > 1:
        paths.append("context_parallel")
    return list(dict.fromkeys(list(paths) + list(extra)))


def _apply(checks: Checks, facts: Sequence[Fact]) -> list[str]:
    for fact in facts:
        checks.need(fact.check)
        checks.ban(*fact.forbidden)
    return [f.sentence for f in facts]


def _explain_tasks(ctx: GenContext) -> None:
    for rule_id in EXPLAIN_RULES:
        rule = get_rule(rule_id)
        if rule is None:
            raise UsageError(f"EXPLAIN_RULES names unknown rule {rule_id}")
        report = validate_config(None, list(rule.trigger.items()))
        finding = next(f for f in report.violations + report.warnings if f.rule_id == rule_id)
        facts = facts_for_rule(report, rule_id)
        checks = Checks().need(word(rule_id))
        sentences = _apply(checks, facts)
        ctx.add(make_task(
            f"explicit-rule-{rule_id.lower()}",
            "explicit",
            f"The seqpack packing rules flag {rule_id} on my Megatron-Bridge config. Using the sequence packing "
            "skill, explain what the rule checks and how to fix a config that breaks it.",
            f"{rule_id} ({rule.severity}): {rule.title}. Example: {finding.message}. " + " ".join(sentences)
            + f" Fix: {rule.fix}",
            [f"Names {rule_id} and says what it checks ({rule.title})", f"Gives the fix: {rule.fix}"],
            checks,
            script="seqpack rules",
            paths=_FAMILY_PATHS[rule.family],
            topics=["rules"],
            rule_ids=[rule_id],
            truth={"rule": rule.describe()},
        ))


VALIDATE_RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("global-batch-loader", (
        "dataset.enable_global_batch_packing=true",
        "model.calculate_per_token_loss=true",
        "dataset.dataloader_type=batch",
    )),
    ("energon-mtp-graphs", (
        "dataset.kind=energon",
        "dataset.packing_buffer_size=16",
        "model.calculate_per_token_loss=true",
        "model.mtp_num_layers=1",
        "model.vision_cuda_graph_impl=transformer_engine",
    )),
    ("offline-te-graphs", (
        "dataset.enable_offline_packing=true",
        "dataset.offline_packing_specs.packed_sequence_size=4096",
        "model.seq_length=4096",
        "model.cuda_graph_impl=transformer_engine",
    )),
)


def _validate_tasks(ctx: GenContext) -> None:
    for slug, overrides in VALIDATE_RUNS:
        report = validate_config(None, list(overrides))
        checks = Checks()
        for rid in report.rule_ids:
            checks.need(word(rid))
        sentences = _apply(checks, facts_for(report))
        sets = " ".join(f"--set {o}" for o in overrides)
        ctx.add(make_task(
            f"explicit-validate-{slug}",
            "explicit",
            "Run the seqpack validator from the sequence packing skill on the default config with these "
            f"overrides and tell me every rule that fires and how to fix each: {', '.join(overrides)}",
            f"seqpack validate {sets} reports: " + "; ".join(f.one_line() for f in report.violations + report.warnings)
            + " " + " ".join(sentences),
            [f"Reports {rid}" for rid in report.rule_ids] + ["Gives the fix for each error"],
            checks,
            script="seqpack validate",
            paths=_paths_for(report),
            topics=["rules"],
            rule_ids=report.rule_ids,
            truth={"overrides": list(overrides), "violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings], "resolved": report.resolved},
        ))


#: Implicit scenarios: (slug, story, dotted config, rules whose facts are graded).
SCENARIOS: tuple[tuple[str, str, dict[str, Any], tuple[str, ...]], ...] = (
    ("world-size", "We have 6 GPUs and want tensor parallel 4 for an SFT run. Is this layout going to start?",
     {"model.tensor_model_parallel_size": 4, "dist.world_size": 6}, ("TOPO-WORLD-DIVISIBLE",)),
    ("gbs-dp", "Eight GPUs, pure data parallel, micro batch 1 and a global batch of 12 for SFT. Any problem?",
     {"train.micro_batch_size": 1, "train.global_batch_size": 12, "dist.world_size": 8}, ("BATCH-GBS-DIVISIBLE",)),
    ("long-context-loss", "We are moving a 16K-context SFT job to context parallel 2 on 8 GPUs. The config below "
     "is our old one with CP added; will the loss be computed correctly?",
     {"model.context_parallel_size": 2, "model.seq_length": 16384, "dataset.seq_length": 16384,
      "train.global_batch_size": 16, "dist.world_size": 8},
     ("CP-FT-PER-TOKEN-LOSS",)),
    ("cp3-seq-length", "Context parallel 3 on 6 GPUs for 32000-token SFT samples. Is the sequence length OK?",
     {"model.context_parallel_size": 3, "model.calculate_per_token_loss": True, "model.seq_length": 32000,
      "ddp.average_in_collective": False, "dist.world_size": 6, "train.global_batch_size": 4},
     ("CP-SEQ-DIVISIBLE",)),
    ("offline-mbs4", "We pre-concatenated our SFT data into 2048-token rows with Megatron-Bridge's offline "
     "tooling and now want 4 rows per micro-batch to keep the GPUs busy. What will Bridge say?",
     {"dataset.enable_offline_packing": True, "dataset.offline_packing_specs.packed_sequence_size": 2048,
      "model.seq_length": 2048, "train.micro_batch_size": 4, "train.global_batch_size": 32, "dist.world_size": 8},
     ("PACK-OFFLINE-MBS1",)),
    ("te-graphs-pad-cu", "We turned on Transformer Engine CUDA graphs (attention captured) for a job that trains "
     "on pre-concatenated fixed-width SFT rows. What else must be set?",
     {"dataset.enable_offline_packing": True, "dataset.offline_packing_specs.packed_sequence_size": 2048,
      "model.seq_length": 2048, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"],
      "dataset.dataset_kwargs.pad_to_max_length": True},
     ("PACK-CUDA-GRAPH-PAD-CU",)),
    ("full-iteration-graph", "Capturing the whole training iteration as one local CUDA graph: anything in the "
     "config that blocks it?",
     {"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["full_iteration"]}, ("CUDA-GRAPH-NAN-CHECK",)),
    ("both-packings", "Someone enabled both the pre-built dataset of concatenated rows and runtime concatenation of "
     "rows in the same fine-tuning config. Which one wins?",
     {"dataset.enable_offline_packing": True, "dataset.offline_packing_specs.packed_sequence_size": 2048,
      "model.seq_length": 2048, "dataset.enable_in_batch_packing": True},
     ("PACK-EXCLUSIVE-OFFLINE-IN-BATCH",)),
    ("in-batch-mbs1", "Our GPT-SFT run concatenates the rows of each micro-batch into one THD row at collate time. "
     "We left micro_batch_size at 1. Does that make sense?",
     {"dataset.enable_in_batch_packing": True, "dataset.dataloader_type": "single", "train.micro_batch_size": 1},
     ("PACK-IN-BATCH-MBS",)),
    ("pretrain-in-batch", "Can I switch on collate-time row concatenation for my pretraining dataset to save "
     "padding?",
     {"dataset.kind": "pretrain", "dataset.enable_in_batch_packing": True, "dataset.dataloader_type": "single",
      "train.micro_batch_size": 4},
     ("PACK-IN-BATCH-DATASET-KIND",)),
    ("energon-mbs2", "Qwen-VL fine-tuning on Energon WebDataset shards with a 16-sample buffer per worker that merges "
     "samples into one sequence; we would like two merged sequences per micro-batch. Will it run?",
     {"model.family": "qwen_vl", "dataset.kind": "energon", "dataset.packing_buffer_size": 16,
      "model.calculate_per_token_loss": True, "train.micro_batch_size": 2, "dataset.micro_batch_size": 2},
     ("PACK-ENERGON-MBS1",)),
    ("energon-encoder", "We want Energon's per-worker buffer that merges samples into one sequence, for a Nemotron "
     "Omni model using its own task encoder. Supported?",
     {"dataset.kind": "energon", "dataset.packing_buffer_size": 16, "model.calculate_per_token_loss": True,
      "dataset.task_encoder": "nemotron_omni"},
     ("PACK-ENERGON-TASK-ENCODER",)),
    ("global-no-capacity", "We want samples regrouped into long sequences across the whole global batch every "
     "step (balanced over DP ranks) for 8K SFT. What is missing from this config?",
     {"dataset.enable_global_batch_packing": True, "dataset.dataloader_type": "single",
      "model.calculate_per_token_loss": True, "model.seq_length": 8192},
     ("PACK-GLOBAL-MAX-SEQLEN-REQUIRED",)),
    ("global-capacity-cp2", "Samples are regrouped across the global batch every step, with context parallel 2, "
     "16K samples and 4096 tokens per DP*CP rank. Will every sample fit?",
     {"dataset.enable_global_batch_packing": True, "dataset.dataloader_type": "single",
      "model.calculate_per_token_loss": True, "model.context_parallel_size": 2, "model.seq_length": 16384,
      "model.max_seqlen_per_dp_cp_rank": 4096, "dist.world_size": 2},
     ("PACK-GLOBAL-CAPACITY",)),
    ("glm45-offline", "Fine-tuning GLM-4.5 on pre-built rows of concatenated samples to cut padding. Any known issue?",
     {"model.family": "glm45", "dataset.enable_offline_packing": True,
      "dataset.offline_packing_specs.packed_sequence_size": 4096, "model.seq_length": 4096},
     ("MODEL-FAMILY-OPT-OUT",)),
    ("llava-pp2", "LLaVA SFT with concatenated rows and pipeline parallel 2 on 2 GPUs. OK?",
     {"model.family": "llava", "dataset.enable_offline_packing": True,
      "dataset.offline_packing_specs.packed_sequence_size": 2048, "model.seq_length": 2048,
      "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
     ("PACK-LLAVA-PP-CP",)),
    ("num-epochs", "We set train.num_epochs=2 on a GPT-SFT run that uses the single dataloader so each "
     "micro-batch is concatenated at collate time. Problem?",
     {"train.num_epochs": 2, "dataset.dataloader_type": "single", "dataset.enable_in_batch_packing": True,
      "train.micro_batch_size": 4},
     ("DATALOADER-NUM-EPOCHS",)),
)


def _scenario_tasks(ctx: GenContext) -> None:
    for slug, story, overrides, graded in SCENARIOS:
        text = config_yaml(overrides)
        report = validate_config(text)
        fired = report.rule_ids
        missing = [r for r in graded if r not in fired]
        if missing:
            raise UsageError(f"scenario {slug}: expected {missing} to fire, got {fired}")
        checks = Checks()
        facts: list[Fact] = []
        for rid in graded:
            facts.extend(facts_for_rule(report, rid))
        sentences = _apply(checks, facts)
        ctx.add(make_task(
            f"implicit-{slug}",
            "implicit",
            f"{story}\n\n```yaml\n{text}```",
            ("This config is rejected: " if report.violations else "This config passes with a warning: ")
            + " ".join(sentence(f.message) for f in report.violations + report.warnings if f.rule_id in graded)
            + " " + " ".join(sentences),
            [f"Identifies the problem checked by {rid}: {RULES_BY_ID[rid].title}" for rid in graded]
            + ["Gives the concrete fix"],
            checks,
            script="seqpack validate",
            paths=_paths_for(report),
            topics=["rules"],
            rule_ids=fired,
            truth={"violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings],
                   "messages": [f.one_line() for f in report.violations + report.warnings],
                   "resolved": report.resolved},
        ))


def _family_listing_task(ctx: GenContext) -> None:
    family = "energon"
    ids = [r.id for r in RULES if r.family == family]
    checks = Checks().need(number(len(ids)), word("PACK-ENERGON-MBS1"), word("PACK-ENERGON-NO-PP"),
                           word("PACK-ENERGON-TASK-ENCODER"))
    ctx.add(make_task(
        "explicit-rules-energon-family",
        "explicit",
        "Use the sequence packing skill's rule registry: how many rules cover Energon online packing, and which "
        "ones would stop a run that uses micro_batch_size 2, pipeline parallelism, or a task encoder other than "
        "Qwen-VL?",
        f"The {FAMILIES[family]} family has {len(ids)} rules ({', '.join(ids)}). MBS 2 breaks PACK-ENERGON-MBS1, "
        "pipeline parallelism breaks PACK-ENERGON-NO-PP, another task encoder breaks PACK-ENERGON-TASK-ENCODER.",
        [f"Says there are {len(ids)} Energon rules", "Names PACK-ENERGON-MBS1, PACK-ENERGON-NO-PP and "
                                                     "PACK-ENERGON-TASK-ENCODER"],
        checks,
        script="seqpack rules",
        paths=["energon"],
        topics=["rules"],
        rule_ids=["PACK-ENERGON-MBS1", "PACK-ENERGON-NO-PP", "PACK-ENERGON-TASK-ENCODER"],
        truth={"family": family, "rule_ids": ids},
    ))


# ------------------------------------------------------------------------------------------------
# Model support and verification
# ------------------------------------------------------------------------------------------------

_STATUS_CHECK = {
    "opt_out": "re:not supported|unsupported|opts? out|disables?|turns? (?:it )?off|does not support|isn't supported",
    "supported": r"re:(?<!not )(?<!un)\bsupported\b",
    "caveat": "re:caveat|verify|smoke",
}
_STATUS_BAN = {
    "opt_out": r"re:\b(?:is|are) (?:fully )?supported\b",
    "supported": r"re:\b(?:not supported|unsupported)\b",
}
_PATH_WORDS = {
    "offline": "offline packed SFT (pre-built packed Parquet rows)",
    "in_batch": "runtime in-batch packing",
    "energon": "Energon online packing",
    "global_batch": "global-batch packing",
}

MODEL_SUPPORT: tuple[tuple[str, str, str, str], ...] = (
    ("explicit", "qwen3_next", "offline",
     "Using the Megatron sequence packing skill, check model support: can I use offline packed SFT for Qwen3-Next?"),
    ("explicit", "qwen_vl", "energon",
     "Ask the seqpack model-support table: does Qwen2.5-VL support Energon online packing, and under which limits?"),
    ("explicit", "gemma3_vl", "in_batch",
     "With the sequence packing skill, tell me whether Gemma3-VL fine-tuning can use runtime in-batch packing."),
    ("implicit", "gemma3_vl", "in_batch",
     "For Gemma3-VL SFT, could I concatenate the samples of each micro-batch into one row to avoid padding?"),
    ("implicit", "qwen3_vl", "energon",
     "We fine-tune Qwen3-VL from Energon WebDataset shards. Can the loader combine several samples into each "
     "training sequence on the fly?"),
)


def _model_support_tasks(ctx: GenContext) -> None:
    for bucket, family, path, prompt in MODEL_SUPPORT:
        (ms,) = check_model_support(family, path)
        entry = find_family(family)
        name = entry.name if entry else family
        checks = Checks().need(_STATUS_CHECK[ms.status])
        if ms.status in _STATUS_BAN:
            checks.ban(_STATUS_BAN[ms.status])
        verdict = {"opt_out": "is not supported (the recipes opt out)", "supported": "is supported",
                   "caveat": "has a documented caveat"}[ms.status]
        ctx.add(make_task(
            f"{bucket}-model-{family.replace('_', '-')}-{path.replace('_', '-')}",
            bucket,
            prompt,
            f"For {name}, {_PATH_WORDS[path]} {verdict}: {ms.note} (evidence: {ms.evidence}).",
            [f"Says {_PATH_WORDS[path]} {verdict} for {name}", f"Mentions why: {ms.note}"],
            checks,
            script="seqpack validate",
            paths=[path],
            topics=["model_support"],
            rule_ids=["MODEL-FAMILY-OPT-OUT"] if ms.status == "opt_out" else [],
            truth=ms.to_dict(),
        ))


def _smoke_task(ctx: GenContext) -> None:
    from reference_impl.smoke import CHECK_NAMES

    checks = Checks().need(
        any_of("seqpack smoke", "run_packing_smoke_test"),
        "re:unpacked",
        "re:leak|cross[- ]sequence|across sequences|attend",
    )
    ctx.add(make_task(
        "explicit-smoke-verify",
        "explicit",
        "Before we spend GPU hours: how do I use the sequence packing skill to prove on CPU that packed training "
        "gives the same loss and gradients as unpacked training, and that sequences in a pack cannot attend to "
        "each other?",
        "Run seqpack smoke (the run_packing_smoke_test tool). It builds real packed batches, runs a tiny model "
        "forward and backward, and checks " + ", ".join(CHECK_NAMES) + ": packed loss and gradients equal the "
        "unpacked per-sequence ones, no cross-sequence leakage, and CP=2 reproduces CP=1.",
        ["Recommends seqpack smoke / run_packing_smoke_test",
         "Mentions the packed-vs-unpacked equivalence and the cross-sequence leakage check"],
        checks,
        script="seqpack smoke",
        paths=["offline", "in_batch", "context_parallel"],
        topics=["verification"],
        truth={"checks": list(CHECK_NAMES)},
    ))


def build(ctx: GenContext) -> None:
    """Add the knowledge tasks to ``ctx`` (order is part of the dataset)."""
    _alignment_tasks(ctx)
    _token_slot_tasks(ctx)
    _explain_tasks(ctx)
    _validate_tasks(ctx)
    _family_listing_task(ctx)
    _scenario_tasks(ctx)
    _model_support_tasks(ctx)
    _smoke_task(ctx)


__all__ = ["build"]
