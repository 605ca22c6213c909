"""Task-building helpers shared by the dataset templates: the build context and the task constructor.

``templates_*`` modules import this module (never :mod:`~reference_impl.evaluation.dataset`,
which imports them), so the package has no import circle. :func:`make_task` builds a task and
:meth:`GenContext.add` checks it (:func:`finish_task`) before it joins the dataset.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from reference_impl.config.rules import RULES_BY_ID
from reference_impl.errors import UsageError
from reference_impl.evaluation.checks import Checks, normalise, run_checks
from reference_impl.evaluation.tasks import SKILL_NAME, Task

TEXT_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".log", ".txt", ".md", ".py")


@dataclass
class GenContext:
    """Where a build writes task files, plus a scratch folder for running the code."""

    files_root: Path
    scratch: Path
    texts: dict[str, str] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)

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

    def add(self, task: Task) -> Task:
        """Check ``task`` (see :func:`finish_task`) and append it."""
        finish_task(task, self.texts)
        self.tasks.append(task)
        return task


def make_task(
    task_id: str,
    bucket: str,
    prompt: str,
    answer: str,
    assertions: Sequence[str],
    checks: Checks,
    *,
    script: str | None = None,
    files: Iterable[str] = (),
    paths: Iterable[str] = (),
    topics: Iterable[str] = (),
    rule_ids: Iterable[str] = (),
    truth: dict[str, Any] | None = None,
) -> Task:
    """A task; rule families are derived from ``rule_ids`` through the registry."""
    rule_ids = list(dict.fromkeys(rule_ids))
    unknown = [r for r in rule_ids if r not in RULES_BY_ID]
    if unknown:
        raise UsageError(f"task {task_id}: unknown rule id(s) {unknown}", field="rule_ids")
    families = list(dict.fromkeys(RULES_BY_ID[r].family for r in rule_ids))
    return Task(
        id=task_id,
        bucket=bucket,
        prompt=prompt.strip(),
        expected_output=answer.strip(),
        assertions=list(assertions),
        required=list(checks.required),
        forbidden=list(checks.forbidden),
        expected_skill=None if bucket == "near_miss" else SKILL_NAME,
        expected_script=script,
        files=list(files),
        paths=list(dict.fromkeys(paths)),
        families=families,
        topics=list(dict.fromkeys(topics)),
        rule_ids=rule_ids,
        ground_truth=truth or {},
    )


def finish_task(task: Task, texts: dict[str, str]) -> None:
    """Raise when the task is malformed or its checks disagree with its own reference answer."""
    problems = task.problems()
    if problems:
        raise UsageError(f"task {task.id}: {problems[0][1]}", field=problems[0][0])
    result = run_checks(task.required, task.forbidden, task.expected_output)
    if result.required_missing:
        raise UsageError(f"task {task.id}: the reference answer misses required {result.required_missing[0]!r}",
                         field="required")
    if result.forbidden_found:
        first = next(iter(result.forbidden_found))
        raise UsageError(f"task {task.id}: the reference answer contains forbidden {first!r}", field="forbidden")
    context = [task.prompt] + [texts[f] for f in task.files if f in texts]
    for check in task.forbidden:
        for text in context:
            if run_checks([], [check], normalise(text)).forbidden_found:
                raise UsageError(f"task {task.id}: forbidden {check!r} matches the task's own prompt or files",
                                 field="forbidden")


__all__ = ["GenContext", "TEXT_SUFFIXES", "finish_task", "make_task"]
