"""What a correct answer must say about a broken packing rule, derived from the validation report.

For every rule a task can involve, :data:`FACTS` maps the rule id to a function that turns the
:class:`~seqpack.config.validate.Finding` (offending fields and their values) and the
report's resolved values (DP, alignment, ...) into :class:`Fact` objects: answer fields (the value
to set, the multiple to respect, ...), the sentence of the reference answer that gives them, and
the dangerous advice to forbid. Values come from the report, never from this file; the rule's own
``fixed`` example is used only where it is the one correct value (``micro_batch_size=1``, a
boolean, an enum). Those one-key fixes and the facts that need no number from the report are a table
(``evals/data/facts.yaml``); the rules whose facts need the report's numbers are functions here.

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
from seqpack_evals import claims, tables
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


def _pp1(rule_id: str) -> FactFn:
    def fn(f: Finding, r: ValidationReport) -> list[Fact]:
        key = "model.pipeline_model_parallel_size"
        return [Fact((config_field(key, _fixed(rule_id, key)),),
                     f"This path does not support pipeline parallelism: set {key}=1.",
                     (claims.advise(key, 2),))]

    return fn


def _kwargs_max(f: Finding, r: ValidationReport) -> list[Fact]:
    value = f.fields.get("dataset.dataset_kwargs.max_num_samples")
    return [Fact((int_field("dataset.max_train_samples", value, says="max_train_samples to set"),),
                 f"Move the cap from dataset_kwargs.max_num_samples to dataset.max_train_samples={value}.")]


def _warning_word(f: Finding, r: ValidationReport) -> list[Fact]:
    return [Fact((choice_field(f"severity_{f.rule_id.lower()}", "warning", {
        "warning": (r"\bwarning\b", r"\bwarns\b"), "error": (r"\berror\b", r"\bfails?\b", r"\brejects?\b")},
        literal(f.rule_id), says=f"severity of {f.rule_id}"),), f"{f.rule_id} is a warning, not an error.")]


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


#: Rules whose facts need the report's numbers (the one-key fixes and the static facts are in facts.yaml).
_CODE_FACTS: dict[str, FactFn] = {
    "TOPO-WORLD-DIVISIBLE": _world,
    "BATCH-GBS-DIVISIBLE": _gbs,
    "BATCH-EVAL-GBS-DIVISIBLE": _gbs_eval,
    "SEQ-LENGTH-MATCH": _seq_match,
    "CP-SEQ-DIVISIBLE": _cp_seq,
    "ALIGN-SEQ-LENGTH": _align_seq,
    "PACK-OFFLINE-SPECS-REQUIRED": lambda f, r: [Fact(
        (int_field("dataset.offline_packing_specs.packed_sequence_size", r.resolved["seq_length"],
                   says="packed_sequence_size to set"),),
        f"Set dataset.offline_packing_specs.packed_sequence_size={r.resolved['seq_length']} (the seq_length).")],
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
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY": _pad_topology,
    "PACK-OFFLINE-WIDTH-ALIGNED": lambda f, r: [_multiple(
        "pack_size_multiple", r"(?:packed[_ ]sequence[_ ]size|pack[_ ]size)", "packed_sequence_size",
        r.resolved["pad_seq_to_mult"])],
    "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN": _overridden,
    "PACK-ENERGON-NO-PP": _pp1("PACK-ENERGON-NO-PP"),
    "PACK-GLOBAL-NO-PP": _pp1("PACK-GLOBAL-NO-PP"),
    "PACK-GLOBAL-MAX-SEQLEN-REQUIRED": _global_capacity,
    "PACK-GLOBAL-CAPACITY": _global_capacity,
    "MODEL-FAMILY-OPT-OUT": _family_opt_out,
    "PACK-LLAVA-PP-CP": _pp1("PACK-LLAVA-PP-CP"),
    "DATALOADER-NUM-EPOCHS": _num_epochs,
    "DATASET-KWARGS-MAX-NUM-SAMPLES": _kwargs_max,
    "MOE-HYBRIDEP-CHUNK-WIDTH": _chunk_width,
}


def _fact_field(spec: Any, where: str) -> AnswerField:
    """An answer-field spec of ``facts.yaml``; ``config: KEY`` is a config key with its usual spellings."""
    if isinstance(spec, dict) and "config" in spec:
        d = tables.entry(spec, where, ("config", "value"), ("says",))
        return config_field(d["config"], d["value"], says=d.get("says", ""))
    return tables.field_from_spec(spec, where)


def _static_fact(item: Any, where: str) -> Fact:
    d = tables.entry(item, where, ("fields", "sentence"), ("forbidden",), {"fields": list, "sentence": str})
    return Fact(tuple(_fact_field(spec, where) for spec in d["fields"]), d["sentence"],
                tuple(claims.listed(d.get("forbidden", []), f"{where}: forbidden")))


def _static(fact: Fact) -> FactFn:
    return lambda f, r: [fact]


def _table_facts() -> dict[str, FactFn]:
    """The facts of ``facts.yaml``: one-key fixes (the rule's own ``fixed`` value, or the value its message names)
    and static facts (fields, sentence and claims that need no number from the report)."""
    out: dict[str, FactFn] = {}
    for rule_id, item in tables.table("facts", "fixed_value").items():
        d = tables.entry(item, f"facts.yaml: fixed_value: {rule_id}", ("key",), ("wrong",), {"wrong": list})
        if rule_id not in RULES_BY_ID or d["key"] not in RULES_BY_ID[rule_id].fixed:
            raise UsageError(f"facts.yaml: fixed_value: {rule_id}: not a rule whose fixed example sets {d['key']}")
        out[rule_id] = _set(rule_id, d["key"], tuple(d.get("wrong", ())))
    for rule_id, item in tables.table("facts", "stated_value").items():
        d = tables.entry(item, f"facts.yaml: stated_value: {rule_id}", ("key", "value"))
        out[rule_id] = _value(d["key"], d["value"])
    static = tables.table("facts", "static")
    for rule_id, item in static.items():
        where = f"facts.yaml: static: {rule_id}"
        if isinstance(item, dict) and "same_as" in item:
            tables.entry(item, where, ("same_as",))
            item = static.get(item["same_as"])
        out[rule_id] = _static(_static_fact(item, where))
    both = sorted(set(out) & set(_CODE_FACTS))
    if both:
        raise UsageError(f"facts.yaml and facts.py both give facts for {', '.join(both)}")
    return out


FACTS: dict[str, FactFn] = {**_table_facts(), **_CODE_FACTS}


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
