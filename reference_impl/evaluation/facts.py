"""What a correct answer must say about a broken packing rule, derived from the validation report.

For every rule a task can involve, :data:`FACTS` maps the rule id to a function that turns the
:class:`~reference_impl.config.validate.Finding` (offending fields and their values) and the
report's resolved values (DP, alignment, ...) into :class:`Fact` objects: a required check, the
sentence of the reference answer that satisfies it, and the wrong recommendations to forbid.
Values come from the report, never from this file; the rule's own ``fixed`` example is used only
where it is the one correct value (``micro_batch_size=1``, a boolean, an enum).

:func:`facts_for` raises when a task's config fires a rule without an entry here, so adding a
task can never silently skip grading one of its findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from reference_impl.config.rules import RULES_BY_ID
from reference_impl.config.validate import Finding, ValidationReport
from reference_impl.errors import UsageError
from reference_impl.evaluation.checks import REGEX_PREFIX, any_of, multiple_of, number, recommends, states, word


@dataclass(frozen=True)
class Fact:
    """One gradeable statement: a required check, the answer sentence, forbidden claims."""

    check: str
    sentence: str
    forbidden: tuple[str, ...] = field(default=())


FactFn = Callable[[Finding, ValidationReport], list[Fact]]


def _fixed(rule_id: str, key: str) -> Any:
    """The value the rule's own ``fixed`` example sets for ``key`` (used where it is the only fix)."""
    return RULES_BY_ID[rule_id].fixed[key]


def _set(rule_id: str, key: str, wrong: tuple[Any, ...] = ()) -> FactFn:
    """Fact ``KEY = <the rule's fixed value>``; ``wrong`` values become forbidden recommendations."""

    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        value = _fixed(rule_id, key)
        shown = str(value).lower() if isinstance(value, bool) else value
        return [Fact(states(key, value), f"Set {key}={shown}.", tuple(recommends(key, w) for w in wrong))]

    return fn


def _multiple_of(what: str, n: int) -> Fact:
    return Fact(multiple_of(n), f"{what} must be a multiple of {n}.")


def _world(f: Finding, r: ValidationReport) -> list[Fact]:
    mp = r.resolved["model_parallel_size"]
    return [_multiple_of(f"dist.world_size (now {f.fields['dist.world_size']}) is not divisible by TP*PP*CP; it", mp)]


def _gbs(f: Finding, r: ValidationReport) -> list[Fact]:
    unit = f.fields["train.micro_batch_size"] * r.resolved["data_parallel_size"]
    return [_multiple_of("train.global_batch_size (micro_batch_size * DP)", unit)]


def _seq_match(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        f"{REGEX_PREFIX}seq_length[^\\n]{{0,80}}?(?:equal|match|same)",
        "model.seq_length and dataset.seq_length must be equal (the same value).",
    )]


def _cp_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    cp = r.resolved["alignment"]["cp"]
    return [_multiple_of(f"With CP={cp}, seq_length", 2 * cp)]


def _align_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    return [_multiple_of("seq_length", r.resolved["alignment"]["seq_length_multiple"])]


def _pad_topology(f: Finding, r: ValidationReport) -> list[Fact]:
    pad = r.resolved["pad_seq_to_mult"]
    al = r.resolved["alignment"]
    current = f.fields.get("dataset.offline_packing_specs.pad_seq_to_mult")
    wrong = {al["cp_multiple"], al["sp_multiple"], 2 * pad, 1} - {pad, current}
    return [Fact(
        states("dataset.offline_packing_specs.pad_seq_to_mult", pad),
        f"Set dataset.offline_packing_specs.pad_seq_to_mult={pad} ({al['explanation']}) and rebuild the packs.",
        tuple(recommends("pad_seq_to_mult", w) for w in sorted(wrong)),
    )]


def _size_eq_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        f"{REGEX_PREFIX}packed_sequence_size[^\\n]{{0,80}}?(?:equal|match|same)",
        "Keep packed_sequence_size equal to seq_length (the same value on model, dataset and packs).",
    )]


def _offline_mbs1(f: Finding, r: ValidationReport) -> list[Fact]:
    return _set("PACK-OFFLINE-MBS1", "train.micro_batch_size", (2, 4, 8))(f, r)


