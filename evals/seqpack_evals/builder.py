"""Task-building helpers shared by the dataset templates: the build context and the task constructor.

``templates_*`` modules import this module (never :mod:`~seqpack_evals.dataset`,
which imports them), so the package has no import circle. :func:`make_task` builds a task and
:meth:`GenContext.add` checks it (:func:`finish_task`) before it joins the dataset.

Adding a task: in a template's ``build(ctx)``, compute the truth, describe it as answer fields
(:mod:`~seqpack_evals.fields`), pick forbidden claims
(:mod:`~seqpack_evals.claims`) and call ``ctx.add(make_task(...))``. The guards in
:func:`finish_task` reject a task whose reference answer does not grade 100 %, whose prose
contradicts its own block, whose fields cannot fail, or whose forbidden claims cannot fire (or
fire on the reference answer, the prompt or the task files).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from seqpack.config.rules import RULES_BY_ID
from seqpack.core.errors import UsageError
from seqpack_evals.answers import forbidden_hits, grade_answer
from seqpack_evals.fields import AnswerField, answer_block, prompt_footer
from seqpack_evals.tasks import SCRIPTS, SKILL_NAME, Forbidden, Task

TEXT_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".log", ".txt", ".md", ".py")


@dataclass
class GenContext:
    """Where a build writes task files, plus a scratch folder for running the code."""

    files_root: Path
    scratch: Path
    texts: dict[str, str] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    pending_version: tuple[str, list[str]] | None = None
    pending_config: Any = None
    #: megatron-bridge 0.6.2's verdict per task (``evals/bridge_verdicts.json``, written through the upstream lane
    #: by ``python -m seqpack_evals.verdicts``); ``collect`` records the configs that need one instead
    verdicts: dict[str, Any] | None = None
    collect: dict[str, Any] | None = None

    def put_text(self, task_id: str, name: str, text: str) -> str:
        """Write ``files/<task_id>/<name>``; returns the path relative to ``evals/``."""
        rel = f"files/{task_id}/{name}"
        target = self.files_root.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.texts[rel] = text
        return rel

    def put_file(self, task_id: str, name: str, source: Path) -> str:
        """Copy ``source`` to ``files/<task_id>/<name>`` (text files are also kept for the checks)."""
        rel = f"files/{task_id}/{name}"
        target = self.files_root.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        if target.suffix in TEXT_SUFFIXES:
            self.texts[rel] = target.read_text(encoding="utf-8")
        return rel

    def put_tree(self, task_id: str, name: str, source: Path) -> list[str]:
        """Copy every file of the directory ``source`` to ``files/<task_id>/<name>/``, sorted."""
        return [
            self.put_file(task_id, f"{name}/{p.relative_to(source).as_posix()}", p)
            for p in sorted(source.rglob("*"))
            if p.is_file()
        ]

    def work(self, name: str) -> Path:
        """A fresh scratch directory for running code."""
        path = self.scratch / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def validate(self, config: Any = None, overrides: Sequence[Any] = ()) -> Any:
        """``validate_config`` for the Megatron-Bridge the config's features exist in: megatron-bridge 0.6.2, or
        Bridge ``main`` when the config uses a feature no release has (GPT-SFT in-batch, Energon native packing,
        global-batch packing). The next task added says which (:func:`for_bridge_main`)."""
        from seqpack.config.load import load_config
        from seqpack.config.validate import validate_config, version_target

        cfg = load_config(config, list(overrides))
        target, lacking = version_target(cfg)
        self.pending_version = (target, lacking)
        self.pending_config = cfg
        return validate_config(cfg, bridge_version=target)

    def add(self, task: Task) -> Task:
        """Check ``task`` (see :func:`finish_task`) and append it (noting Bridge main when its config needs it)."""
        pending, self.pending_version = self.pending_version, None
        config, self.pending_config = self.pending_config, None
        if pending is not None and pending[0] == "main":
            task = for_bridge_main(task, pending[1])
        elif config is not None and task.bucket != "explicit" and any(
                f.name == "rule_ids" or f.name.startswith("severity_") for f in task.answer_fields):
            task = with_bridge_verdict(task, config, self)
        finish_task(task, self.texts)
        self.tasks.append(task)
        return task


def make_task(
    task_id: str,
    bucket: str,
    question: str,
    prose: str,
    fields: Sequence[AnswerField],
    forbidden: Iterable[Forbidden],
    *,
    assertions: Sequence[str] = (),
    script: str | None = None,
    command: Sequence[str] | None = None,
    files: Iterable[str] = (),
    paths: Iterable[str] = (),
    topics: Iterable[str] = (),
    rule_ids: Iterable[str] = (),
    truth: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
) -> Task:
    """A task: the prompt is ``question`` plus the answer-block request, the reference answer is
    ``prose`` plus the filled block; assertions are one per field plus ``assertions``; rule families
    are derived from ``rule_ids`` through the registry."""
    rule_ids = list(dict.fromkeys(rule_ids))
    unknown = [r for r in rule_ids if r not in RULES_BY_ID]
    if unknown:
        raise UsageError(f"task {task_id}: unknown rule id(s) {unknown}", field="rule_ids")
    families = list(dict.fromkeys(RULES_BY_ID[r].family for r in rule_ids))
    fields = list(fields)
    said = [f"{f.says or f.name}: {f.display()}" for f in fields]
    return Task(
        id=task_id,
        bucket=bucket,
        prompt=question.strip() + "\n\n" + prompt_footer(fields),
        expected_output=prose.strip() + "\n\n" + answer_block(fields),
        assertions=said + list(assertions),
        answer_fields=fields,
        forbidden=list(dict.fromkeys(forbidden)),
        expected_skill=None if bucket == "near_miss" else SKILL_NAME,
        expected_script=script,
        files=list(files),
        reference_command=None if command is None else ["seqpack", *command],
        source=source or {"kind": "seqpack"},
        paths=list(dict.fromkeys(paths)),
        families=families,
        topics=list(dict.fromkeys(topics)),
        rule_ids=rule_ids,
        ground_truth=truth or {},
    )


def wrong_value(f: AnswerField) -> Any:
    """A value of ``f`` that must grade wrong (the negative control of a field)."""
    if f.kind == "int":
        return int(f.value) + max(1, int(f.tolerance) + 1, int(abs(f.value) * f.rel_tolerance) + 1)
    if f.kind in ("number", "percent"):
        return float(f.value) + f.tolerance + max(1.0, abs(float(f.value)) * f.rel_tolerance * 2)
    if f.kind == "choice":
        return next(o for o in f.options if o != f.value)
    extra = [o for o in f.options if o not in f.value]
    return tuple(f.value) + (extra[0],) if extra else tuple(f.value)[:-1]


def finish_task(task: Task, texts: dict[str, str]) -> None:
    """Raise when the task is malformed or its grading disagrees with its own reference answer.

    Guards: the reference answer grades every field right and trips no forbidden claim; its prose
    alone (block removed) contradicts no field; a block with a wrong value of any field grades that
    field wrong; every forbidden example trips its own check; no forbidden check fires on the
    prompt or the task's text files.
    """
    problems = task.problems()
    if problems:
        raise UsageError(f"task {task.id}: {problems[0][1]}", field=problems[0][0])
    if task.expected_script is not None and task.reference_command is not None:
        if task.reference_command[1] not in SCRIPTS[task.expected_script]["cli"]:
            raise UsageError(f"task {task.id}: reference_command {task.reference_command[1]!r} is not "
                             f"{task.expected_script}", field="reference_command")
    fields = task.answer_fields
    for result in grade_answer(fields, task.expected_output):
        if not result.correct:
            raise UsageError(f"task {task.id}: the reference answer grades {result.name} wrong ({result.reason})",
                             field="answer_fields")
    prose = task.expected_output.rsplit("```answer", 1)[0]
    for result in grade_answer(fields, prose):
        if not result.correct and result.reason not in ("not answered",) and not result.reason.startswith("misses"):
            raise UsageError(f"task {task.id}: the reference prose contradicts {result.name} ({result.reason})",
                             field="expected_output")
    for f in fields:
        probe = answer_block([f], {f.name: wrong_value(f)})
        (result,) = grade_answer([f], probe)
        if result.correct:
            raise UsageError(f"task {task.id}: field {f.name} grades {wrong_value(f)!r} right", field="answer_fields")
    checks = [fb.check for fb in task.forbidden]
    hit = forbidden_hits(checks, task.expected_output)
    if hit:
        raise UsageError(f"task {task.id}: the reference answer contains forbidden {next(iter(hit.values()))!r}",
                         field="forbidden")
    for fb in task.forbidden:
        if fb.check not in forbidden_hits([fb.check], fb.example):
            raise UsageError(f"task {task.id}: forbidden example {fb.example!r} does not trip its check",
                             field="forbidden")
    context = [task.prompt] + [texts[f] for f in task.files if f in texts]
    for text in context:
        hit = forbidden_hits(checks, text)
        if hit:
            raise UsageError(f"task {task.id}: forbidden {next(iter(hit))!r} matches the task's own prompt or files",
                             field="forbidden")


MAIN_NOTE = "(This job runs a Megatron-Bridge build from main, not the 0.6.2 release.) "


def for_bridge_main(task: Task, lacking: Sequence[str]) -> Task:
    """``task`` marked as resting on Bridge main: the prompt says so, the source names the commit or pull request
    of each feature no release has (``lacking``: the release's rules that refuse them), and a ``seqpack validate``
    reference command targets main."""
    from seqpack.config.features import FEATURES

    rests = [f"{f.title}: {f.availability['main']}" for f in FEATURES if set(f.rules) & set(lacking)]
    command = task.reference_command
    if command and command[1] == "validate" and "--bridge-version" not in command:
        command = [*command, "--bridge-version", "main"]
    source = {**task.source, "bridge_version": "main", "rests_on": "; ".join(rests) or "Bridge main"}
    return replace(task, prompt=MAIN_NOTE + task.prompt, source=source, reference_command=command)


VERDICTS_FILE = "bridge_verdicts.json"


def load_verdicts() -> dict[str, Any]:
    """``evals/bridge_verdicts.json``: task id -> megatron-bridge 0.6.2's verdict on the task's config."""
    import json

    from seqpack_evals.tasks import default_evals_dir

    path = default_evals_dir() / VERDICTS_FILE
    return json.loads(path.read_text(encoding="utf-8"))["verdicts"] if path.is_file() else {}


def with_bridge_verdict(task: Task, config: Any, ctx: "GenContext") -> Task:
    """A diagnosis task whose config is for megatron-bridge 0.6.2, graded on what upstream does instead of seqpack's
    own labels: the rule-id and severity fields give way to ``bridge_accepts`` (does 0.6.2's
    ``runtime_config_update`` start it?), recorded from the upstream lane; the fix fields stay."""
    from seqpack_evals.fields import answer_block, prompt_footer, yes_no_field

    if ctx.collect is not None:
        ctx.collect[task.id] = config.to_dict()
        return task
    verdicts = ctx.verdicts if ctx.verdicts is not None else load_verdicts()
    verdict = verdicts.get(task.id)
    if verdict is None or verdict.get("config") != config.to_dict():
        raise UsageError(f"task {task.id}: no megatron-bridge 0.6.2 verdict for its config in evals/{VERDICTS_FILE}",
                         field="bridge_accepts", fix="run: python -m seqpack_evals.verdicts (needs the "
                         "upstream lane)")
    accepts = not verdict["raises"]
    field = yes_no_field(
        "bridge_accepts", accepts,
        [r"(?<!not )(?<!n't )\b(?:accepts|starts|passes)\b", r"\bis accepted\b", r"\bstarts? (?:fine|normally)\b"],
        [r"\b(?:rejects|refuses|raises)\b", r"\b(?:is |gets )?(?:rejected|refused)\b", r"\bfails at start-?up\b",
         r"\bwon't start\b", r"\bwill not start\b", r"\bnot accepted\b"],
        anywhere=True, says="megatron-bridge 0.6.2 starts it (runtime_config_update passes)")
    fields = [f for f in task.answer_fields if f.name != "rule_ids" and not f.name.startswith("severity_")] + [field]
    question = task.prompt.split("\n\nFinish your reply with a fenced block", 1)[0]
    prose = task.expected_output.rsplit("```answer", 1)[0].strip()
    if accepts:  # seqpack's framing of its own finding is not what upstream does at start-up
        prose = prose.replace("This config is rejected:", "seqpack validate flags it:")
    said = (f"megatron-bridge 0.6.2 refuses it at start-up ({verdict['type']}: {verdict['message']})." if not accepts
            else "megatron-bridge 0.6.2 starts it (its runtime_config_update passes); what goes wrong happens later.")
    source = {**task.source, "verdict": f"megatron-bridge==0.6.2 runtime_config_update, recorded in evals/{VERDICTS_FILE}"}
    said_fields = [f"{f.says or f.name}: {f.display()}" for f in fields]
    return replace(task, prompt=question + "\n\n" + prompt_footer(fields),
                   expected_output=prose + "\n" + said + "\n\n" + answer_block(fields), answer_fields=fields,
                   assertions=said_fields + [a for a in task.assertions if a not in said_fields and ":" not in a[:40]],
                   source=source, ground_truth={**task.ground_truth, "bridge": {**verdict}})


def paths_of(report: Any, extra: Sequence[str] = ()) -> list[str]:
    """Packing paths a validation report covers (plus ``context_parallel`` when CP > 1)."""
    path = report.resolved["packing_path"]
    paths = [path] if isinstance(path, str) and path != "none" else list(path) if isinstance(path, list) else []
    if report.resolved["alignment"]["cp"] > 1:
        paths.append("context_parallel")
    return list(dict.fromkeys([*paths, *extra]))


def override_args(overrides: dict[str, Any] | Sequence[str]) -> list[str]:
    """``--set KEY=VALUE`` arguments for dotted overrides (a dict, values written as YAML flow scalars, or
    ``KEY=VALUE`` strings passed through)."""
    import json

    if isinstance(overrides, dict):
        items = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()]
    else:
        items = list(overrides)
    return [w for item in items for w in ("--set", item)]


def with_source(task: Task, **source: Any) -> Task:
    """``task`` with ``source`` replaced (for templates that record an upstream origin)."""
    return replace(task, source=dict(source))


__all__ = ["GenContext", "MAIN_NOTE", "VERDICTS_FILE", "for_bridge_main", "load_verdicts", "with_bridge_verdict", "TEXT_SUFFIXES", "finish_task", "make_task", "override_args", "paths_of", "with_source",
           "wrong_value"]
