"""Build the eval dataset (``evals/tasks.json`` + ``evals/files/``) from templates and the library.

Every number, rule id and verdict in a task is computed here by calling seqpack's own functions
(``derive_alignment``, ``equal_slot_candidates``, ``validate_config``, ``check_model_support``,
``prepare_packed_dataset``, ``inspect_packed_dataset``, the CLI for error logs, ...). The templates
(``templates_*.py``) only choose the inputs and word the prompts.

Each task is checked as it is made (:func:`finish_task`): its reference answer
(``expected_output``) must pass every ``required`` check and none of the ``forbidden`` ones, and no
forbidden check may match the task's own prompt or files (quoting the input back is not a wrong
claim). ``tests/test_evals_dataset.py`` rebuilds everything and compares it with the committed
files, so the ground truth cannot drift from the code.

Regenerate::

    python -m reference_impl.evaluation.dataset          # or: seqpack eval build [--check]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from reference_impl.config.rules import RULES_BY_ID
from reference_impl.errors import UsageError
from reference_impl.evaluation.checks import Checks, normalise, run_checks
from reference_impl.evaluation.tasks import SKILL_NAME, Dataset, Task, default_evals_dir, dumps

log = logging.getLogger(__name__)

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


def build_dataset(evals_dir: str | os.PathLike[str]) -> Dataset:
    """Build every task, writing task files under ``evals_dir/files`` (which must not exist yet)."""
    from reference_impl.evaluation import templates_files, templates_knowledge, templates_near_miss

    evals_dir = Path(evals_dir)
    files_root = evals_dir / "files"
    if files_root.exists():
        raise UsageError(f"{files_root} already exists; build into an empty folder", file=str(files_root))
    files_root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="seqpack-evals-") as scratch:
        ctx = GenContext(files_root=files_root, scratch=Path(scratch))
        templates_knowledge.build(ctx)
        templates_files.build(ctx)
        templates_near_miss.build(ctx)
    ids = [t.id for t in ctx.tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UsageError(f"duplicate task ids: {dupes}", field="id")
    return Dataset(tasks=ctx.tasks, root=evals_dir)


def write_dataset(evals_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """Rebuild ``evals_dir`` (default: the checkout's ``evals/``): ``tasks.json`` and ``files/``.

    Other files there (``README.md``) are left alone. The new content is built next to the old one
    and swapped in only when the build succeeded.
    """
    evals_dir = Path(evals_dir) if evals_dir is not None else default_evals_dir()
    evals_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=evals_dir))
    try:
        dataset = build_dataset(staging)
        (staging / "tasks.json").write_text(dumps(dataset), encoding="utf-8")
        old_files = evals_dir / "files"
        if old_files.exists():
            shutil.rmtree(old_files)
        os.replace(staging / "files", old_files)
        os.replace(staging / "tasks.json", evals_dir / "tasks.json")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    dataset.root = evals_dir
    log.info("wrote %d tasks to %s", len(dataset.tasks), evals_dir / "tasks.json")
    return dataset


def _same_file(a: Path, b: Path) -> bool:
    if a.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(a).equals(pq.read_table(b))
    return a.read_bytes() == b.read_bytes()


def diff_dataset(evals_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Rebuild in a temporary folder and list what differs from ``evals_dir`` (empty: up to date).

    ``tasks.json`` and text files are compared byte for byte; Parquet files by their decoded
    table (the bytes also carry the writer's version).
    """
    evals_dir = Path(evals_dir) if evals_dir is not None else default_evals_dir()
    with tempfile.TemporaryDirectory(prefix="seqpack-evals-check-") as tmp:
        fresh = Path(tmp)
        dataset = build_dataset(fresh)
        (fresh / "tasks.json").write_text(dumps(dataset), encoding="utf-8")
        out: list[str] = []
        committed = evals_dir / "tasks.json"
        if not committed.is_file() or committed.read_text(encoding="utf-8") != (fresh / "tasks.json").read_text(
            encoding="utf-8"
        ):
            out.append("tasks.json")
        new = {p.relative_to(fresh).as_posix() for p in (fresh / "files").rglob("*") if p.is_file()}
        old = {p.relative_to(evals_dir).as_posix() for p in (evals_dir / "files").rglob("*") if p.is_file()}
        out += [f"{p} (missing)" for p in sorted(new - old)]
        out += [f"{p} (not generated)" for p in sorted(old - new)]
        out += [p for p in sorted(new & old) if not _same_file(fresh / p, evals_dir / p)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: rebuild ``evals/`` (or ``--check`` that it is up to date)."""
    parser = argparse.ArgumentParser(prog="python -m reference_impl.evaluation.dataset",
                                     description="Build the seqpack eval dataset from the code.")
    parser.add_argument("--evals-dir", default=None, help="target folder (default: the checkout's evals/)")
    parser.add_argument("--check", action="store_true", help="only report whether the committed files are current")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check:
        diff = diff_dataset(args.evals_dir)
        for line in diff:
            log.warning("stale: %s", line)
        return 1 if diff else 0
    dataset = write_dataset(args.evals_dir)
    if args.evals_dir is None:
        # keep the skill bundle's copy (agentskills.io shape) in step with the dataset
        from reference_impl.docgen import SKILL_DIR
        from reference_impl.evaluation.tasks import export_agentskills

        target = SKILL_DIR / "evals"
        if target.exists():
            shutil.rmtree(target)
        export_agentskills(dataset, target)
        log.info("exported the skill bundle copy to %s", target)
    return 0


__all__ = ["GenContext", "build_dataset", "diff_dataset", "finish_task", "make_task", "main", "write_dataset"]


if __name__ == "__main__":
    raise SystemExit(main())
