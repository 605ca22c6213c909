"""What a correct answer must say about a broken packing rule, derived from the validation report.

For every rule a task can involve, :data:`FACTS` maps the rule id to a function that turns the
:class:`~seqpack.config.validate.Finding` (offending fields and their values) and the
report's resolved values (DP, alignment, ...) into :class:`Fact` objects: answer fields (the value
to set, the multiple to respect, ...), the sentence of the reference answer that gives them, and
the dangerous advice to forbid. Values come from the report, never from this file; the rule's own
``fixed`` example is used only where it is the one correct value (``micro_batch_size=1``, a
boolean, an enum).

:func:`facts_for` raises when a task's config fires a rule without an entry here, so adding a
task can never silently skip grading one of its findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from seqpack.config.rules import RULES_BY_ID
from seqpack.config.validate import Finding, ValidationReport
from seqpack.core.errors import UsageError
from seqpack_evals import claims
from seqpack_evals.fields import AnswerField, choice_field, int_field, literal, yes_no_field
from seqpack_evals.tasks import Forbidden
from seqpack_evals.vocab import config_field, multiple_field, supported_field, words

PAD = "dataset.offline_packing_specs.pad_seq_to_mult"


@dataclass(frozen=True)
class Fact:
    """One gradeable statement: answer fields, the answer sentence, forbidden advice."""

    fields: tuple[AnswerField, ...]
    sentence: str
    forbidden: tuple[Forbidden, ...] = field(default=())


FactFn = Callable[[Finding, ValidationReport], list[Fact]]


def _fixed(rule_id: str, key: str) -> Any:
    """The value the rule's own ``fixed`` example sets for ``key`` (used where it is the only fix)."""
    return RULES_BY_ID[rule_id].fixed[key]


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _set(rule_id: str, key: str, wrong: tuple[Any, ...] = ()) -> FactFn:
    """Fact ``KEY = <the rule's fixed value>``; ``wrong`` values become forbidden advice."""

    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        value = _fixed(rule_id, key)
        return [Fact((config_field(key, value),), f"Set {key}={_shown(value)}.",
                     tuple(claims.advise(key, w) for w in wrong))]

    return fn


def _value(key: str, value: Any) -> FactFn:
    """Fact ``KEY = value`` where the value is the one fix the message names (the rule's example fixes it otherwise)."""

    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        return [Fact((config_field(key, value),), f"Set {key}={_shown(value)}.")]

    return fn


def _multiple(name: str, subject: str, what: str, n: int) -> Fact:
    return Fact((multiple_field(name, subject, n, says=f"{what} must be a multiple of"),),
                f"{what} must be a multiple of {n}.")


def _world(f: Finding, r: ValidationReport) -> list[Fact]:
    mp = r.resolved["model_parallel_size"]
    return [_multiple("world_size_multiple", r"world[_ ]size", f"dist.world_size (now {f.fields['dist.world_size']}) "
                      "is not divisible by TP*PP*CP; the world size", mp)]


def _gbs(f: Finding, r: ValidationReport) -> list[Fact]:
    unit = f.fields["train.micro_batch_size"] * r.resolved["data_parallel_size"]
    return [_multiple("global_batch_size_multiple", words("global batch size"),
                      "The global batch size (micro_batch_size * DP)", unit)]


def _gbs_eval(f: Finding, r: ValidationReport) -> list[Fact]:
    unit = r.resolved.get("eval_micro_batch_size", 1) * r.resolved["data_parallel_size"]
    return [_multiple("eval_global_batch_size_multiple", words("eval global batch size"),
                      "validation.eval_global_batch_size (eval micro batch size * DP)", unit)]


def _must_match(name: str, subject: str, sentence: str) -> Fact:
    return Fact((yes_no_field(
        name, True,
        [rf"{subject}[^.\n]{{0,60}}?(?:must|should|have to|has to|need to|needs to)\s+(?:be\s+)?"
         r"(?:equal|the same|identical|match)"],
        [rf"{subject}[^.\n]{{0,60}}?(?:can|may)\s+differ", rf"{subject}[^.\n]{{0,60}}?(?:need|needs) not (?:be equal|match)"],
        anywhere=True, says="the values must match"),), sentence)