def _in_batch_mbs(f: Finding, r: ValidationReport) -> list[Fact]:
    check = (
        f"{REGEX_PREFIX}micro_batch_size[^\\n]{{0,40}}?(?:>\\s?1\\b|>=\\s?2\\b|at least (?:2|two)|2 or more|"
        "greater than (?:1|one)|more than (?:1|one)|larger than (?:1|one)|(?<![\\d.])(?:[2-9]|[1-9]\\d)(?!\\d))"
    )
    return [Fact(check, "In-batch packing needs train.micro_batch_size > 1 (for example 4): the rows of one "
                        "micro-batch become one packed row.", (recommends("train.micro_batch_size", 1),))]


def _in_batch_loader(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        any_of(states("dataset.dataloader_type", "single"), states("dataset.dataloader_type", "cyclic")),
        "Set dataset.dataloader_type=single (or cyclic); the batch loader would pack a whole global batch into one "
        "row.",
        (recommends("dataset.dataloader_type", "batch"),),
    )]


def _in_batch_kind(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        any_of(states("dataset.kind", "gpt_sft"), "re:fine-?tuning dataset", "re:SFT dataset"),
        "In-batch packing is for fine-tuning (SFT) datasets such as dataset.kind=gpt_sft; pretraining data is not "
        "packed this way.",
    )]


def _exclusive(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        "re:mutually exclusive|only one (?:packing )?(?:path|of them|method|mode)|one packing path",
        "The packing paths are mutually exclusive: keep only one packing path enabled.",
    )]


def _global_capacity(f: Finding, r: ValidationReport) -> list[Fact]:
    cp = r.resolved["alignment"]["cp"]
    need = math.ceil(r.resolved["seq_length"] / cp)
    return [
        Fact(word("max_seqlen_per_dp_cp_rank"), "The field to set is model.max_seqlen_per_dp_cp_rank."),
        Fact(
            f"{REGEX_PREFIX}(?:ceil|seq_length\\s*/\\s*(?:CP|context_parallel_size)|{number(need, as_regex=True)})",
            f"It must be at least ceil(seq_length / CP) = {need} so one pack holds the longest sample.",
        ),
    ]


def _family_opt_out(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        "re:not supported|unsupported|opts? out|disables?|turns? (?:it )?off|does not support",
        f"The {f.fields['model.family']} recipes opt out of this packing path (it is not supported there); train "
        "unpacked or use a path the family supports.",
    )]


def _family_caveat(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact("re:caveat|verify|smoke", "This family has a documented caveat: verify with seqpack smoke first.")]


def _llava(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        any_of(states("model.pipeline_model_parallel_size", 1), "re:PP\\s?=\\s?1", "re:PP1\\b"),
        "LLaVA packed batches need PP=1 and CP=1: set pipeline_model_parallel_size=1.",
    )]


def _num_epochs(f: Finding, r: ValidationReport) -> list[Fact]:
    remove = "re:(?:remove|unset|drop|delete)[^\\n]{0,30}num_epochs"
    if r.resolved["packing_path"] in ("in_batch", "global_batch"):
        # these paths refuse the batch dataloader, so only dropping num_epochs fixes it
        return [Fact(remove, "train.num_epochs needs dataloader_type=batch, which this packing path refuses: remove "
                             "num_epochs and size the run with train_iters.",
                     (recommends("dataset.dataloader_type", "batch"),))]
    return [Fact(
        any_of(states("dataset.dataloader_type", "batch"), remove),
        "train.num_epochs needs a GPT-SFT dataset with dataloader_type=batch; otherwise remove num_epochs.",
    )]


def _global_max_required(f: Finding, r: ValidationReport) -> list[Fact]:
    return _global_capacity(f, r)


def _warning_word(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(word("warning"), f"{f.rule_id} is a warning, not an error.")]


def _mtp(f: Finding, r: ValidationReport) -> list[Fact]:
    return [
        Fact(states("model.mtp_num_layers", 0), "Set model.mtp_num_layers=0, or verify the packed MTP run with "
                                                "seqpack smoke and a loss sentinel."),
        Fact("re:incompatible|not compatible|not supported|unsupported",
             "The packing docs describe MTP fine-tuning as incompatible with packed sequences."),
    ]


def _energon_encoder(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact("re:qwen[_ -]?vl", "Only the qwen_vl task encoder implements Energon native packing; use it, or "
                                   "collator in-batch packing for other encoders.")]


def _fixed_width_forced(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(word("pad_to_max_length"), "With PP>1 or EP>1 the fixed width (pad_to_max_length) is forced on.")]


