"""Tasks answered from knowledge plus the light tools: alignment, token slots, rules, model support.

Explicit tasks name the skill or ``seqpack``; implicit ones describe the same kind of problem in a
user's words. Every value in the answer fields comes from ``derive_alignment``,
``equal_slot_candidates``, ``token_slots_per_step``, ``validate_config``, ``get_rule`` or
``check_model_support``.
"""

from __future__ import annotations

from typing import Any, Sequence

from seqpack.core.alignment import derive_alignment, equal_slot_candidates, token_slots_per_step
from seqpack.config import get_rule
from seqpack.config.model_support import check_model_support, find_family
from seqpack.config.rules import FAMILIES, RULES, RULES_BY_ID
from seqpack.core.errors import UsageError
from seqpack_evals import claims
from seqpack_evals.builder import MAIN_NOTE, GenContext, make_task, override_args, paths_of
from seqpack_evals.facts import facts_for, facts_for_rule, merge
from seqpack_evals.fields import AnswerField, choice_field, int_field, literal, set_field, yes_no_field
from seqpack_evals.render import config_yaml, topology_words
from seqpack_evals.vocab import KEY_ALIASES, rule_ids_field, supported_field

PAD = "dataset.offline_packing_specs.pad_seq_to_mult"
PAD_ALIASES = KEY_ALIASES[PAD]


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


def alignment_fields(al: Any, *, parts: bool) -> list[AnswerField]:
    """``pad_seq_to_mult`` (and, with ``parts``, the CP and SP multiples it is the lcm of)."""
    out = [int_field("pad_seq_to_mult", al.pad_seq_to_mult, *PAD_ALIASES, says="pad_seq_to_mult")]
    if parts:
        out.append(int_field("cp_multiple", al.cp_multiple, r"2\s?[*x×]\s?CP", r"\bCP multiple",
                             r"context[- ]parallel multiple", says="the CP multiple (2*CP when CP>1, else 1)"))
        out.append(int_field("sp_multiple", al.sp_multiple, r"CP\s?[*x×]\s?TP", r"TP\s?[*x×]\s?CP", r"\bSP multiple",
                             r"sequence[- ]parallel multiple", says="the SP multiple (CP*TP when SP and TP>1, else 1)"))
    return out


def alignment_claims(al: Any, tp: int, cp: int) -> list:
    """Wrong values of pad_seq_to_mult people give for this topology, as forbidden advice."""
    wrong = sorted({al.cp_multiple, al.sp_multiple, tp, cp, 2 * tp * cp, 1} - {al.pad_seq_to_mult})
    return [claims.pad_mult(w) for w in wrong]


def _align_command(tp: int, cp: int, sp: bool, eval_cp: int | None) -> list[str]:
    return ["align", "--tp", str(tp), "--cp", str(cp), *(["--sp"] if sp else []),
            *(["--eval-cp", str(eval_cp)] if eval_cp else [])]


def _slug(tp: int, cp: int, sp: bool, eval_cp: int | None) -> str:
    return f"tp{tp}-cp{cp}{'-sp' if sp else ''}{f'-evalcp{eval_cp}' if eval_cp else ''}"


def _alignment_tasks(ctx: GenContext) -> None:
    for tp, cp, sp, eval_cp in EXPLICIT_TOPOLOGIES:
        al = derive_alignment(tp, cp, sp, eval_cp)
        topo = topology_words(tp, cp, sp, eval_cp)
        paths = ["offline"] + (["context_parallel"] if cp > 1 or eval_cp else [])
        ctx.add(make_task(
            f"explicit-align-{_slug(tp, cp, sp, eval_cp)}",
            "explicit",
            f"Use the Megatron sequence packing skill (seqpack) to derive pad_seq_to_mult for offline packed SFT "
            f"with {topo}. Give the value and the two multiples it is built from.",
            f"pad_seq_to_mult = {al.pad_seq_to_mult}. {al.explanation}. Pin it in "
            f"dataset.offline_packing_specs.pad_seq_to_mult and rebuild the packs if the topology changes.",
            alignment_fields(al, parts=not eval_cp),
            alignment_claims(al, tp, cp) + claims.path_claims(paths),
            assertions=["Explains it as the lcm of 2*CP (when CP>1) and CP*TP (when SP is on with TP>1)"
                        + (", over the training and evaluation CP sizes" if eval_cp else ""),
                        "Runs seqpack align (or the derive_alignment tool) instead of guessing"],
            script="seqpack align",
            command=_align_command(tp, cp, sp, eval_cp),
            paths=paths,
            topics=["alignment"],
            truth=al.to_dict(),
        ))
    for tp, cp, sp, eval_cp, seq in IMPLICIT_TOPOLOGIES:
        al = derive_alignment(tp, cp, sp, eval_cp)
        paths = ["offline"] + (["context_parallel"] if cp > 1 else [])
        ctx.add(make_task(
            f"implicit-align-{_slug(tp, cp, sp, eval_cp)}",
            "implicit",
            f"We fine-tune with Megatron-Bridge and concatenate several SFT samples into each {seq}-token row "
            f"ahead of time. The job runs with tensor parallel {tp}, context parallel {cp} and sequence "
            f"parallelism {'enabled' if sp else 'disabled'}. Every sample is padded before it goes into a row: "
            f"what should pad_seq_to_mult be, and why that number?",
            f"Set pad_seq_to_mult = {al.pad_seq_to_mult}: {al.explanation}.",
            alignment_fields(al, parts=False),
            alignment_claims(al, tp, cp) + claims.path_claims(paths),
            assertions=["Derives it from the CP and TP/SP multiples rather than a fixed default"],
            script="seqpack align",
            command=_align_command(tp, cp, sp, eval_cp),
            paths=paths,
            topics=["alignment"],
            truth=al.to_dict(),
        ))