def _seq_match(f: Finding, r: ValidationReport) -> list[Fact]:
    return [_must_match("seq_lengths_must_match", r"seq(?:uence)?[_ ]lengths?",
                        "model.seq_length and dataset.seq_length must be equal (the same value).")]


def _cp_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    cp = r.resolved["alignment"]["cp"]
    return [_multiple("seq_length_multiple", r"seq(?:uence)?[_ ]length", f"With CP={cp}, seq_length", 2 * cp)]


def _align_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    return [_multiple("seq_length_multiple", r"seq(?:uence)?[_ ]length", "seq_length",
                      r.resolved["alignment"]["seq_length_multiple"])]


def _pad_topology(f: Finding, r: ValidationReport) -> list[Fact]:
    pad = r.resolved["pad_seq_to_mult"]
    al = r.resolved["alignment"]
    current = f.fields.get(PAD)
    wrong = sorted({al["cp_multiple"], al["sp_multiple"], 2 * pad, 1} - {pad, current})
    return [Fact(
        (config_field(PAD, pad, says="pad_seq_to_mult to set"),),
        f"Set {PAD}={pad} ({al['explanation']}) and rebuild the packs.",
        tuple(claims.pad_mult(w) for w in wrong) + (claims.reuse_packs(),),
    )]


def _size_eq_seq(f: Finding, r: ValidationReport) -> list[Fact]:
    return [_must_match("pack_size_must_match_seq_length", r"packed[_ ]sequence[_ ]size",
                        "Keep packed_sequence_size equal to seq_length (the same value on model, dataset and packs).")]


def _offline_mbs1(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((config_field("train.micro_batch_size", 1),), "Set train.micro_batch_size=1.",
                 (claims.mbs_above_one("offline packing"),))]


def _in_batch_mbs(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((yes_no_field(
        "micro_batch_size_above_one", True,
        [r"(?:micro[_ -]?batch[_ -]?size|\bMBS\b)[^.\n]{0,40}?(?:(?<!-)>\s?1\b|(?<!-)>=\s?2\b|at least (?:2|two)|2 or more|"
         r"greater than (?:1|one)|more than (?:1|one)|larger than (?:1|one)|above (?:1|one))"],
        [r"(?:micro[_ -]?batch[_ -]?size|\bMBS\b)[^.\n]{0,30}?(?:=|:|of|to|at)\s*(?:1|one)\b(?!\s*[.,]?\d)"
         r"(?![^.\n]{0,12}(?:is|are) (?:rejected|refused|wrong|invalid))"],
        anywhere=True, says="micro_batch_size must be above 1"),),
        "In-batch packing needs train.micro_batch_size > 1 (for example 4): the rows of one micro-batch become "
        "one packed row.", (claims.mbs_one_in_batch(),))]


def _in_batch_loader(f: Finding, r: ValidationReport) -> list[Fact]:
    field_ = choice_field("dataset.dataloader_type", "single or cyclic",
                          {"single or cyclic": (literal("single"), literal("cyclic")), "batch": (literal("batch"),),
                           "external": (literal("external"),)},
                          r"data ?loader(?:[_ ]type)?", says="dataloader type to use", hint="<single | cyclic | batch | external>")
    return [Fact((field_,), "Set dataset.dataloader_type=single (or cyclic); the batch loader would pack a whole "
                            "global batch into one row.", (claims.dataloader_batch(),))]


def _in_batch_kind(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((config_field("dataset.kind", "gpt_sft", says="dataset kind that supports it"),),
                 "In-batch packing is for fine-tuning (SFT) datasets such as dataset.kind=gpt_sft; pretraining data "
                 "is not packed this way.")]


def _exclusive(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((int_field("packing_paths_enabled", 1, r"(?:enable|keep|use|turn on)\s+(?:only\s+)?",
                            r"packing paths? (?:can|may) be (?:enabled|on)(?: at (?:a|one) time)?",
                            r"(?:at most|only)", says="how many packing paths may be enabled at once"),),
                 "The packing paths are mutually exclusive: keep only one packing path enabled.")]