def _pp1(rule_id: str) -> FactFn:
    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        return [Fact(
            any_of(states("model.pipeline_model_parallel_size", _fixed(rule_id, "model.pipeline_model_parallel_size")),
                   "re:PP\\s?=\\s?1", "re:PP1\\b", "re:no pipeline parallel"),
            "This path does not support pipeline parallelism: set pipeline_model_parallel_size=1.",
        )]

    return fn


def _eval_cp(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(
        any_of(states("dist.use_decentralized_pg", True), "re:decentrali[sz]ed"),
        "A distinct eval CP only takes effect with dist.use_decentralized_pg=true (decentralized process groups).",
    )]


def _kwargs_max(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(word("max_train_samples"), "Move the cap from dataset_kwargs.max_num_samples to "
                                            "dataset.max_train_samples.")]


def _hf_rewrite(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(any_of(states("dataset.hf_rewrite", False), "re:(?:drop|remove|disable)[^\\n]{0,20}hf_rewrite"),
                 "Drop hf_rewrite (set dataset.hf_rewrite=false) when you give explicit packed data paths.")]


def _pad_cu_metadata(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(word("packed_metadata_path"), "Set offline_packing_specs.packed_metadata_path to the metadata "
                                               "JSON written with the packs.")]


def _gbs_divisible_eval(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact(word("eval_global_batch_size"), "validation.eval_global_batch_size must be a multiple of eval "
                                                 "micro batch size * eval DP.")]


