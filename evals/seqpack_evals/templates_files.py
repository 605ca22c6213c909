"""Contextual tasks: a config, a data file, packed artifacts or an error log in the working directory.

Every file is produced by running seqpack: configs are validated with ``validate_config``; packs
are written by ``prepare_packed_dataset`` from the shipped demo data; logs are the captured output
of ``seqpack`` commands on broken inputs (:func:`~seqpack_evals.capture.capture_cli`),
or of the library call that a training step makes (the CP partition). The answer fields are built
from the same results.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from seqpack.core.alignment import derive_alignment, round_up
from seqpack.core.errors import SeqpackError, UsageError
from seqpack_evals import claims, tables
from seqpack_evals.builder import GenContext, make_task, paths_of
from seqpack_evals.capture import capture_cli
from seqpack_evals.facts import facts_for, merge
from seqpack_evals.fields import (
    AnswerField,
    choice_field,
    int_field,
    percent_field,
    yes_no_field,
)
from seqpack_evals.render import config_yaml, without_comments
from seqpack_evals.tasks import Forbidden
from seqpack_evals.vocab import KEY_ALIASES, multiple_field, rule_ids_field

DATA_ROWS = 40
PACK_SIZE = 1024
PAD_ALIASES = KEY_ALIASES["dataset.offline_packing_specs.pad_seq_to_mult"]


# ------------------------------------------------------------------------------------------------
# Shared inputs (built once per dataset build, in the scratch folder) and common fields
# ------------------------------------------------------------------------------------------------


def _demo_subset(ctx: GenContext, schema: str, rows: int) -> Path:
    """The first ``rows`` lines of a shipped demo file, as ``<scratch>/<schema>_<rows>.jsonl``."""
    from seqpack.data import demo_path

    target = ctx.scratch / f"{schema}_{rows}.jsonl"
    if not target.exists():
        with open(demo_path(schema), "rb") as fh:
            lines = [fh.readline() for _ in range(rows)]
        target.write_bytes(b"".join(lines))
    return target


def _packs(ctx: GenContext, pad: int) -> Path:
    """Offline packs of the prompt/completion subset at ``PACK_SIZE`` with ``pad_seq_to_mult=pad``."""
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    out = ctx.scratch / f"packs_pad{pad}"
    if not out.exists():
        data = _demo_subset(ctx, "prompt_completion", DATA_ROWS)
        # relative names, so the manifest records the source as a bare file name, not a temp path
        with contextlib.chdir(ctx.scratch):
            prepared = prepare_packed_dataset(data.name, out.name, pack_size=PACK_SIZE, pad_seq_to_mult=pad)
        return ctx.scratch / prepared.root
    return next(p for p in out.iterdir() if p.is_dir())


def _workdir_with(ctx: GenContext, name: str, files: dict[str, Path | str]) -> Path:
    """A scratch working directory holding copies of ``files`` (name -> source path or text)."""
    import shutil

    work = ctx.work(name)
    for dest, src in files.items():
        target = work / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path) and src.is_dir():
            shutil.copytree(src, target)
        elif isinstance(src, Path):
            shutil.copyfile(src, target)
        else:
            target.write_text(src, encoding="utf-8")
    return work


def dp_field(dp: int) -> AnswerField:
    """The data-parallel size."""
    return tables.named_field("data_parallel_size", value=dp)


def valid_field(ok: bool) -> AnswerField:
    """Whether the validator accepts the config."""
    return tables.named_field("valid", value=ok)


def pad_field(value: int, name: str = "pad_seq_to_mult") -> AnswerField:
    """``pad_seq_to_mult`` (the per-sequence alignment multiple)."""
    return int_field(name, value, *PAD_ALIASES, says="pad_seq_to_mult")


def usable_field(name: str, usable: bool, *aliases: str, says: str = "") -> AnswerField:
    """Whether packs can be used as they are (``usable`` / ``not usable``)."""
    return tables.named_field("usable", name=name, value="usable" if usable else "not usable", aliases=list(aliases),
                              says=says or name)


def count_field(name: str, value: int, *nouns: str, says: str = "") -> AnswerField:
    """A count written as ``N nouns`` or ``nouns: N``."""
    return int_field(name, value, *(rf"\b{n}\b" for n in nouns), says=says or name)


# ------------------------------------------------------------------------------------------------
# Config review tasks
# ------------------------------------------------------------------------------------------------


def _review_task(
    ctx: GenContext,
    task_id: str,
    prompt: str,
    text: str,
    *,
    overrides: Sequence[str] = (),
    warnings: bool = False,
    name: str = "config.yaml",
) -> None:
    """Diagnose a broken config: every error (and warning when asked) must be fixed in the answer."""
    report = ctx.validate(text, list(overrides))
    if report.ok and not (warnings and report.warnings):
        raise UsageError(f"{task_id}: the config is valid; a review task needs findings")
    rel = ctx.put_text(task_id, name, text)
    fields, forbidden, sentences = merge(facts_for(report, warnings=warnings))
    findings = report.violations + (report.warnings if warnings else [])
    paths = paths_of(report)
    sets = [w for o in overrides for w in ("--set", o)]
    ctx.add(make_task(
        task_id, "contextual", prompt,
        "Problems found:\n" + "".join(f"[{f.rule_id}] {f.message}\n" for f in findings) + "Fixes: " + " ".join(sentences),
        [rule_ids_field([f.rule_id for f in findings])] + fields,
        forbidden + claims.path_claims(paths),
        assertions=[f"Finds the problem checked by {f.rule_id} ({f.title})" for f in findings],
        script="seqpack validate",
        command=["validate", name, *sets],
        files=[rel],
        paths=paths,
        topics=["rules", "diagnosis"],
        rule_ids=report.rule_ids,
        truth={"overrides": list(overrides), "violations": [f.rule_id for f in report.violations],
               "warnings": [f.rule_id for f in report.warnings],
               "messages": [f.one_line() for f in report.violations + report.warnings],
               "resolved": report.resolved},
    ))


def _example_text(name: str) -> str:
    from seqpack.config.examples import example_path

    return without_comments(example_path(name).read_text(encoding="utf-8"))


def _config_tasks(ctx: GenContext) -> None:
    for r in tables.rows("contextual", "reviews", ("id", "prompt"), ("example", "config", "overrides", "warnings"),
                         {"example": str, "config": dict, "warnings": bool}):
        if ("example" in r) == ("config" in r):
            raise UsageError(f"contextual.yaml: reviews: {r['id']}: give exactly one of example and config")
        text = _example_text(r["example"]) if "example" in r else config_yaml(r["config"])
        overrides = tables.strings(r.get("overrides", []), f"contextual.yaml: reviews: {r['id']}: overrides")
        _review_task(ctx, r["id"], r["prompt"], text, overrides=overrides, warnings=r.get("warnings", False))


def _launch_check_tasks(ctx: GenContext) -> None:
    # offline 8K example: valid; DP, token slots and micro-batches per step come from the report
    text = _example_text("offline_8k_tp4_cp2_sp")
    report = ctx.validate(text)
    r = report.resolved
    rel = ctx.put_text("ctx-offline-8k-launch", "config.yaml", text)
    per_step = r["micro_batches_per_step_per_rank"]
    ctx.add(make_task(
        "ctx-offline-8k-launch", "contextual",
        "Sanity-check config.yaml before we launch on 16 GPUs: is it valid, what data-parallel size does it "
        "imply, how many token slots does each optimizer step offer, and how many micro-batches does each "
        "data-parallel rank run per step?",
        f"Valid ({report.rules_checked} rules, no violations). DP = {r['data_parallel_size']}, pad_seq_to_mult = "
        f"{r['pad_seq_to_mult']}, {r['token_slots_per_step']} token slots per step, {per_step} micro-batches per "
        "DP rank per step.",
        [valid_field(report.ok), dp_field(r["data_parallel_size"]),
         int_field("token_slots_per_step", r["token_slots_per_step"], r"token[_ ]slots(?:[_ ]per[_ ]step)?",
                   says="token slots per step"),
         int_field("micro_batches_per_step_per_rank", per_step, r"micro-?batch(?:es)?(?: per (?:DP )?rank)?",
                   says="micro-batches per DP rank per step")],
        claims.path_claims(["offline", "context_parallel"]),
        script="seqpack validate", command=["validate", "config.yaml"], files=[rel],
        paths=["offline", "context_parallel"], topics=["rules", "token_slots"], truth={"resolved": r, "ok": report.ok},
    ))

    text = _example_text("in_batch_mbs4")
    report = ctx.validate(text)
    r = report.resolved
    mbs = report.config["train"]["micro_batch_size"]
    rel = ctx.put_text("ctx-in-batch-review", "config.yaml", text)
    per_step = r["micro_batches_per_step_per_rank"]
    ctx.add(make_task(
        "ctx-in-batch-review", "contextual",
        "config.yaml concatenates the rows of each micro-batch at collate time. How many source rows end up in one "
        "packed row, what is the data-parallel size, how many micro-batches does each DP rank run per optimizer "
        "step, and is the dataloader type right?",
        f"Valid. {mbs} rows are packed into each THD row (micro_batch_size={mbs}); DP = {r['data_parallel_size']}; "
        f"{per_step} micro-batches per DP rank per step; dataloader_type single is correct (batch is refused).",
        [int_field("rows_per_packed_row", mbs, r"\brows\b(?: (?:are )?packed into each)?", r"micro_batch_size",
                   says="source rows in one packed row"),
         dp_field(r["data_parallel_size"]),
         int_field("micro_batches_per_step_per_rank", per_step, r"micro-?batch(?:es)?(?: per (?:DP )?rank)?",
                   says="micro-batches per DP rank per step"),
         yes_no_field("dataloader_type_right", True,
                      [r"\bsingle\b[^.\n]{0,40}?\b(?:right|correct|fine|ok|good|required|needed)\b",
                       r"\b(?:right|correct|fine|ok|good)\b[^.\n]{0,40}?\bsingle\b"],
                      [r"(?:switch|change)[^.\n]{0,30}dataloader", r"\bsingle\b[^.\n]{0,30}\b(?:wrong|incorrect)\b"],
                      anywhere=True, says="the dataloader type is right")],
        claims.path_claims(["in_batch"]),
        script="seqpack validate", command=["validate", "config.yaml"], files=[rel], paths=["in_batch"],
        topics=["rules"], truth={"resolved": r, "ok": report.ok},
    ))

    text = _example_text("global_batch_cp2")
    report = ctx.validate(text, ["model.context_parallel_size=4"])
    r = report.resolved
    rel = ctx.put_text("ctx-global-batch-cp4", "config.yaml", text)
    ctx.add(make_task(
        "ctx-global-batch-cp4", "contextual",
        "config.yaml uses global-batch packing with CP=2 on 8 GPUs. If we switch to context parallel 4 on the "
        "same 8 GPUs and change nothing else, is it still valid? Give the new data-parallel size, the per-sequence "
        "alignment multiple, and how many tokens one pack can hold.",
        f"Still valid. DP = {r['data_parallel_size']}; pad_seq_to_mult = {r['pad_seq_to_mult']} "
        f"({r['alignment']['explanation']}); one pack holds max_seqlen_per_dp_cp_rank * CP = "
        f"{r['global_batch_capacity_tokens']} tokens.",
        [valid_field(report.ok), dp_field(r["data_parallel_size"]), pad_field(r["pad_seq_to_mult"]),
         int_field("pack_capacity_tokens", r["global_batch_capacity_tokens"], r"one pack (?:can )?holds?",
                   r"\bcapacity\b", r"tokens per pack", says="tokens one pack holds")],
        claims.path_claims(["global_batch", "context_parallel"]),
        script="seqpack validate", command=["validate", "config.yaml", "--set", "model.context_parallel_size=4"],
        files=[rel], paths=["global_batch", "context_parallel"],
        topics=["rules", "alignment"], truth={"resolved": r, "ok": report.ok, "violations": report.rule_ids},
    ))


# ------------------------------------------------------------------------------------------------
# Error logs
# ------------------------------------------------------------------------------------------------


def _log_task(
    ctx: GenContext,
    task_id: str,
    argv: Sequence[str],
    inputs: dict[str, Path | str],
    prompt: str,
    answer: str,
    fields: Sequence[AnswerField],
    forbidden: Sequence[Forbidden],
    *,
    ship: Sequence[str] = (),
    log_name: str = "error.log",
    paths: Sequence[str] = (),
    rule_ids: Sequence[str] = (),
    script: str | None = None,
    expect_exit: int = 2,
) -> dict[str, Any]:
    """Run ``seqpack ARGV`` on ``inputs``, ship the log (and the ``ship`` inputs), add the task."""
    work = _workdir_with(ctx, task_id, inputs)
    run = capture_cli(argv, work)
    if run.exit_code != expect_exit:
        raise UsageError(f"{task_id}: seqpack {' '.join(argv)} exited {run.exit_code}, expected {expect_exit}:"
                         f" {run.stderr or run.stdout}")
    files = [ctx.put_text(task_id, log_name, run.log())]
    for name in ship:
        src = work / name
        if src.is_dir():
            files += ctx.put_tree(task_id, name, src)
        else:
            files.append(ctx.put_file(task_id, name, src))
    ctx.add(make_task(
        task_id, "contextual", prompt, answer, fields, forbidden, script=script, command=list(argv), files=files,
        paths=paths, topics=["diagnosis"], rule_ids=rule_ids, truth={"command": ["seqpack", *argv],
                                                                     "exit_code": run.exit_code,
                                                                     "output": run.stdout + run.stderr},
    ))
    return {"work": work, "run": run}


def _error_of(fn: Any) -> SeqpackError:
    try:
        fn()
    except SeqpackError as exc:
        return exc
    raise UsageError("expected the call to fail")


def line_field(line: int) -> AnswerField:
    """The 1-based line of a data file."""
    return tables.named_field("line", value=line)


def _log_tasks(ctx: GenContext) -> None:
    # 1. validate: offline alignment wrong for TP4/CP2/SP
    cfg = config_yaml({
        "model.tensor_model_parallel_size": 4, "model.context_parallel_size": 2, "model.sequence_parallel": True,
        "model.seq_length": 8192, "model.calculate_per_token_loss": True, "dataset.enable_offline_packing": True,
        "dataset.offline_packing_specs.packed_sequence_size": 8192, "dataset.offline_packing_specs.pad_seq_to_mult": 2,
        "train.global_batch_size": 8, "ddp.average_in_collective": False, "dist.world_size": 16,
    })
    report = ctx.validate(cfg)
    fields, forbidden, sentences = merge(facts_for(report))
    _log_task(
        ctx, "ctx-log-validate-tp4-cp2-sp", ["validate", "config.yaml"], {"config.yaml": cfg},
        "Our pre-launch check printed validate.log for config.yaml (both in this directory). What is wrong and "
        "what exactly should we change?",
        "The packs use the wrong per-sequence alignment. " + " ".join(sentences),
        [rule_ids_field(report.rule_ids)] + fields, forbidden + claims.path_claims(["offline", "context_parallel"]),
        ship=["config.yaml"], log_name="validate.log", paths=["offline", "context_parallel"],
        rule_ids=report.rule_ids, script="seqpack validate", expect_exit=1,
    )

    # 2-3. pack: malformed JSONL and a missing field (location comes from the raised error)
    good = _demo_subset(ctx, "prompt_completion", 3).read_text(encoding="utf-8").splitlines()
    broken = [good[0], good[1].replace('", "completion"', '" "completion"', 1), good[2]]
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    work = _workdir_with(ctx, "probe-json", {"train.jsonl": "\n".join(broken) + "\n"})
    err = _error_of(lambda: prepare_packed_dataset(str(work / "train.jsonl"), work / "out", pack_size=4096))
    problem = choice_field("problem", "malformed JSON", {
        "malformed JSON": (r"(?:no|missing|without(?: a)?|lacks(?: a)?) comma", r"comma (?:is )?missing", r"\bcomma\b",
                           r"\bdelimiter\b", r"\bmalformed\b", r"invalid JSON", r"(?:isn't|is not|not) valid JSON",
                           r"JSON syntax", r"syntax error"),
        "missing field": (r"missing (?:field|key)", r"\bno '?completion'? (?:field|key)\b"),
        "bad encoding": (r"\bencoding\b", r"\butf-?8\b", r"\bunicode\b"),
    }, anywhere=True, says="what is wrong with the line")
    _log_task(
        ctx, "ctx-log-pack-malformed-json", ["pack", "train.jsonl", "--out", "packed", "--pack-size", "4096"],
        {"train.jsonl": "\n".join(broken) + "\n"},
        "Packing our SFT data failed with pack.log. train.jsonl is here too. Where is the problem and how do we "
        "fix it?",
        f"train.jsonl line {err.line} is malformed JSON: a comma is missing between the prompt and completion "
        "fields; fix that line and rerun the packing.",
        [line_field(err.line), problem], claims.path_claims(["offline"]),
        ship=["train.jsonl"], log_name="pack.log", paths=["offline"], script="seqpack pack",
    )

    row = json.loads(good[2])
    row.pop("completion")
    lines = [good[0], good[1], json.dumps(row)]
    work = _workdir_with(ctx, "probe-field", {"train.jsonl": "\n".join(lines) + "\n"})
    err = _error_of(lambda: prepare_packed_dataset(str(work / "train.jsonl"), work / "out", pack_size=4096))
    def _absent(name: str) -> tuple[str, ...]:
        return (rf"(?:missing|lacks|has no|without|no)\s+(?:the\s+|a\s+|an\s+)?['\"]?{name}\b",
                rf"\b{name}['\"]?\s+(?:field\s+|key\s+)?(?:is\s+)?missing")

    missing = choice_field("missing_field", err.field or "completion",
                           {name: _absent(name) for name in ("completion", "prompt", "messages")},
                           anywhere=True, says="the missing field")
    _log_task(
        ctx, "ctx-log-pack-missing-field", ["pack", "train.jsonl", "--out", "packed", "--pack-size", "4096"],
        {"train.jsonl": "\n".join(lines) + "\n"},
        "pack.log shows why packing train.jsonl stopped. What is wrong with the data?",
        f"train.jsonl line {err.line} has no {err.field} field. Add the {err.field} to that row (or drop the "
        "row) and pack again.",
        [line_field(err.line), missing], claims.path_claims(["offline"]),
        ship=["train.jsonl"], log_name="pack.log", paths=["offline"], script="seqpack pack",
    )

    # 4. pack: pack size not a multiple of the derived alignment
    data = _demo_subset(ctx, "prompt_completion", DATA_ROWS)
    bad_size, cp = 4090, 2
    mult = derive_alignment(cp=cp).pad_seq_to_mult
    lo, hi = bad_size - bad_size % mult, round_up(bad_size, mult)
    _log_task(
        ctx, "ctx-log-pack-width", ["pack", "train.jsonl", "--out", "packed", "--pack-size", str(bad_size),
                                    "--cp", str(cp)],
        {"train.jsonl": data},
        "We are preparing packs for a context-parallel 2 run and got pack.log. Why, and what pack size should we "
        "use?",
        f"With CP={cp} every sequence is padded to a multiple of {mult}, so the pack size must be a multiple of "
        f"{mult} too; {bad_size} is not. Use {hi} (or {lo}), or the usual 4096.",
        [multiple_field("pack_size_multiple", r"(?:pack[_ -]size|packed[_ ]sequence[_ ]size)", mult,
                        says="the pack size must be a multiple of")],
        claims.path_claims(["offline", "context_parallel"]),
        log_name="pack.log", paths=["offline", "context_parallel"],
        rule_ids=["PACK-OFFLINE-WIDTH-ALIGNED"], script="seqpack pack",
    )

    # 5. pack: per-sample cap larger than the pack
    _log_task(
        ctx, "ctx-log-pack-max-seq", ["pack", "train.jsonl", "--out", "packed", "--pack-size", "4096",
                                      "--max-seq-length", "8192"],
        {"train.jsonl": data},
        "pack.log is from our packing job. What does the error mean?",
        "The per-sample cap max_seq_length=8192 exceeds the pack size 4096; a sample can never be longer than the "
        "pack. Lower --max-seq-length to at most 4096 (or drop it), or raise --pack-size.",
        [int_field("max_seq_length_limit", 4096,
                   r"max[_ -]seq[_ -]length[^.\n]{0,30}?(?:at most|<=|≤|no (?:larger|more|bigger) than|not exceed)",
                   r"(?:at most|no (?:larger|more|bigger) than)", says="the largest allowed --max-seq-length")],
        claims.path_claims(["offline"]),
        log_name="pack.log", paths=["offline"], rule_ids=["PACK-OFFLINE-MAX-SINGLE-LE-PACK"],
        script="seqpack pack",
    )

    # 6. batches: in-batch with the batch dataloader
    chat = _demo_subset(ctx, "chat", 32)
    report = ctx.validate(None, ["dataset.enable_in_batch_packing=true", "train.micro_batch_size=4",
                                    "dataset.dataloader_type=batch"])
    fields, forbidden, sentences = merge(facts_for(report))
    _log_task(
        ctx, "ctx-log-batches-dataloader", ["batches", "chat.jsonl", "--mbs", "4", "--seq-length", "2048",
                                            "--dataloader", "batch"],
        {"chat.jsonl": chat},
        "We tried to preview the runtime packed micro-batches of chat.jsonl and got batches.log. Explain and fix.",
        " ".join(sentences), fields, forbidden + claims.path_claims(["in_batch"]),
        log_name="batches.log", paths=["in_batch"], rule_ids=report.rule_ids, script="seqpack batches",
        expect_exit=1,
    )

    # 7. batches: seq_length not divisible by 2*CP
    cp = 2
    _log_task(
        ctx, "ctx-log-batches-seq-cp", ["batches", "chat.jsonl", "--mbs", "4", "--seq-length", "1022", "--cp",
                                        str(cp), "--pad-to-max-length"],
        {"chat.jsonl": chat},
        "Why does batches.log refuse our fixed-width in-batch setup with context parallel 2?",
        f"With CP={cp} the sequence length must be a multiple of 2*CP = {2 * cp}; 1022 is not. Use 1020 or 1024.",
        [multiple_field("seq_length_multiple", r"seq(?:uence)?[_ ]length", 2 * cp,
                        says="the sequence length must be a multiple of")],
        claims.path_claims(["in_batch", "context_parallel"]),
        log_name="batches.log", paths=["in_batch", "context_parallel"], rule_ids=["CP-SEQ-DIVISIBLE"],
        script="seqpack batches", expect_exit=1,
    )

    # 8. inspect: packs built with pad 1 checked for CP=2
    packs1 = _packs(ctx, 1)
    need = derive_alignment(cp=2).pad_seq_to_mult
    _log_task(
        ctx, "ctx-log-inspect-cp2", ["inspect", "packs", "--cp", "2"], {"packs": packs1},
        "We want to train on the packs in packs/ with context parallel 2. inspect.log is what the checker said. "
        "Can we use them, and if not, what do we do?",
        f"No: the packs were built with pad_seq_to_mult 1, but CP=2 needs every sequence to be a multiple of {need}, "
        f"so they are not usable. Repack the data with pad_seq_to_mult = {need}.",
        [usable_field("usable_with_cp2", False, r"\bpacks\b", r"\bthey\b", says="the packs are usable with CP=2"),
         pad_field(need)],
        [claims.usable_with_cp(2), claims.reuse_packs(), claims.pad_mult(1)] + claims.path_claims(["offline"]),
        ship=["packs"], log_name="inspect.log", paths=["offline", "context_parallel"],
        script="seqpack inspect", expect_exit=1,
    )

    # 9. unknown key in a config (a typo)
    cfg = config_yaml({"model.context_parallel_size": 2, "model.calculate_per_token_loss": True,
                       "dataset.enable_offline_packing": True})
    cfg = cfg.replace("enable_offline_packing: true\n",
                      "enable_offline_packing: true\n  offline_packing_spec:\n    packed_sequence_size: 4096\n"
                      "    pad_seq_to_mult: 4\n")
    key = choice_field("correct_key", "offline_packing_specs", {
        "offline_packing_specs": (r"(?:\bto|should be|\bis|:)\s+['\"]?(?:dataset\.)?offline_packing_specs\b",),
        "offline_packing_spec": (r"(?:\bto|should be|\bis|:)\s+['\"]?(?:dataset\.)?offline_packing_spec\b(?!s)",),
    }, anywhere=True, says="the right key name", hint="<key name>")
    _log_task(
        ctx, "ctx-log-config-typo", ["validate", "config.yaml"], {"config.yaml": cfg},
        "validate.log came from checking config.yaml. What is the problem?",
        "The key offline_packing_spec is a typo (unknown key): rename it to offline_packing_specs.",
        [key], claims.path_claims(["offline"]),
        ship=["config.yaml"], log_name="validate.log", paths=["offline"], script="seqpack validate",
    )

    # 10. stale or foreign output directory
    from seqpack.packing.offline.prepare import prepare_packed_dataset as _prep

    probe = _workdir_with(ctx, "probe-stale", {"train.jsonl": data})
    root = _prep(str(probe / "train.jsonl"), probe / "packed", pack_size=2048, pad_seq_to_mult=4).pack_dir
    stale = {"train.jsonl": data, f"packed/{root.name}/notes.txt": "half-written copy from an interrupted job\n"}
    # seqpack never deletes a directory it did not write (no manifest), not even with --overwrite
    fix = choice_field("fix", "remove or move the directory", {
        "remove or move the directory": (r"(?:remove|delete|move)[^.\n]{0,60}(?:director|folder|output)",),
        "change the data": (r"(?:fix|edit|repair)[^.\n]{0,20}(?:data|jsonl|train\.jsonl)",),
        "change the pack size": (r"(?:change|lower|raise)[^.\n]{0,20}pack[ -]size",),
    }, anywhere=True, says="what to do")
    _log_task(
        ctx, "ctx-log-stale-output", ["pack", "train.jsonl", "--out", "packed", "--pack-size", "2048", "--cp", "2"],
        stale,
        "Re-running our packing step gave pack.log. What happened and what should we do?",
        "The fingerprinted output directory already exists but holds no seqpack manifest (left over from an "
        "interrupted or different job), so seqpack cannot tell it wrote it and will not delete it, not even "
        "with --overwrite. Move or remove that directory, then rerun.",
        [fix], claims.path_claims(["offline"]),
        log_name="pack.log", paths=["offline"], script="seqpack pack",
    )

    # 11. a training step: CP partition of a pack built with pad 1
    _cp_partition_task(ctx, packs1)


def rebuild_field() -> AnswerField:
    """Whether the packs have to be rebuilt."""
    return tables.named_field("rebuild_packs", value=True)


def _cp_partition_task(ctx: GenContext, packs: Path) -> None:
    from seqpack.packing.packed_dataset import PackedParquetDataset
    from seqpack.training.context_parallel import slice_thd_batch_for_cp

    ds = PackedParquetDataset(packs)
    batch = ds.collate([ds[0]])
    err = _error_of(lambda: slice_thd_batch_for_cp(batch, 2, 0))
    log = (
        "# context-parallel training step, rank 0 of CP=2, first packed row of packs/\n"
        ">>> from seqpack.packing.packed_dataset import PackedParquetDataset\n"
        ">>> from seqpack.training.context_parallel import slice_thd_batch_for_cp\n"
        ">>> ds = PackedParquetDataset('packs')\n"
        ">>> batch = ds.collate([ds[0]])\n"
        ">>> slice_thd_batch_for_cp(batch, cp_size=2, cp_rank=0)\n"
        "Traceback (most recent call last):\n"
        "  ...\n"
        f"seqpack.core.errors.{type(err).__name__}: {err}\n"
    )
    need = derive_alignment(cp=2).pad_seq_to_mult
    task_id = "ctx-log-cp-partition"
    files = [ctx.put_text(task_id, "train.log", log)]
    ctx.add(make_task(
        task_id, "contextual",
        "Our first context-parallel (CP=2) step crashed; train.log has the error. Explain the cause and the fix.",
        f"Every packed sequence must have a physical length divisible by 2*CP = {need}, but the packs were built "
        f"without that alignment. Rebuild the packs with pad_seq_to_mult = {need} (derived from the topology).",
        [pad_field(need), rebuild_field()],
        [claims.reuse_packs(), claims.pad_mult(1)] + claims.path_claims(["offline", "context_parallel"]),
        script="seqpack align", command=["align", "--cp", "2"], files=files, paths=["offline", "context_parallel"],
        topics=["diagnosis"], truth={"error": err.to_dict()},
    ))


# ------------------------------------------------------------------------------------------------
# Artifacts and data
# ------------------------------------------------------------------------------------------------

def _topology_choices() -> list[tuple[str, dict[str, Any], str]]:
    """(label, topology, words) of the options of ctx-packs-topologies (``contextual.yaml``)."""
    return [(r["label"], r["topology"], r["words"])
            for r in tables.rows("contextual", "topology_choices", ("label", "topology", "words"),
                                 types={"topology": dict})]


def stats_fields(s: dict[str, Any], *, intact: bool | None = None) -> list[AnswerField]:
    """Pack, sequence and efficiency counts of an inspect report."""
    out = [
        count_field("packs", s["rows"], "packs", "packed rows", "rows", "bins", says="number of packs"),
        count_field("sequences", s["segments"], "sequences", "samples", "segments", says="number of sequences"),
        percent_field("packing_efficiency", 100 * s["packing_efficiency"], r"(?:packing )?efficiency",
                      r"of the token slots", says="packing efficiency"),
        int_field("max_sequences_per_pack", s["sequences_per_pack"]["max"], r"\bat most\b", r"\bup to\b",
                  r"fullest pack (?:has|holds)", r"max(?:imum)?(?: number of)? sequences(?: in one pack| per pack)?",
                  says="most sequences in one pack"),
    ]
    if intact is not None:
        out.append(tables.named_field("intact", value=intact))
    return out


def _artifact_tasks(ctx: GenContext) -> None:
    from seqpack.verbs.inspection import Topology, inspect_packed_dataset

    packs4 = _packs(ctx, 4)
    # which topologies can train on packs built with pad_seq_to_mult=4
    task_id = "ctx-packs-topologies"
    files = ctx.put_tree(task_id, "packs", packs4)
    lines, verdicts, fields = [], {}, []
    forbidden: list[Forbidden] = []
    choices = _topology_choices()
    for label, topo, words in choices:
        rep = inspect_packed_dataset(packs4, Topology(**topo))
        t = rep.topology or {}
        usable = bool(t["usable"])
        verdicts[label] = {"topology": topo, "usable": usable, "reasons": t["reasons"], "required": t["required"],
                           "recommended": t["recommended"], "recommended_met": t["recommended_met"]}
        fields.append(usable_field(label, usable, rf"(?<![\w]){label}\s*[:)\-]", says=f"option {label} ({words})"))
        if not usable and topo["tp"] == 1:
            forbidden.append(claims.usable_with_cp(topo["cp"]))
        lines.append(f"{label}: {'usable' if usable else 'not usable'} ({words}; megatron-bridge 0.6.2 needs "
                     f"multiples of {t['required']} per sequence and a width multiple of {t['required_width']}; "
                     f"recommended {t['recommended']})")
    ctx.add(make_task(
        task_id, "contextual",
        "packs/ holds pre-built packed Parquet data. Which of these topologies can train on it as it is? "
        + "; ".join(f"{label}) {words}" for label, _, words in choices) + ".",
        "\n".join(lines),
        fields, forbidden + [claims.reuse_packs()] + claims.path_claims(["offline"]),
        script="seqpack inspect", command=["inspect", "packs", "--tp", "4", "--cp", "2", "--sp"], files=files,
        paths=["offline", "context_parallel"], topics=["inspection", "alignment"], truth={"verdicts": verdicts},
    ))

    # statistics of the same packs
    rep = inspect_packed_dataset(packs4)
    s = rep.stats
    task_id = "ctx-packs-stats"
    files = ctx.put_tree(task_id, "packs", packs4)
    ctx.add(make_task(
        task_id, "contextual",
        "Summarise the packed dataset in packs/: how many packs and sequences, the packing efficiency (as a "
        "percentage), and the maximum number of sequences in one pack. Is the data intact?",
        f"{s['rows']} packs holding {s['segments']} sequences; packing efficiency {s['packing_efficiency']:.2%}; "
        f"at most {s['sequences_per_pack']['max']} sequences per pack; no integrity issues.",
        stats_fields(s, intact=rep.ok),
        [claims.usable_with_cp(4)] + claims.path_claims(["offline"]),
        script="seqpack inspect", command=["inspect", "packs"], files=files, paths=["offline"],
        topics=["inspection"], truth={"stats": s, "ok": rep.ok},
    ))

    # a foreign artifact with loss on a segment's last token
    _corrupt_artifact_task(ctx)

    # pack a JSONL file for CP=2
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    data = _demo_subset(ctx, "prompt_completion", DATA_ROWS)
    pad = derive_alignment(cp=2).pad_seq_to_mult
    work = _workdir_with(ctx, "pack-cp2", {"train.jsonl": data})
    with contextlib.chdir(work):  # the manifest records the relative source name
        prepared = prepare_packed_dataset("train.jsonl", "packed", pack_size=PACK_SIZE, pad_seq_to_mult=pad)
    split = prepared.manifest["splits"]["training"]
    acc = split["accounting"]
    eff = split["aligned_tokens"] / split["token_slots"]
    task_id = "ctx-pack-jsonl-cp2"
    files = [ctx.put_file(task_id, "train.jsonl", data)]
    ctx.add(make_task(
        task_id, "contextual",
        f"Pack train.jsonl offline into {PACK_SIZE}-token rows for a context-parallel 2 run (byte tokenizer, "
        "defaults otherwise). Report the per-sequence alignment you used, how many packs came out, how many "
        "samples were truncated, and the packing efficiency as a percentage.",
        f"Packed with pad_seq_to_mult = {pad} (2*CP): {acc['rows_in']} rows became {split['packs']} packs, "
        f"{acc['truncated']} truncated, packing efficiency {eff:.2%}.",
        [pad_field(pad), count_field("packs", split["packs"], "packs", "packed rows", "bins", says="number of packs"),
         int_field("truncated", acc["truncated"], r"\btruncated\b", says="samples truncated"),
         percent_field("packing_efficiency", 100 * eff, r"(?:packing )?efficiency", says="packing efficiency")],
        [claims.pad_mult(1)] + claims.path_claims(["offline", "context_parallel"]),
        script="seqpack pack", command=["pack", "train.jsonl", "--out", "packed", "--pack-size", str(PACK_SIZE),
                                        "--cp", "2"],
        files=files, paths=["offline", "context_parallel"], topics=["packing", "alignment"], truth={"split": split},
    ))

    # runtime in-batch padding of chat data
    _in_batch_task(ctx)


def _corrupt_artifact_task(ctx: GenContext) -> None:
    """Packs whose stored loss mask is 1 on some segments' last token, as Megatron-Bridge's legacy prompt-template
    preparation writes them: Bridge's packed reader never reads that position (inspect counts it, no issue), so
    the packs are safe; an agent that calls them broken throws good packs away (issue 32, item 1)."""
    import numpy as np

    from seqpack.verbs.inspection import inspect_packed_dataset
    from seqpack.packing.parquet import PackedParquetReader, write_packed_parquet

    reader = PackedParquetReader(_packs(ctx, 1))
    rows = []
    try:
        for index, row in reader.iter_rows():
            row = {k: np.array(v) for k, v in row.items()}
            if index in (2, 5):  # the packer keeps a 1 on the last stored token of the first segment
                end = int(row["seq_start_id"][1]) - 1 if row["seq_start_id"].size > 1 else row["input_ids"].size - 1
                row["loss_mask"][end] = 1
            rows.append(row)
    finally:
        reader.close()
    work = ctx.work("custom-packs")
    write_packed_parquet(rows, work / "training.parquet")
    rep = inspect_packed_dataset(work / "training.parquet", pack_size=PACK_SIZE)
    marked = int(rep.stats["loss_on_segment_end"])
    if not rep.ok or marked != 2:
        raise UsageError("the packs with a stored 1 on two segments' last token must inspect clean, counting both")
    task_id = "ctx-packs-loss-mask"
    files = [ctx.put_file(task_id, "packs/training.parquet", work / "training.parquet")]
    ctx.add(make_task(
        task_id, "contextual",
        f"A colleague's custom packer wrote packs/training.parquet (Megatron-Bridge packed Parquet layout, pack size "
        f"{PACK_SIZE}, no seqpack manifest). Some segments store loss_mask = 1 on their last token. Is it safe to "
        "train on with Megatron-Bridge's packed reader? How many segments store a 1 there?",
        f"Safe: {marked} segments store loss_mask = 1 on their last stored token, but Megatron-Bridge's packed "
        "reader cuts every segment at its last token (inputs ids[s:e-1], labels ids[s+1:e]) and never reads the "
        "mask there, so nothing outside a sequence is trained (Bridge's own legacy prompt-template packs look like "
        "this). `seqpack inspect` counts them in loss_on_segment_end and reports no issue.",
        [yes_no_field("safe_to_train", True, [r"(?<!not )(?<!un)\bsafe to train\b", r"\bfine to train\b", r"\bis safe\b"],
                      [r"\bnot safe\b", r"\bunsafe\b", r"\bnot fine\b", r"\bdo not train\b"], anywhere=True,
                      says="safe to train on"),
         int_field("segments_with_loss_on_last_token", marked, r"segments?", says="segments that store a 1 on their "
                   "last token")],
        [claims.claim("usable_packs_rebuilt"), claims.claim("usable_packs_unsafe")] + claims.path_claims(["offline"]),
        script="seqpack inspect", command=["inspect", "packs/training.parquet", "--pack-size", str(PACK_SIZE)],
        files=files, paths=["offline"], topics=["inspection", "diagnosis"],
        truth={"issues": rep.issues, "issue_count": rep.issue_count, "loss_on_segment_end": marked,
               "reader": rep.stats["reader"]},
    ))


def _in_batch_task(ctx: GenContext) -> None:
    from seqpack.packing.in_batch_report import in_batch_config, inspect_in_batch

    chat = _demo_subset(ctx, "chat", 32)
    cfg = in_batch_config(micro_batch_size=4, seq_length=2048, cp=2)
    quiet = logging.getLogger("seqpack.packing")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the expected truncation notices are not news during a build
    try:
        rep = inspect_in_batch(str(chat), cfg, num_batches=2)
    finally:
        quiet.setLevel(level)
    t = rep.totals
    task_id = "ctx-in-batch-padding"
    files = [ctx.put_file(task_id, "chat.jsonl", chat)]
    mult = rep.alignment["pad_seq_to_mult"]
    ctx.add(make_task(
        task_id, "contextual",
        "We will concatenate the rows of each micro-batch of chat.jsonl at collate time: micro-batch size 4, "
        "sequence length 2048, context parallel 2 (byte tokenizer). For the first two micro-batches, what "
        "per-sequence multiple is used, how many real tokens are there, and how many alignment padding tokens "
        "are added?",
        f"Each sequence is padded to a multiple of {mult} ({rep.alignment['explanation']}). The first 2 "
        f"micro-batches hold {t.real_tokens} real tokens and {t.alignment_padding} alignment padding tokens "
        f"(padding share {t.padding_share:.2%}).",
        [pad_field(mult, "per_sequence_multiple"),
         count_field("real_tokens", t.real_tokens, "real tokens", says="real tokens"),
         count_field("alignment_padding_tokens", t.alignment_padding, "alignment padding tokens",
                     "alignment padding", "padding tokens", says="alignment padding tokens")],
        claims.path_claims(["in_batch", "context_parallel"]),
        script="seqpack batches", command=["batches", "chat.jsonl", "--mbs", "4", "--seq-length", "2048", "--cp", "2",
                                           "--num-batches", "2"],
        files=files, paths=["in_batch", "context_parallel"],
        topics=["packing", "alignment"], truth={"totals": t.to_dict(), "alignment": rep.alignment},
    ))


def build(ctx: GenContext) -> None:
    """Add the contextual tasks to ``ctx``."""
    _config_tasks(ctx)
    _launch_check_tasks(ctx)
    _log_tasks(ctx)
    _artifact_tasks(ctx)


__all__ = ["build", "dp_field", "pad_field", "stats_fields", "usable_field", "valid_field"]