def _global_capacity(f: Finding, r: ValidationReport) -> list[Fact]:
    cp = r.resolved["alignment"]["cp"]
    need = math.ceil(r.resolved["seq_length"] / cp)
    return [Fact((int_field("model.max_seqlen_per_dp_cp_rank", need, r"max[_ ]seqlen[_ ]per[_ ](?:dp[_ ]cp[_ ])?rank"
                            r"(?:[^.\n]{0,20}?at least)?", says="smallest max_seqlen_per_dp_cp_rank that fits"),),
                 f"Set model.max_seqlen_per_dp_cp_rank to at least ceil(seq_length / CP) = {need} so one pack holds "
                 "the longest sample.")]


def _family_opt_out(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((supported_field("opt_out"),),
                 f"The {f.fields['model.family']} recipes opt out of this packing path (it is not supported there); "
                 "train unpacked or use a path the family supports.")]


def _family_caveat(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((supported_field("caveat"),), "This family has a documented caveat: verify with seqpack smoke "
                                                "first.")]


def _pp1(rule_id: str) -> FactFn:
    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        key = "model.pipeline_model_parallel_size"
        return [Fact((config_field(key, _fixed(rule_id, key)),),
                     f"This path does not support pipeline parallelism: set {key}=1.",
                     (claims.advise(key, 2),))]

    return fn


def _eval_cp(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((config_field("dist.use_decentralized_pg", True),),
                 "A distinct eval CP only takes effect with dist.use_decentralized_pg=true (decentralized process "
                 "groups).")]


def _kwargs_max(f: Finding, r: ValidationReport) -> list[Fact]:
    value = f.fields.get("dataset.dataset_kwargs.max_num_samples")
    return [Fact((int_field("dataset.max_train_samples", value, says="max_train_samples to set"),),
                 f"Move the cap from dataset_kwargs.max_num_samples to dataset.max_train_samples={value}.")]


def _hf_rewrite(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((config_field("dataset.hf_rewrite", False),),
                 "Drop hf_rewrite (set dataset.hf_rewrite=false) when you give explicit packed data paths.")]


def _pad_cu_metadata(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field("missing_setting", "packed_metadata_path", {
        "packed_metadata_path": (literal("packed_metadata_path"),),
        "pad_to_max_length": (literal("pad_to_max_length"),),
        "pad_cu_seqlens": (literal("pad_cu_seqlens"),),
        "packed_sequence_size": (literal("packed_sequence_size"),),
    }, r"(?:missing|add|set|provide|needs?|requires?)(?: the)?", says="setting to add"),),
                 "What is missing is offline_packing_specs.packed_metadata_path, pointing at the metadata JSON "
                 "written with the packs.")]


def _warning_word(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field(f"severity_{f.rule_id.lower()}", "warning", {
        "warning": (r"\bwarning\b", r"\bwarns\b"), "error": (r"\berror\b", r"\bfails?\b", r"\brejects?\b")},
        literal(f.rule_id), says=f"severity of {f.rule_id}"),), f"{f.rule_id} is a warning, not an error.")]


def _mtp(f: Finding, r: ValidationReport) -> list[Fact]:
    # Not "set mtp_num_layers=0": the rule's own note says Megatron-Core rolls MTP targets inside each packed
    # sequence since core_v0.16.0 and a Bridge recipe packs with MTP=2, so turning MTP off is one fix, not the only one.
    return [Fact((yes_no_field(
        "mtp_must_be_off", False,
        [r"\b(?:must|have to|has to|need to|needs to)\b[^.\n]{0,30}\b(?:turn|switch|disable)\w*\b[^.\n]{0,20}\bMTP\b",
         r"\bMTP\b[^.\n]{0,30}\b(?:must|has to|needs to) be (?:off|disabled|removed)\b"],
        [r"\b(?:verify|check|confirm)\w*\b[^.\n]{0,60}\b(?:smoke|loss sentinel)\b",
         r"\bnot (?:required|necessary|needed) to (?:turn|switch) (?:MTP )?off\b", r"\bcan keep MTP\b"],
        anywhere=True, says="whether MTP has to be turned off"),),
        "MTP may stay: verify the packed MTP run with seqpack smoke and a loss sentinel (Megatron-Core rolls MTP targets "
        "inside each packed sequence since core_v0.16.0), or set model.mtp_num_layers=0 to follow the packing docs, "
        "which describe MTP fine-tuning as incompatible with packed sequences.")]


