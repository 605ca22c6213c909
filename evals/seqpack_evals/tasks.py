"""The eval task format: agentskills.io fields plus seqpack's answer fields and forbidden claims, and its loader.

``evals/tasks.json`` is ``{"skill_name", "format", "generator", "evals": [task, ...]}``. Each task
has the agentskills.io keys (``id``, ``prompt``, ``expected_output``, ``assertions``, ``files``,
``expected_skill``, ``expected_script``) and, for the deterministic scorer:

* ``bucket``: ``explicit`` (names the skill or its tool), ``implicit`` (a packing problem that
  does not name it), ``contextual`` (a config, a log or data in ``files`` to diagnose), ``near_miss``
  (must not trigger the skill; ``expected_skill`` is null);
* ``answer_fields``: the facts to answer, each a name, a true value and its accepted forms
  (:mod:`seqpack_evals.fields`); the prompt ends with a request for an ``answer`` block
  holding them, and ``expected_output`` ends with that block filled in;
* ``forbidden``: dangerous wrong claims, each a check pattern, what it means and an example
  sentence that trips it (every task has at least one);
* ``reference_command``: the seqpack command whose output answers the task (null for near misses);
* ``source``: where the ground truth comes from: ``seqpack`` (computed by this library),
  ``upstream`` (a file of an upstream repository at a commit), ``seed`` (a seed document) or
  ``general`` (common knowledge outside seqpack, for the near misses);
* ``covers``: packing ``paths``, rule ``families`` and ``topics`` the task exercises;
* ``rule_ids``: rules of the registry the ground truth involves;
* ``ground_truth``: the values the generator computed or recorded, for readers;
* ``outcome`` (outcome-verified tasks only, :mod:`seqpack_evals.outcome`): the artifact the
  agent must leave (``kind``, ``artifact``), the checks that grade it by running code (seqpack and,
  through the upstream lane, megatron-bridge 0.6.2), the inputs they compare with, the oracle's
  artifact and a wrong one (``negative``) that must fail. Such a task may have no answer fields.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack.core.errors import InputError, UsageError
from seqpack_evals.fields import AnswerField
from seqpack.core.packing_paths import path_names

SKILL_NAME = "megatron-sequence-packing"
FORMAT = "seqpack-evals/2"
BUCKETS: tuple[str, ...] = ("explicit", "implicit", "contextual", "near_miss")
#: Packing paths a task can cover (the path registry's), plus ``context_parallel``: long-context CP
#: support on any path. A newly registered path must be covered by tasks (tests/test_evals_dataset.py).
PATHS: tuple[str, ...] = (*path_names(), "context_parallel")
TOPICS: tuple[str, ...] = (
    "alignment",
    "token_slots",
    "rules",
    "model_support",
    "inspection",
    "diagnosis",
    "packing",
    "verification",
    "moe_mtp",
    "negative",
    "vlm",
    "mrope",
    "planning",
)
SOURCE_KINDS: tuple[str, ...] = ("seqpack", "upstream", "seed", "general")
#: What an outcome task's agent leaves (:mod:`seqpack_evals.outcome`) and the checks that grade it.
OUTCOME_KINDS: tuple[str, ...] = ("config", "recipe", "packs", "plan")
OUTCOME_CHECKS: tuple[str, ...] = ("bridge", "seqpack", "require", "keep", "keep_all_except", "divisible", "path",
                                   "token_slots", "fits", "unchanged", "packs", "may_change")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

#: ``expected_script`` values and the CLI subcommands / MCP tools that count as using them.
SCRIPTS: dict[str, dict[str, tuple[str, ...]]] = {
    "seqpack align": {"cli": ("align",), "mcp": ("derive_alignment", "plan_pack_length")},
    "seqpack validate": {"cli": ("validate",), "mcp": ("validate_config", "check_model_support")},
    "seqpack rules": {"cli": ("rules",), "mcp": ("explain_rule", "list_rules")},
    "seqpack pack": {"cli": ("pack",), "mcp": ("pack_dataset",)},
    "seqpack inspect": {"cli": ("inspect",), "mcp": ("inspect_packed_dataset",)},
    "seqpack batches": {"cli": ("batches",), "mcp": ("simulate_packing", "inspect_in_batch")},
    "seqpack smoke": {"cli": ("smoke",), "mcp": ("run_packing_smoke_test",)},
    "seqpack plan": {"cli": ("plan",), "mcp": ("plan_pack_length", "simulate_packing")},
    "seqpack image-tokens": {"cli": ("image-tokens",), "mcp": ("count_image_tokens",)},
    "seqpack mrope": {"cli": ("mrope",), "mcp": ("mrope_position_ids",)},
}
#: Every MCP tool the seqpack server offers (a call to any of them shows the skill's tools were used).
MCP_TOOLS: tuple[str, ...] = (
    "derive_alignment",
    "validate_config",
    "explain_rule",
    "list_rules",
    "plan_pack_length",
    "simulate_packing",
    "check_model_support",
    "pack_dataset",
    "inspect_packed_dataset",
    "run_packing_smoke_test",
    "inspect_in_batch",
    "count_image_tokens",
    "mrope_position_ids",
)
CLI_COMMANDS: tuple[str, ...] = ("align", "validate", "rules", "pack", "inspect", "batches", "smoke", "plan", "mcp",
                                 "image-tokens", "mrope")

_REQUIRED_KEYS = ("id", "bucket", "prompt", "expected_output", "assertions", "expected_skill", "expected_script",
                  "files", "answer_fields", "forbidden", "reference_command", "source", "covers", "rule_ids",
                  "ground_truth")


@dataclass(frozen=True)
class Forbidden:
    """A dangerous wrong claim: the check that finds it, what it means, and a sentence that trips it."""

    check: str
    claim: str
    example: str

    def to_dict(self) -> dict[str, str]:
        """JSON-able form."""
        return {"claim": self.claim, "check": self.check, "example": self.example}

    @classmethod
    def from_dict(cls, data: Any) -> "Forbidden":
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, dict) or set(data) != {"claim", "check", "example"}:
            raise UsageError(f"a forbidden claim needs exactly claim, check and example, got {data!r}",
                             field="forbidden")
        return cls(check=data["check"], claim=data["claim"], example=data["example"])


@dataclass
class Task:
    """One eval task (see the module docstring for every field)."""

    id: str
    bucket: str
    prompt: str
    expected_output: str
    assertions: list[str]
    answer_fields: list[AnswerField]
    forbidden: list[Forbidden] = field(default_factory=list)
    expected_skill: str | None = SKILL_NAME
    expected_script: str | None = None
    files: list[str] = field(default_factory=list)
    reference_command: list[str] | None = None
    source: dict[str, Any] = field(default_factory=lambda: {"kind": "seqpack"})
    paths: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    rule_ids: list[str] = field(default_factory=list)
    ground_truth: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] | None = None

    def _outcome_problems(self) -> list[tuple[str, str]]:
        o = self.outcome or {}
        out = []
        if o.get("kind") not in OUTCOME_KINDS:
            out.append(("outcome.kind", f"outcome kind {o.get('kind')!r} is not one of {', '.join(OUTCOME_KINDS)}"))
        artifact = o.get("artifact")
        if not isinstance(artifact, str) or not ID_RE.match(artifact.replace("/", "_")) or ".." in artifact:
            out.append(("outcome.artifact", f"artifact {artifact!r} must be a relative file or folder name"))
        bad = sorted(set(o.get("checks", {})) - set(OUTCOME_CHECKS))
        if bad:
            out.append(("outcome.checks", f"unknown check(s) {bad}; known: {', '.join(OUTCOME_CHECKS)}"))
        for side in ("oracle", "negative"):
            if not isinstance(o.get(side), dict) or not (o[side].get("files") or o[side].get("command")):
                out.append((f"outcome.{side}", f"an outcome task ships its {side} artifact"))
        return out

    @property
    def positive(self) -> bool:
        """True when the skill is expected to be used (every bucket but ``near_miss``)."""
        return self.expected_skill is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form in the order of ``evals/tasks.json``."""
        return {
            "id": self.id,
            "bucket": self.bucket,
            "prompt": self.prompt,
            "expected_output": self.expected_output,
            "assertions": list(self.assertions),
            "expected_skill": self.expected_skill,
            "expected_script": self.expected_script,
            "files": list(self.files),
            "answer_fields": [f.to_dict() for f in self.answer_fields],
            "forbidden": [f.to_dict() for f in self.forbidden],
            "reference_command": None if self.reference_command is None else list(self.reference_command),
            "source": dict(self.source),
            "covers": {"paths": list(self.paths), "families": list(self.families), "topics": list(self.topics)},
            "rule_ids": list(self.rule_ids),
            "ground_truth": self.ground_truth,
            **({"outcome": self.outcome} if self.outcome is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "<tasks>", index: int = 0) -> "Task":
        """Parse and check one task; errors name the file, the task index and the field."""
        if not isinstance(data, dict):
            raise InputError(f"task {index} is not an object", file=where, row=index)
        missing = [k for k in _REQUIRED_KEYS if k not in data]
        if missing:
            raise InputError(f"task {index} lacks {', '.join(missing)}", file=where, row=index, field=missing[0])
        covers = data["covers"] or {}
        try:
            answer_fields = [AnswerField.from_dict(f) for f in data["answer_fields"]]
            forbidden = [Forbidden.from_dict(f) for f in data["forbidden"]]
        except (UsageError, TypeError) as exc:
            message = exc.message if isinstance(exc, UsageError) else str(exc)
            raise InputError(f"task {index}: {message}", file=where, row=index, field="answer_fields") from None
        task = cls(
            id=data["id"],
            bucket=data["bucket"],
            prompt=data["prompt"],
            expected_output=data["expected_output"],
            assertions=list(data["assertions"]),
            answer_fields=answer_fields,
            forbidden=forbidden,
            expected_skill=data["expected_skill"],
            expected_script=data["expected_script"],
            files=list(data["files"]),
            reference_command=None if data["reference_command"] is None else list(data["reference_command"]),
            source=dict(data["source"]),
            paths=list(covers.get("paths", [])),
            families=list(covers.get("families", [])),
            topics=list(covers.get("topics", [])),
            rule_ids=list(data["rule_ids"]),
            ground_truth=dict(data["ground_truth"]),
            outcome=None if data.get("outcome") is None else dict(data["outcome"]),
        )
        problems = task.problems()
        if problems:
            field_name, message = problems[0]
            raise InputError(f"task {task.id!r}: {message}", file=where, row=index, field=field_name)
        return task

    def problems(self) -> list[tuple[str, str]]:
        """Schema problems as ``(field, message)`` pairs (empty when the task is well formed)."""
        from seqpack_evals.answers import compile_check

        out: list[tuple[str, str]] = []
        if not isinstance(self.id, str) or not ID_RE.match(self.id):
            out.append(("id", f"id {self.id!r} must match {ID_RE.pattern}"))
        if self.bucket not in BUCKETS:
            out.append(("bucket", f"bucket {self.bucket!r} is not one of {', '.join(BUCKETS)}"))
        for name in ("prompt", "expected_output"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                out.append((name, f"{name} must be a non-empty string"))
        if (self.bucket == "near_miss") != (self.expected_skill is None):
            out.append(("expected_skill", "near_miss tasks, and only they, have expected_skill null"))
        if self.expected_script is not None and self.expected_script not in SCRIPTS:
            out.append(("expected_script", f"unknown expected_script {self.expected_script!r}"))
        for name in ("paths", "topics"):
            allowed = PATHS if name == "paths" else TOPICS
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad:
                out.append((f"covers.{name}", f"unknown {name} {bad}"))
        if not self.answer_fields and self.outcome is None:
            out.append(("answer_fields", "a task needs at least one answer field (or an outcome to grade)"))
        if self.outcome is not None:
            out += self._outcome_problems()
        names = [f.name for f in self.answer_fields]
        if len(set(names)) != len(names):
            out.append(("answer_fields", f"duplicate answer field names in {names}"))
        for f in self.answer_fields:
            out += [("answer_fields", p) for p in f.problems()]
        if not self.forbidden and self.outcome is None:
            out.append(("forbidden", "a task needs at least one forbidden claim"))
        for fb in self.forbidden:
            try:
                compile_check(fb.check)
            except UsageError as exc:
                out.append(("forbidden", exc.message))
        if self.source.get("kind") not in SOURCE_KINDS:
            out.append(("source", f"source kind {self.source.get('kind')!r} is not one of {', '.join(SOURCE_KINDS)}"))
        if self.source.get("kind") == "upstream" and not ({"repo", "commit", "path"} <= set(self.source)
                                                          or "package" in self.source):
            out.append(("source", "an upstream source names repo, commit and path, or the package==version it "
                        "is checked with"))
        if self.positive and not self.reference_command:
            out.append(("reference_command", "a packing task names the seqpack command that answers it"))
        if self.reference_command is not None and (not self.reference_command
                                                   or self.reference_command[0] != "seqpack"):
            out.append(("reference_command", "reference_command must start with 'seqpack'"))
        for path in self.files:
            if path.startswith("/") or ".." in Path(path).parts or not path.startswith("files/"):
                out.append(("files", f"file {path!r} must be a relative path under files/"))
        return out


@dataclass
class Dataset:
    """A loaded task list and where it came from."""

    tasks: list[Task]
    root: Path
    skill_name: str = SKILL_NAME

    def by_id(self) -> dict[str, Task]:
        """Tasks keyed by id."""
        return {t.id: t for t in self.tasks}

    def select(self, ids: list[str] | None = None, buckets: list[str] | None = None) -> list[Task]:
        """Tasks with the given ids (in the given order) and/or buckets; unknown ids are an error."""
        tasks = self.tasks
        if ids:
            index = self.by_id()
            unknown = [i for i in ids if i not in index]
            if unknown:
                raise UsageError(f"unknown task id(s): {', '.join(unknown)}", field="tasks",
                                 fix="list the ids with: seqpack eval list")
            tasks = [index[i] for i in ids]
        if buckets:
            bad = [b for b in buckets if b not in BUCKETS]
            if bad:
                raise UsageError(f"unknown bucket(s) {bad}; choose from {', '.join(BUCKETS)}", field="bucket")
            tasks = [t for t in tasks if t.bucket in buckets]
        return tasks

    def to_dict(self) -> dict[str, Any]:
        """The ``tasks.json`` document."""
        return {
            "skill_name": self.skill_name,
            "format": FORMAT,
            "generator": "python -m seqpack_evals.dataset",
            "evals": [t.to_dict() for t in self.tasks],
        }


def dumps(dataset: Dataset) -> str:
    """Canonical text of ``tasks.json`` (2-space indent, UTF-8 characters kept, final newline)."""
    return json.dumps(dataset.to_dict(), indent=2, ensure_ascii=False) + "\n"


def default_evals_dir() -> Path:
    """``evals/`` of the source checkout this package was imported from."""
    return Path(__file__).resolve().parents[2] / "evals"


def load_tasks(path: str | os.PathLike[str] | None = None) -> Dataset:
    """Load and check ``tasks.json`` (default: the checkout's ``evals/tasks.json``)."""
    file = Path(path) if path is not None else default_evals_dir() / "tasks.json"
    if file.is_dir():
        file = file / "tasks.json"
    if not file.is_file():
        raise UsageError(f"task file not found: {file}", file=str(file),
                         fix="pass --tasks-file, or build it with: seqpack eval build")
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=str(file), line=exc.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("evals"), list):
        raise InputError("expected an object with an 'evals' list", file=str(file), field="evals")
    tasks = [Task.from_dict(t, where=str(file), index=i) for i, t in enumerate(doc["evals"])]
    seen: set[str] = set()
    for i, t in enumerate(tasks):
        if t.id in seen:
            raise InputError(f"duplicate task id {t.id!r}", file=str(file), row=i, field="id")
        seen.add(t.id)
    return Dataset(tasks=tasks, root=file.parent, skill_name=doc.get("skill_name", SKILL_NAME))


#: The keys of a task that may reach an agent: what it is asked and the files it is given. Everything else
#: (reference answer, assertions, answer fields, forbidden claims, expected skill and script, ground truth,
#: an outcome task's oracle and negative artifacts) is the answer key, kept in the repository's
#: ``evals/tasks.json`` and never installed or put where an agent under evaluation works.
PUBLIC_KEYS: tuple[str, ...] = ("id", "prompt", "files")
#: Kept for readers of older code: the agentskills.io keys an export used to carry (answers included).
AGENTSKILLS_KEYS: tuple[str, ...] = PUBLIC_KEYS
PUBLIC_NOTE = ("Prompts and input files only. The answer key (reference answers, graded fields, outcome checks) "
               "is evals/tasks.json in the seqpack repository and is never part of an installed skill.")


def public_task(task: Task) -> dict[str, Any]:
    """What an agent may see of ``task``: its id, its prompt and the names of its input files."""
    data = task.to_dict()
    return {k: data[k] for k in PUBLIC_KEYS}


def public_dumps(dataset: Dataset, tasks: list[Task] | None = None) -> str:
    """The task list without its answer key (the run directory's ``tasks.json``, the skill's ``evals.json``)."""
    chosen = dataset.tasks if tasks is None else tasks
    doc = {"skill_name": dataset.skill_name, "format": FORMAT + "-public", "note": PUBLIC_NOTE,
           "evals": [public_task(t) for t in chosen]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def is_text_file(path: str | os.PathLike[str]) -> bool:
    """True for a UTF-8 file without NUL bytes (what a skill bundle may ship; scanners flag the rest)."""
    data = Path(path).read_bytes()
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def export_agentskills(dataset: Dataset, out_dir: str | os.PathLike[str], tasks: list[Task] | None = None) -> Path:
    """Write ``out_dir/evals.json`` (prompts and file names only, :func:`public_dumps`) and copy the input files.

    This is what a skill bundle may ship as ``evals/``: the tasks an agent can be given, never their
    answers. Tasks whose files are binary (packed Parquet, images) are left out, so the bundle holds
    text only; they stay in ``evals/`` beside the dataset, outside the bundle.
    """
    from seqpack.io import atomic, ownership, reading  # not into /, $HOME or a system directory; never through a symlink

    out = ownership.check_output_root(out_dir, owner="seqpack eval export")
    chosen = dataset.tasks if tasks is None else tasks
    chosen = [t for t in chosen if all(is_text_file(dataset.root / rel) for rel in t.files)]
    out.mkdir(parents=True, exist_ok=True)
    for t in chosen:
        for rel in t.files:
            with atomic.atomic_output(out / rel, what="an exported task file") as fh:
                fh.write(reading.read_bytes(dataset.root / rel, what="a task file"))
    return atomic.write_text(out / "evals.json", public_dumps(dataset, chosen), what="evals.json")


__all__ = [
    "AGENTSKILLS_KEYS",
    "PUBLIC_KEYS",
    "PUBLIC_NOTE",
    "BUCKETS",
    "CLI_COMMANDS",
    "Dataset",
    "FORMAT",
    "Forbidden",
    "MCP_TOOLS",
    "OUTCOME_CHECKS",
    "OUTCOME_KINDS",
    "SOURCE_KINDS",
    "PATHS",
    "SCRIPTS",
    "SKILL_NAME",
    "TOPICS",
    "Task",
    "default_evals_dir",
    "dumps",
    "export_agentskills",
    "is_text_file",
    "load_tasks",
    "public_dumps",
    "public_task",
]
