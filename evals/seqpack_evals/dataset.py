"""Build the eval dataset (``evals/tasks.json`` + ``evals/files/``) from templates and the library.

Most numbers, rule ids and verdicts in a task are computed here by calling seqpack's own functions
(``derive_alignment``, ``equal_slot_candidates``, ``validate_config``, ``check_model_support``,
``prepare_packed_dataset``, ``inspect_packed_dataset``, the CLI for error logs, ...);
``templates_upstream`` takes its values from facts recorded in Megatron-Bridge's source and the
seed documents (:mod:`seqpack_evals.upstream`), and the near misses from general
knowledge of other libraries. The templates (``templates_*.py``) choose the inputs and word the
prompts.

Each task is checked as it is made (:func:`~seqpack_evals.builder.finish_task`): its
reference answer (``expected_output``) must grade every answer field right and trip no forbidden
claim, its prose must not contradict its own block, every field must grade a wrong value wrong,
every forbidden example must trip its check, and no forbidden check may match the task's own
prompt or files (quoting the input back is not a wrong claim). ``tests/test_evals_dataset.py`` rebuilds everything and compares it with the committed
files, so the ground truth cannot drift from the code.

Regenerate::

    python -m seqpack_evals.dataset          # or: seqpack eval build [--check]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Sequence

from seqpack.core.errors import UsageError
from seqpack_evals import (
    outcome,
    templates_files,
    templates_knowledge,
    templates_moe,
    templates_near_miss,
    templates_upstream,
    templates_vlm,
)
from seqpack_evals.builder import GenContext
from seqpack_evals.tasks import Dataset, default_evals_dir, dumps

log = logging.getLogger(__name__)

#: Template modules in build order (the order is part of the dataset). Each defines
#: ``build(ctx: GenContext) -> None`` and imports only :mod:`~seqpack_evals.builder`
#: from the build machinery. A new family of tasks is one new module plus one entry here.
TEMPLATES: tuple[ModuleType, ...] = (
    templates_knowledge, templates_files, templates_upstream, templates_vlm, templates_moe, templates_near_miss,
    outcome,
)


def build_dataset(evals_dir: str | os.PathLike[str]) -> Dataset:
    """Build every task, writing task files under ``evals_dir/files`` (which must not exist yet)."""
    evals_dir = Path(evals_dir)
    files_root = evals_dir / "files"
    if files_root.exists():
        raise UsageError(f"{files_root} already exists; build into an empty folder", file=str(files_root))
    files_root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="seqpack-evals-") as scratch:
        ctx = GenContext(files_root=files_root, scratch=Path(scratch))
        for template in TEMPLATES:
            template.build(ctx)
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
    parser = argparse.ArgumentParser(prog="python -m seqpack_evals.dataset",
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
    write_dataset(args.evals_dir)  # the skill bundle ships no copy: the answer key stays in evals/
    return 0


__all__ = ["TEMPLATES", "build_dataset", "diff_dataset", "main", "write_dataset"]


if __name__ == "__main__":
    raise SystemExit(main())