def _energon_encoder(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field("dataset.task_encoder", "qwen_vl", {
        "qwen_vl": (r"qwen[_ -]?vl",), "nemotron_omni": (r"nemotron[_ -]?omni",), "llava": (literal("llava"),)},
        r"task[_ ]encoder", says="the task encoder that implements native packing"),),
        "Only the qwen_vl task encoder implements Energon native packing; use it, or collator in-batch packing "
        "for other encoders.")]


def _vision_graph_budget(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field("setting", "model.max_vision_cuda_graph_seq_length", {
        "model.max_vision_cuda_graph_seq_length": (r"max[_ ]vision[_ ]cuda[_ ]graph[_ ]seq[_ ]length",),
        "model.max_seqlen_per_dp_cp_rank": (r"max[_ ]seqlen[_ ]per[_ ]dp[_ ]cp[_ ]rank",),
        "dataset.pad_to_max_length": (r"pad[_ ]to[_ ]max[_ ]length",),
    }, anywhere=True, says="the setting that bounds a packed micro-batch's patch rows"),),
        "A captured vision graph holds a fixed number of patch rows and in-batch packing sends every image of the "
        "micro-batch through it at once: set model.max_vision_cuda_graph_seq_length to at least the largest "
        "patch_rows seqpack batches reports, or turn vision CUDA graphs off.",
        (claims.graphs_ok("packed VLM micro-batches without a patch budget"),))]


def _fixed_width_forced(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((config_field("dataset.pad_to_max_length", True, says="pad_to_max_length is forced to"),),
                 "With PP>1 or EP>1 the fixed width is forced on: dataset.pad_to_max_length=true.")]


def _num_epochs(f: Finding, r: ValidationReport) -> list[Fact]:
    if r.resolved["packing_path"] in ("in_batch", "global_batch"):
        # these paths refuse the batch dataloader, so only dropping num_epochs fixes it
        return [Fact((_num_epochs_action("remove num_epochs"),),
                     "train.num_epochs needs dataloader_type=batch, which this packing path refuses: remove "
                     "num_epochs and size the run with train_iters.", (claims.dataloader_batch(),))]
    return [Fact((_num_epochs_action("batch dataloader or remove num_epochs"),),
                 "train.num_epochs needs a GPT-SFT dataset with dataloader_type=batch; otherwise remove num_epochs.")]


def _num_epochs_action(value: str) -> AnswerField:
    remove = (r"(?:remove|unset|drop|delete)[^.\n]{0,30}num_epochs", r"num_epochs[^.\n]{0,30}(?:removed|dropped)")
    batch = (r"dataloader_type\s*(?:=|:|to)\s*batch\b", r"batch data ?loader")
    keep = (r"(?:keep|leave)[^.\n]{0,20}num_epochs",)
    if value == "remove num_epochs":
        options = {"remove num_epochs": remove, "use the batch dataloader": batch, "keep num_epochs": keep}
    else:
        options = {value: remove + batch, "keep num_epochs": keep}
    return choice_field("fix", value, options, anywhere=True, says="the fix for num_epochs")


def _global_scheduler(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field("model.sequence_packing_scheduler", "dp_balanced", {
        "dp_balanced": (literal("dp_balanced"),), "default_dynamic_cp": (literal("default_dynamic_cp"),)},
        r"scheduler", says="the scheduler to use"),), "Use the dp_balanced scheduler.")]


def _overridden(f: Finding, r: ValidationReport) -> list[Fact]:
    mult = r.resolved["pad_seq_to_mult"]
    return [Fact((int_field("effective_multiple", mult, r"(?:derived|effective|actual|used) (?:multiple|value)",
                            r"(?:derived|overwritten|overridden|replaced)(?: with| by)?", r"multiple (?:used|applied)",
                            says="the multiple actually used"),),
                 f"in_batch_packing_pad_to_multiple_of is derived from TP/CP/SP; a value you set is overwritten "
                 f"(derived multiple {mult}).")]