# ------------------------------------------------------------------------------------------------
# Token slots
# ------------------------------------------------------------------------------------------------


def _len_re(n: int) -> str:
    alts = [f"{n}", f"{n:,}"] + ([f"{n // 1024}\\s?[kK]"] if n % 1024 == 0 else [])
    return "(?<![\\d.,])(?:" + "|".join(alts) + ")(?![\\d])"


def slot_fields(rows: Sequence[Any], dp: int) -> list[AnswerField]:
    """Per candidate pack length: the global batch size at equal token slots, and whether it is valid."""
    out: list[AnswerField] = []
    for c in rows:
        n = _len_re(c.pack_size)
        out.append(int_field(
            f"gbs_{c.pack_size}", c.global_batch_size,
            rf"{n}(?:[- ]?tokens?)?[^.\n\d]{{0,30}}?(?:\bGBS|global[_ ]batch(?:[_ ]size)?)",
            rf"^[ \t|]*{n}[ \t|]+(?=\d)", rf"{n}(?:[- ]?tokens?)?(?: packs?| rows?)?[ \t]+(?:needs?|gets?|takes|requires)",
            says=f"global batch size for {c.pack_size}-token packs"))
        out.append(yes_no_field(
            f"valid_{c.pack_size}", c.valid,
            [rf"{n}[^\n.;,]{{0,60}}?(?<!not )(?<!in)\b(?:valid|works?|ok|fine)\b", rf"^[ \t|]*{n}[ \t|]+\d+[ \t|]+\d+[ \t|]+yes\b"],
            [rf"{n}[^\n.;,]{{0,60}}?(?:not valid|invalid|not allowed|impossible|cannot|can't|does not work|"
             rf"doesn't work|too small|smaller than|is out\b|ruled out)", rf"^[ \t|]*{n}[ \t|]+\d+[ \t|]+\d+[ \t|]+no\b"],
            anywhere=True, says=f"{c.pack_size}-token packs valid at DP={dp}"))
    return out