FACTS: dict[str, FactFn] = {
    "TOPO-WORLD-DIVISIBLE": _world,
    "BATCH-GBS-DIVISIBLE": _gbs,
    "BATCH-EVAL-GBS-DIVISIBLE": _gbs_divisible_eval,
    "SEQ-LENGTH-MATCH": _seq_match,
    "CP-SEQ-DIVISIBLE": _cp_seq,
    "CP-FT-PER-TOKEN-LOSS": _set("CP-FT-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "CP-FT-AVG-COLLECTIVE": _set("CP-FT-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "ALIGN-SEQ-LENGTH": _align_seq,
    "CP-EVAL-DECENTRALIZED": _eval_cp,
    "PACK-OFFLINE-SPECS-REQUIRED": lambda f, r: [Fact(word("offline_packing_specs"),
                                                      "Set dataset.offline_packing_specs (packed_sequence_size and "
                                                      "pad_seq_to_mult).")],
    "PACK-OFFLINE-SEQ-LE-PACK": lambda f, r: [Fact(word("max_single_sequence_length"),
                                                   "Set max_single_sequence_length <= packed_sequence_size, or raise "
                                                   "packed_sequence_size to seq_length.")],
    "PACK-OFFLINE-SIZE-EQ-SEQ": _size_eq_seq,
    "PACK-OFFLINE-MBS1": _offline_mbs1,
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY": _pad_topology,
    "PACK-OFFLINE-PAD-MULT-NULL": _set("PACK-OFFLINE-PAD-MULT-NULL", "dataset.offline_packing_specs.pad_seq_to_mult"),
    "PACK-OFFLINE-WIDTH-ROUNDING": _set("PACK-OFFLINE-WIDTH-ROUNDING", "dataset.dataset_kwargs.pad_to_max_length"),
    "PACK-OFFLINE-PAD-CU-FIXED-WIDTH": _set("PACK-OFFLINE-PAD-CU-FIXED-WIDTH",
                                            "dataset.dataset_kwargs.pad_to_max_length", (False,)),
    "PACK-OFFLINE-PAD-CU-METADATA": _pad_cu_metadata,
    "PACK-CUDA-GRAPH-FIXED-WIDTH": _set("PACK-CUDA-GRAPH-FIXED-WIDTH", "dataset.dataset_kwargs.pad_to_max_length",
                                        (False,)),
    "PACK-CUDA-GRAPH-PAD-CU": _set("PACK-CUDA-GRAPH-PAD-CU", "dataset.offline_packing_specs.pad_cu_seqlens", (False,)),
    "CUDA-GRAPH-NAN-CHECK": _set("CUDA-GRAPH-NAN-CHECK", "rerun_state_machine.check_for_nan_in_loss", (True,)),
    "PACK-EXCLUSIVE-OFFLINE-IN-BATCH": _exclusive,
    "PACK-EXCLUSIVE-ENERGON-IN-BATCH": _exclusive,
    "PACK-EXCLUSIVE-GLOBAL-BATCH": _exclusive,
    "PACK-IN-BATCH-MBS": _in_batch_mbs,
    "PACK-IN-BATCH-DATALOADER": _in_batch_loader,
    "PACK-IN-BATCH-DATASET-KIND": _in_batch_kind,
    "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN": lambda f, r: [Fact(
        "re:(?:derived|overwritten|overridden|ignored)",
        "in_batch_packing_pad_to_multiple_of is derived from TP/CP/SP; a value you set is overwritten.")],
    "PACK-ENERGON-MBS1": _set("PACK-ENERGON-MBS1", "train.micro_batch_size", (2, 4)),
    "PACK-ENERGON-DATASET-MBS": _set("PACK-ENERGON-DATASET-MBS", "dataset.micro_batch_size"),
    "PACK-ENERGON-PER-TOKEN-LOSS": _set("PACK-ENERGON-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "PACK-ENERGON-AVG-COLLECTIVE": _set("PACK-ENERGON-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "PACK-ENERGON-NO-MTP": _set("PACK-ENERGON-NO-MTP", "model.mtp_num_layers"),
    "PACK-ENERGON-NO-CUDA-GRAPHS": _set("PACK-ENERGON-NO-CUDA-GRAPHS", "model.vision_cuda_graph_impl"),
    "PACK-ENERGON-NO-PP": _pp1("PACK-ENERGON-NO-PP"),
    "PACK-ENERGON-TASK-ENCODER": _energon_encoder,
    "PACK-ENERGON-DATALOADER": _set("PACK-ENERGON-DATALOADER", "dataset.dataloader_type", ("single", "batch")),
    "PACK-FIXED-WIDTH-FORCED": _fixed_width_forced,
    "PACK-GLOBAL-MBS1": _set("PACK-GLOBAL-MBS1", "train.micro_batch_size", (2, 4)),
    "PACK-GLOBAL-PER-TOKEN-LOSS": _set("PACK-GLOBAL-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "PACK-GLOBAL-AVG-COLLECTIVE": _set("PACK-GLOBAL-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "PACK-GLOBAL-NO-CUDA-GRAPHS": _set("PACK-GLOBAL-NO-CUDA-GRAPHS", "model.cuda_graph_impl"),
    "PACK-GLOBAL-NO-PP": _pp1("PACK-GLOBAL-NO-PP"),
    "PACK-GLOBAL-DATALOADER": _in_batch_loader,
    "PACK-GLOBAL-MAX-SEQLEN-REQUIRED": _global_max_required,
    "PACK-GLOBAL-CAPACITY": _global_capacity,
    "PACK-GLOBAL-SCHEDULER": lambda f, r: [Fact("re:dp_balanced", "Use the dp_balanced scheduler (or seqpack's "
                                                                  "balanced).")],
    "PACK-MTP-DOCUMENTED": _mtp,
    "MODEL-FAMILY-OPT-OUT": _family_opt_out,
    "MODEL-FAMILY-CAVEAT": _family_caveat,
    "PACK-LLAVA-PP-CP": _llava,
    "DATALOADER-NUM-EPOCHS": _num_epochs,
    "DATASET-KWARGS-MAX-NUM-SAMPLES": _kwargs_max,
    "HF-REWRITE-EXPLICIT-PATHS": _hf_rewrite,
}


def _finding_facts(finding: Finding, report: ValidationReport) -> list[Fact]:
    fn = FACTS.get(finding.rule_id)
    if fn is None:
        raise UsageError(f"no grading facts for rule {finding.rule_id}; add an entry to FACTS",
                         rule_id=finding.rule_id)
    out = fn(finding, report)
    if finding.severity == "warning":
        out = out + _warning_word(finding, report)
    return out


def facts_for(report: ValidationReport, *, warnings: bool = False) -> list[Fact]:
    """Facts for every error in ``report`` (and every warning when ``warnings``), in report order."""
    out: list[Fact] = []
    for finding in report.violations + (report.warnings if warnings else []):
        out.extend(_finding_facts(finding, report))
    return out


def facts_for_rule(report: ValidationReport, rule_id: str) -> list[Fact]:
    """Facts for the finding of ``rule_id`` in ``report`` (error or warning); raises if it did not fire."""
    for finding in report.violations + report.warnings:
        if finding.rule_id == rule_id:
            return _finding_facts(finding, report)
    raise UsageError(f"{rule_id} did not fire (fired: {report.rule_ids})", rule_id=rule_id)


__all__ = ["FACTS", "Fact", "facts_for", "facts_for_rule"]