def _chunk_width(f: Finding, r: ValidationReport) -> list[Fact]:
    moe = r.resolved["moe_dispatch"]
    return [_multiple("pack_width_multiple", r"(?:pack(?:ed)?[_ ](?:sequence[_ ])?(?:size|width)|seq(?:uence)?[_ ]length)",
                      f"For whole HybridEP chunks ({moe['chunk']} tokens) on every rank, the pack width",
                      moe["width_multiple"])]


def _capacity(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((yes_no_field(
        "upstream_runtime_coverage", False,
        [r"(?<!no )(?<!without )runtime coverage\b(?! is missing)", r"\bis (?:covered|tested)\b"],
        [r"\bno (?:upstream )?runtime coverage", r"(?:lacks?|without|missing) (?:upstream )?runtime coverage",
         r"not (?:covered|tested)"],
        anywhere=True, says="upstream has runtime coverage of token dropping with packing"),),
        "Upstream has no runtime coverage of expert capacity / token dropping with packed sequences: capacity "
        "counts each pack's padding, padding competes for it, and the dropped tokens depend on what shares the "
        "pack. Prefer dropless MoE (moe_expert_capacity_factor=null) or verify the run.")]


def _mtp_roll(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((yes_no_field(
        "mtp_targets_correct", False,
        [r"MTP (?:loss|targets?) (?:is|are) (?:right|correct|fine)"],
        [r"(?:wrong|misplaced|incorrect|shifted) (?:MTP )?(?:targets?|loss)", r"MTP (?:loss|targets?) (?:is|are) wrong",
         r"silently wrong"],
        anywhere=True, says="the MTP targets are correct"),),
        "Megatron-Core's packed MTP roll takes its windows from cu_seqlens_q (the real boundaries) while the row is "
        "laid out by the padded ones, so every sequence after the first gets wrong MTP targets, silently. Keep the "
        "alignment at 1, use a Megatron-Core with the fix, or turn MTP off.")]


