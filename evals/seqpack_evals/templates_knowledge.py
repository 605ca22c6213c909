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
from seqpack_evals import claims, tables
from seqpack_evals.builder import MAIN_NOTE, GenContext, make_task, override_args, paths_of
from seqpack_evals.facts import facts_for, facts_for_rule, merge
from seqpack_evals.fields import AnswerField, choice_field, int_field, literal, set_field, yes_no_field
from seqpack_evals.render import config_yaml, topology_words
from seqpack_evals.vocab import KEY_ALIASES, rule_ids_field, supported_field

_FILE = "knowledge"
PAD = "dataset.offline_packing_specs.pad_seq_to_mult"
PAD_ALIASES = KEY_ALIASES[PAD]


# ------------------------------------------------------------------------------------------------
# Alignment
# ------------------------------------------------------------------------------------------------


def _topologies(key: str) -> list[tuple[int, int, bool, int | None, int | None]]:
    """(tp, cp, sp, eval_cp, seq_length) of the alignment tasks in ``knowledge.yaml``'s ``key``."""
    return [(r["tp"], r["cp"], r["sp"], r.get("eval_cp"), r.get("seq_length"))
            for r in tables.rows(_FILE, key, ("tp", "cp", "sp"), ("eval_cp", "seq_length"),
                                 {"tp": int, "cp": int, "sp": bool, "eval_cp": int, "seq_length": int})]


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
    for tp, cp, sp, eval_cp, _ in _topologies("alignment_explicit"):
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
    for tp, cp, sp, eval_cp, seq in _topologies("alignment_implicit"):
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
    for r in tables.rows(_FILE, "token_slots", ("id", "bucket", "token_slots", "lengths", "dp", "prompt"),
                         types={"token_slots": int, "lengths": list, "dp": int, "prompt": str}):
        _slots_task(ctx, r["id"], r["bucket"], r["token_slots"], tuple(r["lengths"]), r["dp"], r["prompt"])
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


def severity_field(rule_id: str, severity: str) -> AnswerField:
    """Whether a rule is an error or a warning."""
    return choice_field("severity", severity, {"error": (r"\berror\b",), "warning": (r"\bwarning\b",)},
                        literal(rule_id), r"\bseverity\b", r"\bit(?:'s| is) an?\b", says=f"severity of {rule_id}")


def _explain_tasks(ctx: GenContext) -> None:
    family_paths = tables.table(_FILE, "family_paths")
    for rule_id in tables.strings(tables.table(_FILE, "explain_rules", list), "knowledge.yaml: explain_rules"):
        rule = get_rule(rule_id)
        if rule is None:
            raise UsageError(f"knowledge.yaml: explain_rules names unknown rule {rule_id}")
        report = ctx.validate(None, list(rule.trigger.items()))
        finding = next(f for f in report.violations + report.warnings if f.rule_id == rule_id)
        fields, forbidden, sentences = merge(facts_for_rule(report, rule_id))
        fields = [severity_field(rule_id, rule.severity)] + [f for f in fields if not f.name.startswith("severity_")]
        paths = tables.strings(family_paths.get(rule.family), f"knowledge.yaml: family_paths: {rule.family}")
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
    for r in tables.rows(_FILE, "validate_runs", ("slug", "overrides")):
        slug, overrides = r["slug"], tables.strings(r["overrides"], f"knowledge.yaml: validate_runs: {r['slug']}")
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
    for r in tables.rows(_FILE, "scenarios", ("slug", "story", "config", "graded"), types={"config": dict}):
        slug, story, overrides = r["slug"], r["story"], r["config"]
        graded = tables.strings(r["graded"], f"knowledge.yaml: scenarios: {slug}: graded")
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


def _model_support_tasks(ctx: GenContext) -> None:
    path_words, switches = tables.table(_FILE, "path_words"), tables.table(_FILE, "path_switch")
    verdicts = tables.table(_FILE, "support_verdicts")
    for r in tables.rows(_FILE, "model_support", ("bucket", "family", "path", "prompt")):
        bucket, family, path, prompt = r["bucket"], r["family"], r["path"], r["prompt"]
        switch = tables.strings(switches.get(path), f"knowledge.yaml: path_switch: {path}")
        (ms,) = check_model_support(family, path)
        entry = find_family(family)
        name = entry.name if entry else family
        verdict = verdicts[ms.status]
        main_only = "not in megatron-bridge 0.6.2" in ms.note  # a record that holds for Bridge main only
        if main_only:
            prompt = MAIN_NOTE + prompt
        ctx.add(make_task(
            f"{bucket}-model-{family.replace('_', '-')}-{path.replace('_', '-')}",
            bucket,
            prompt,
            f"For {name}, {path_words[path]} {verdict}: {ms.note} (evidence: {ms.evidence}).",
            [supported_field(ms.status)],
            claims.path_claims([path]),
            assertions=[f"Mentions why: {ms.note}"],
            script="seqpack validate",
            command=["validate", "/dev/null", "--set", f"model.family={family}", *override_args(list(switch))],
            paths=[path],
            topics=["model_support"],
            rule_ids=["MODEL-FAMILY-OPT-OUT"] if ms.status == "opt_out" else [],
            truth=ms.to_dict(),
            source={"kind": "seqpack", "bridge_version": "main", "rests_on": ms.note} if main_only else None,
        ))


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