def _slots_task(ctx: GenContext, task_id: str, bucket: str, token_slots: int, lengths: Sequence[int], dp: int,
                prompt: str) -> None:
    rows = equal_slot_candidates(token_slots, tuple(lengths), dp)
    lines = []
    for c in rows:
        if c.valid:
            lines.append(f"- {c.pack_size} tokens x GBS {c.global_batch_size} = {c.token_slots} slots: valid")
        else:
            lines.append(f"- {c.pack_size} tokens x GBS {c.global_batch_size}: not valid, {c.reason}")
    ctx.add(make_task(
        task_id, bucket, prompt,
        f"Equal token slots ({token_slots} per step, MBS 1, DP={dp}):\n" + "\n".join(lines),
        slot_fields(rows, dp),
        claims.path_claims(["offline"]),
        script="seqpack align",
        command=["align", "--token-slots", str(token_slots), "--pack-sizes", ",".join(map(str, lengths)),
                 "--dp", str(dp)],
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
    _slots_task(
        ctx, "explicit-slots-131072-dp32", "explicit", 131072, (4096, 8192, 16384), 32,
        "Use seqpack's equal token-slot check: 131,072 token slots per step, offline packs of 4096, 8192 and "
        "16384 tokens (MBS 1), data-parallel size 32. Which global batch size does each length need, and which "
        "of them can run on DP=32?",
    )
    slots = token_slots_per_step(4096, 24)
    ctx.add(make_task(
        "implicit-slots-per-step-4k-gbs24", "implicit",
        "Our fine-tuning job feeds one pre-concatenated 4096-token row per micro-batch and uses a global batch "
        "size of 24. How many token positions does one optimizer step process? I want to keep that number fixed "
        "if I switch to 8192-token rows, so what global batch size would that need?",
        f"One step has 4096 x 24 = {slots} token slots. Keeping {slots} slots with 8192-token rows needs "
        f"global_batch_size = {slots // 8192}.",
        [int_field("token_slots_per_step", slots, r"token (?:slots|positions)(?: per (?:optimizer )?step)?",
                   r"one (?:optimizer )?step (?:has|processes|sees)", says="token slots per step"),
         int_field("global_batch_size_8192", slots // 8192, r"\bGBS\b", r"global[_ ]batch(?:[_ ]size)?",
                   says="global batch size with 8192-token rows")],
        claims.path_claims(["offline"]),
        script="seqpack align",
        command=["align", "--token-slots", str(slots), "--pack-sizes", "4096,8192"],
        paths=["offline"],
        topics=["token_slots"],
        truth={"token_slots": slots, "gbs_8192": slots // 8192},
    ))


# ------------------------------------------------------------------------------------------------
# Rules: explicit explanations, explicit validate runs, implicit scenarios
# ------------------------------------------------------------------------------------------------

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


#: Rules explained by "explain rule X" tasks: at least one per family, every rule whose fix is a
#: value of its own (a boolean, an enum, a derived number) rather than a choice among many.
EXPLAIN_RULES: tuple[str, ...] = (
    "SEQ-LENGTH-MATCH",
    "CP-FT-AVG-COLLECTIVE",
    "CP-SEQ-DIVISIBLE",
    "ALIGN-SEQ-LENGTH",
    "CP-EVAL-DECENTRALIZED",
    "PACK-OFFLINE-MBS1",
    "PACK-OFFLINE-PAD-MULT-NULL",
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY",
    "PACK-OFFLINE-DATASET-KIND",
    "PACK-OFFLINE-WIDTH-ROUNDING",
    "PACK-OFFLINE-PAD-CU-FIXED-WIDTH",
    "PACK-CUDA-GRAPH-FIXED-WIDTH",
    "CUDA-GRAPH-NAN-CHECK",
    "PACK-EXCLUSIVE-OFFLINE-IN-BATCH",
    "PACK-IN-BATCH-DATALOADER",
    "PACK-IN-BATCH-DEFERRED",
    "PACK-ENERGON-NO-PP",
    "PACK-ENERGON-DATALOADER",
    "PACK-ENERGON-DATASET-MBS",
    "PACK-ENERGON-NO-DISTTRAIN",
    "PACK-ENERGON-EP-OVERLAP",
    "PACK-GLOBAL-NO-CUDA-GRAPHS",
    "PACK-GLOBAL-SCHEDULER",
    "PACK-GLOBAL-NO-FSDP",
    "PACK-GLOBAL-NO-HYBRID",
    "PACK-MTP-DOCUMENTED",
    "DATASET-KWARGS-MAX-NUM-SAMPLES",
    "HF-REWRITE-EXPLICIT-PATHS",
)


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
    "moe": ["offline"],
    "dataset": ["offline"],
}


def severity_field(rule_id: str, severity: str) -> AnswerField:
    """Whether a rule is an error or a warning."""
    return choice_field("severity", severity, {"error": (r"\berror\b",), "warning": (r"\bwarning\b",)},
                        literal(rule_id), r"\bseverity\b", r"\bit(?:'s| is) an?\b", says=f"severity of {rule_id}")


def _explain_tasks(ctx: GenContext) -> None:
    for rule_id in EXPLAIN_RULES:
        rule = get_rule(rule_id)
        if rule is None:
            raise UsageError(f"EXPLAIN_RULES names unknown rule {rule_id}")
        report = ctx.validate(None, list(rule.trigger.items()))
        finding = next(f for f in report.violations + report.warnings if f.rule_id == rule_id)
        fields, forbidden, sentences = merge(facts_for_rule(report, rule_id))
        fields = [severity_field(rule_id, rule.severity)] + [f for f in fields if not f.name.startswith("severity_")]
        paths = _FAMILY_PATHS[rule.family]
        ctx.add(make_task(
            f"explicit-rule-{rule_id.lower()}",
            "explicit",
            f"The seqpack packing rules flag {rule_id} on my Megatron-Bridge config. Using the sequence packing "
            "skill, explain what the rule checks, whether it is an error or a warning, and how to fix a config "
            "that breaks it.",
            f"{rule_id} ({rule.severity}): {rule.title}. Example finding:\n[{rule_id}] {finding.message}\n"
            + " ".join(sentences),
            fields,
            forbidden + claims.path_claims(paths),
            assertions=[f"Says what it checks ({rule.title})", f"Gives the fix: {rule.fix}"],
            script="seqpack rules",
            command=["rules", rule_id],
            paths=paths,
            topics=["rules"],
            rule_ids=[rule_id],
            truth={"rule": rule.describe()},
        ))


def _validate_tasks(ctx: GenContext) -> None:
    for slug, overrides in VALIDATE_RUNS:
        report = ctx.validate(None, list(overrides))
        fields, forbidden, sentences = merge(facts_for(report))
        paths = paths_of(report)
        ctx.add(make_task(
            f"explicit-validate-{slug}",
            "explicit",
            "Run the seqpack validator from the sequence packing skill on the default config with these "
            f"overrides and tell me every rule that fires and how to fix each: {', '.join(overrides)}",
            "seqpack validate reports:\n" + "\n".join(f.one_line() for f in report.violations + report.warnings)
            + "\n" + " ".join(sentences),
            [rule_ids_field(report.rule_ids)] + fields,
            forbidden + claims.path_claims(paths),
            script="seqpack validate",
            command=["validate", "/dev/null", *override_args(list(overrides))],
            paths=paths,
            topics=["rules"],
            rule_ids=report.rule_ids,
            truth={"overrides": list(overrides), "violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings], "resolved": report.resolved},
        ))


def _scenario_tasks(ctx: GenContext) -> None:
    for slug, story, overrides, graded in SCENARIOS:
        text = config_yaml(overrides)
        report = ctx.validate(text)
        fired = report.rule_ids
        missing = [r for r in graded if r not in fired]
        if missing:
            raise UsageError(f"scenario {slug}: expected {missing} to fire, got {fired}")
        facts = [fact for rid in graded for fact in facts_for_rule(report, rid)]
        fields, forbidden, sentences = merge(facts)
        paths = paths_of(report)
        ctx.add(make_task(
            f"implicit-{slug}",
            "implicit",
            f"{story}\n\n```yaml\n{text}```",
            ("This config is rejected:\n" if report.violations else "This config passes with a warning:\n")
            + "".join(f"[{f.rule_id}] {f.message}\n" for f in report.violations + report.warnings
                      if f.rule_id in graded)
            + " ".join(sentences),
            fields,
            forbidden + claims.path_claims(paths),
            assertions=[f"Identifies the problem checked by {rid}: {RULES_BY_ID[rid].title}" for rid in graded],
            script="seqpack validate",
            command=["validate", "/dev/null", *override_args(overrides)],
            paths=paths,
            topics=["rules"],
            rule_ids=fired,
            truth={"violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings],
                   "messages": [f.one_line() for f in report.violations + report.warnings],
                   "resolved": report.resolved, "config": text},
        ))


def _family_listing_task(ctx: GenContext) -> None:
    family = "energon"
    ids = [r.id for r in RULES if r.family == family]
    stoppers = ["PACK-ENERGON-MBS1", "PACK-ENERGON-NO-PP", "PACK-ENERGON-TASK-ENCODER"]
    ctx.add(make_task(
        "explicit-rules-energon-family",
        "explicit",
        "Use the sequence packing skill's rule registry: how many rules cover Energon online packing, and which "
        "ones would stop a run that uses micro_batch_size 2, pipeline parallelism, or a task encoder other than "
        "Qwen-VL?",
        f"The {FAMILIES[family]} family has {len(ids)} rules. MBS 2 breaks PACK-ENERGON-MBS1, pipeline "
        "parallelism breaks PACK-ENERGON-NO-PP, another task encoder breaks PACK-ENERGON-TASK-ENCODER.",
        [int_field("energon_rule_count", len(ids), r"(?:energon|this)\b[^.\n]{0,30}?\bfamily has", r"energon rules",
                   r"rules (?:cover|in) (?:the )?energon", r"\brules\b", says="number of Energon rules"),
         rule_ids_field(stoppers, says="rules that stop those runs")],
        claims.path_claims(["energon"]),
        script="seqpack rules",
        command=["rules", "--family", family],
        paths=["energon"],
        topics=["rules"],
        rule_ids=stoppers,
        truth={"family": family, "rule_ids": ids},
    ))


# ------------------------------------------------------------------------------------------------
# Model support and verification
# ------------------------------------------------------------------------------------------------

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


_PATH_WORDS = {
    "offline": "offline packed SFT (pre-built packed Parquet rows)",
    "in_batch": "runtime in-batch packing",
    "energon": "Energon online packing",
    "global_batch": "global-batch packing",
}


def _model_support_tasks(ctx: GenContext) -> None:
    for bucket, family, path, prompt in MODEL_SUPPORT:
        (ms,) = check_model_support(family, path)
        entry = find_family(family)
        name = entry.name if entry else family
        verdict = {"opt_out": "is not supported (the recipes opt out)", "supported": "is supported",
                   "caveat": "has a documented caveat"}[ms.status]
        main_only = "not in megatron-bridge 0.6.2" in ms.note  # a record that holds for Bridge main only
        if main_only:
            prompt = MAIN_NOTE + prompt
        ctx.add(make_task(
            f"{bucket}-model-{family.replace('_', '-')}-{path.replace('_', '-')}",
            bucket,
            prompt,
            f"For {name}, {_PATH_WORDS[path]} {verdict}: {ms.note} (evidence: {ms.evidence}).",
            [supported_field(ms.status)],
            claims.path_claims([path]),
            assertions=[f"Mentions why: {ms.note}"],
            script="seqpack validate",
            command=["validate", "/dev/null", "--set", f"model.family={family}", *_PATH_SWITCH[path]],
            paths=[path],
            topics=["model_support"],
            rule_ids=["MODEL-FAMILY-OPT-OUT"] if ms.status == "opt_out" else [],
            truth=ms.to_dict(),
            source={"kind": "seqpack", "bridge_version": "main", "rests_on": ms.note} if main_only else None,
        ))


_PATH_SWITCH: dict[str, list[str]] = {
    "offline": ["--set", "dataset.enable_offline_packing=true", "--set",
                "dataset.offline_packing_specs.packed_sequence_size=4096", "--set", "model.seq_length=4096"],
    "in_batch": ["--set", "dataset.enable_in_batch_packing=true", "--set", "dataset.dataloader_type=single",
                 "--set", "train.micro_batch_size=4"],
    "energon": ["--set", "dataset.kind=energon", "--set", "dataset.packing_buffer_size=16", "--set",
                "model.calculate_per_token_loss=true"],
    "global_batch": ["--set", "dataset.enable_global_batch_packing=true", "--set", "dataset.dataloader_type=single",
                     "--set", "model.max_seqlen_per_dp_cp_rank=4096", "--set", "model.calculate_per_token_loss=true"],
}


def _smoke_task(ctx: GenContext) -> None:
    from seqpack.smoke.report import CHECK_NAMES

    command = choice_field("command", "seqpack smoke", {
        "seqpack smoke": (r"seqpack smoke", r"run_packing_smoke_test"),
        "seqpack validate": (r"seqpack validate", r"validate_config"),
        "seqpack inspect": (r"seqpack inspect", r"inspect_packed_dataset"),
    }, r"(?:run|use|call|with)\b", says="the command that proves it")
    distractors = ("gradient_norm_finite", "throughput_ok", "memory_peak_ok", "nan_free_loss", "tokens_per_second")
    checks_field = set_field("checks", CHECK_NAMES, {c: (literal(c),) for c in (*CHECK_NAMES, *distractors)},
                             says="the checks the smoke test reports")
    ctx.add(make_task(
        "explicit-smoke-verify",
        "explicit",
        "Before we spend GPU hours: how do I use the sequence packing skill to prove on CPU that packed training "
        "gives the same loss and gradients as unpacked training, and that sequences in a pack cannot attend to "
        "each other? Name the command and the checks it reports.",
        "Run seqpack smoke (the run_packing_smoke_test tool). It builds real packed batches, runs a tiny model "
        "forward and backward, and reports the checks " + ", ".join(CHECK_NAMES) + ": packed loss and gradients "
        "equal the unpacked per-sequence ones, no cross-sequence leakage, and CP=2 reproduces CP=1.",
        [command, checks_field],
        [claims.skip_verification()],
        assertions=["Mentions the packed-vs-unpacked equivalence and the cross-sequence leakage check"],
        script="seqpack smoke",
        command=["smoke", "--path", "offline"],
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


__all__ = ["alignment_claims", "alignment_fields", "build", "severity_field", "slot_fields"]