FACTS: dict[str, FactFn] = {
    "TOPO-WORLD-DIVISIBLE": _world,
    "BATCH-GBS-DIVISIBLE": _gbs,
    "BATCH-EVAL-GBS-DIVISIBLE": _gbs_eval,
    "SEQ-LENGTH-MATCH": _seq_match,
    "CP-SEQ-DIVISIBLE": _cp_seq,
    "CP-FT-PER-TOKEN-LOSS": _set("CP-FT-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "CP-FT-AVG-COLLECTIVE": _set("CP-FT-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "ALIGN-SEQ-LENGTH": _align_seq,
    "CP-EVAL-DECENTRALIZED": _eval_cp,
    "PACK-OFFLINE-SPECS-REQUIRED": lambda f, r: [Fact(
        (int_field("dataset.offline_packing_specs.packed_sequence_size", r.resolved["seq_length"],
                   says="packed_sequence_size to set"),),
        f"Set dataset.offline_packing_specs.packed_sequence_size={r.resolved['seq_length']} (the seq_length).")],
    "PACK-OFFLINE-ENABLE-REQUIRED": _set("PACK-OFFLINE-ENABLE-REQUIRED", "dataset.enable_offline_packing"),
    "PACK-OFFLINE-PAD-MULT-POSITIVE": lambda f, r: [Fact(
        (config_field(PAD, r.resolved["pad_seq_to_mult"], says="pad_seq_to_mult to set"),),
        f"Set {PAD}={r.resolved['pad_seq_to_mult']} (a positive multiple derived from the topology).")],
    "PACK-OFFLINE-PAD-MULT-NULL": lambda f, r: [Fact(
        (config_field(PAD, r.resolved["pad_seq_to_mult"], says="pad_seq_to_mult to set"),),
        f"Set {PAD}={r.resolved['pad_seq_to_mult']}; offline packing never derives it.")],
    "PACK-OFFLINE-MAX-SINGLE-LE-PACK": lambda f, r: [Fact(
        (int_field("max_single_sequence_length_limit",
                   f.fields["dataset.offline_packing_specs.packed_sequence_size"],
                   r"max[_ ]single[_ ]sequence[_ ]length[^.\n]{0,30}?(?:at most|<=|≤|no (?:larger|more) than)",
                   r"max[_ -]seq[_ -]length[^.\n]{0,30}?(?:at most|<=|≤|no (?:larger|more) than)",
                   says="the largest allowed max_single_sequence_length"),),
        "Set max_single_sequence_length at most "
        f"{f.fields['dataset.offline_packing_specs.packed_sequence_size']} (the pack size).")],
    "PACK-OFFLINE-SEQ-LE-PACK": lambda f, r: [Fact(
        (int_field("max_single_sequence_length_limit",
                   f.fields["dataset.offline_packing_specs.packed_sequence_size"],
                   r"max[_ ]single[_ ]sequence[_ ]length[^.\n]{0,30}?(?:at most|<=|≤|no (?:larger|more) than)",
                   says="the largest allowed max_single_sequence_length"),),
        "Set max_single_sequence_length at most "
        f"{f.fields['dataset.offline_packing_specs.packed_sequence_size']} (the pack size), or raise "
        "packed_sequence_size to seq_length.")],
    "PACK-OFFLINE-SIZE-EQ-SEQ": _size_eq_seq,
    "PACK-OFFLINE-MBS1": _offline_mbs1,
    "PACK-OFFLINE-DATASET-KIND": lambda f, r: [Fact((config_field("dataset.kind", "gpt_sft",
                                                                  says="dataset kind offline packing needs"),),
                                                    "Offline packing needs dataset.kind=gpt_sft.")],
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY": _pad_topology,
    "PACK-OFFLINE-WIDTH-ALIGNED": lambda f, r: [_multiple(
        "pack_size_multiple", r"(?:packed[_ ]sequence[_ ]size|pack[_ ]size)", "packed_sequence_size",
        r.resolved["pad_seq_to_mult"])],
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
    "PACK-ENERGON-DEFER": _set("PACK-ENERGON-DEFER", "dataset.defer_in_batch_packing_to_step"),
    "PACK-IN-BATCH-MBS": _in_batch_mbs,
    "PACK-IN-BATCH-DATALOADER": _in_batch_loader,
    "PACK-IN-BATCH-DATASET-KIND": _in_batch_kind,
    "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN": _overridden,
    "PACK-IN-BATCH-DEFERRED": _set("PACK-IN-BATCH-DEFERRED", "dataset.defer_in_batch_packing_to_step"),
    "PACK-ENERGON-MBS1": _set("PACK-ENERGON-MBS1", "train.micro_batch_size", (2, 4)),
    "PACK-ENERGON-DATASET-MBS": _set("PACK-ENERGON-DATASET-MBS", "dataset.micro_batch_size"),
    "PACK-ENERGON-PER-TOKEN-LOSS": _set("PACK-ENERGON-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "PACK-ENERGON-AVG-COLLECTIVE": _set("PACK-ENERGON-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "PACK-ENERGON-NO-MTP": _set("PACK-ENERGON-NO-MTP", "model.mtp_num_layers"),
    "PACK-ENERGON-NO-CUDA-GRAPHS": _set("PACK-ENERGON-NO-CUDA-GRAPHS", "model.vision_cuda_graph_impl"),
    "PACK-ENERGON-NO-DISTTRAIN": _set("PACK-ENERGON-NO-DISTTRAIN", "model.qwen3_vl_disttrain"),
    "PACK-ENERGON-NO-PP": _pp1("PACK-ENERGON-NO-PP"),
    "PACK-ENERGON-EP-OVERLAP": _set("PACK-ENERGON-EP-OVERLAP", "model.overlap_moe_expert_parallel_comm"),
    "MOE-EP-OVERLAP": _value("model.overlap_moe_expert_parallel_comm", False),
    "VLM-IN-BATCH-EP-OVERLAP": _set("VLM-IN-BATCH-EP-OVERLAP", "model.overlap_moe_expert_parallel_comm", (True,)),
    "VLM-VISION-GRAPH-PATCH-BUDGET": _vision_graph_budget,
    "PACK-ENERGON-TASK-ENCODER": _energon_encoder,
    "PACK-ENERGON-DATALOADER": _set("PACK-ENERGON-DATALOADER", "dataset.dataloader_type", ("single", "batch")),
    "PACK-FIXED-WIDTH-FORCED": _fixed_width_forced,
    "PACK-GLOBAL-MBS1": _set("PACK-GLOBAL-MBS1", "train.micro_batch_size", (2, 4)),
    "PACK-GLOBAL-PER-TOKEN-LOSS": _set("PACK-GLOBAL-PER-TOKEN-LOSS", "model.calculate_per_token_loss", (False,)),
    "PACK-GLOBAL-AVG-COLLECTIVE": _set("PACK-GLOBAL-AVG-COLLECTIVE", "ddp.average_in_collective", (True,)),
    "PACK-GLOBAL-NO-CUDA-GRAPHS": _set("PACK-GLOBAL-NO-CUDA-GRAPHS", "model.cuda_graph_impl"),
    "PACK-GLOBAL-NO-PP": _pp1("PACK-GLOBAL-NO-PP"),
    "PACK-GLOBAL-NO-HYBRID": _set("PACK-GLOBAL-NO-HYBRID", "model.is_hybrid_model"),
    "PACK-GLOBAL-NO-FSDP": _set("PACK-GLOBAL-NO-FSDP", "ddp.use_megatron_fsdp"),
    "PACK-GLOBAL-UNPACKED-SAMPLES": _set("PACK-GLOBAL-UNPACKED-SAMPLES", "dataset.kind"),
    "PACK-GLOBAL-DATALOADER": _in_batch_loader,
    "PACK-GLOBAL-MAX-SEQLEN-REQUIRED": _global_capacity,
    "PACK-GLOBAL-CAPACITY": _global_capacity,
    "PACK-GLOBAL-SCHEDULER": _global_scheduler,
    "PACK-MTP-DOCUMENTED": _mtp,
    "MODEL-FAMILY-OPT-OUT": _family_opt_out,
    "MODEL-FAMILY-CAVEAT": _family_caveat,
    "PACK-LLAVA-PP-CP": _pp1("PACK-LLAVA-PP-CP"),
    "DATALOADER-NUM-EPOCHS": _num_epochs,
    "DATASET-KWARGS-MAX-NUM-SAMPLES": _kwargs_max,
    "HF-REWRITE-EXPLICIT-PATHS": _hf_rewrite,
    "MOE-ALLGATHER-EQUAL-WIDTH": _set("MOE-ALLGATHER-EQUAL-WIDTH", "dataset.dataset_kwargs.pad_to_max_length", (False,)),
    "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH": _set("MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH",
                                            "dataset.dataset_kwargs.pad_to_max_length", (False,)),
    "MOE-HYBRIDEP-GRAPHS-PADDING": _set("MOE-HYBRIDEP-GRAPHS-PADDING", "model.moe_hybridep_pad_uneven_dispatch_inputs",
                                        (True,)),
    "MOE-HYBRIDEP-UNEVEN-PADDING": _set("MOE-HYBRIDEP-UNEVEN-PADDING", "model.moe_hybridep_pad_uneven_dispatch_inputs",
                                        (False,)),
    "MOE-HYBRIDEP-CHUNK-WIDTH": _chunk_width,
    "MOE-CAPACITY-PACKING": _capacity,
    "MTP-PACKED-ALIGNMENT-ROLL": _mtp_roll,
    "PACK-PP-VARIABLE-SHAPES": _set("PACK-PP-VARIABLE-SHAPES", "dataset.dataset_kwargs.pad_to_max_length", (False,)),
    "MOE-ALLGATHER-PP-VARIABLE": _set("MOE-ALLGATHER-PP-VARIABLE", "model.moe_token_dispatcher_type", ("allgather",)),
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


def merge(facts: list[Fact]) -> tuple[list[AnswerField], list[Forbidden], list[str]]:
    """The facts' fields (one per name; two facts asking the same name must agree), forbidden claims and sentences."""
    fields: dict[str, AnswerField] = {}
    forbidden: list[Forbidden] = []
    sentences: list[str] = []
    for fact in facts:
        for f in fact.fields:
            if f.name in fields and fields[f.name].value != f.value:
                raise UsageError(f"two findings disagree on {f.name}: {fields[f.name].value!r} vs {f.value!r}")
            fields.setdefault(f.name, f)
        forbidden += [fb for fb in fact.forbidden if fb not in forbidden]
        if fact.sentence not in sentences:
            sentences.append(fact.sentence)
    return list(fields.values()), forbidden, sentences


__all__ = ["FACTS", "Fact", "facts_for", "facts_for_rule", "merge"]
