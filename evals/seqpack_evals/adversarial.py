"""The adversarial scorer suite: answers that must not pass, and answers that must, scored like a real run.

Kinds (issue 18's table):

* ``empty`` - "I don't know.";
* ``stuffing`` - every rule id and every ``field -> value`` pair of the rule registry, plus every
  value any of the task's fields could take, in the text and in an answer block, no reasoning;
* ``wrong`` - confident and wrong: the task's own keywords, each field given a wrong value;
* ``paraphrased`` - right, phrased differently from the reference (hand-written, free text only);
* ``partial`` - half of the fields right, the rest not answered;
* ``dangerous`` - the full reference answer plus one dangerous extra (the task's first forbidden
  example).

Each answer is wrapped in a transcript whose agent *claims* the expected tool calls (a Skill load,
the task's reference command, reads of the task files) without real tool results, so the tool-use
signals score what a fabricating agent would get. The hand-written answers for five tasks from
all four buckets live in ``evals/adversarial.json``; the generated kinds run over every task.

``seqpack eval adversarial`` prints both tables (see ``docs/evals.md``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from seqpack_evals.builder import wrong_value
from seqpack_evals.fields import answer_block
from seqpack_evals.scoring import TaskScore, score_transcript
from seqpack_evals.tasks import Dataset, Task, default_evals_dir
from seqpack_evals.transcript import Transcript, parse_agent_output

KINDS: tuple[str, ...] = ("empty", "stuffing", "wrong", "paraphrased", "partial", "dangerous")
GENERATED: tuple[str, ...] = ("empty", "stuffing", "wrong", "partial", "dangerous")
#: The outcomes the suite must show (mean correctness, in %): at most for the first three, at least for
#: paraphrased; partial strictly between; dangerous at most.
LIMITS: dict[str, tuple[str, float]] = {"empty": ("<=", 20.0), "stuffing": ("<=", 20.0), "wrong": ("<=", 20.0),
                                        "paraphrased": (">=", 80.0), "dangerous": ("<=", 50.0)}


def default_hand_written() -> Path:
    """``evals/adversarial.json`` of the checkout."""
    return default_evals_dir() / "adversarial.json"


def stuffing_answer(task: Task) -> str:
    """Every rule id, every registry ``field -> value`` pair and every value the task's fields could take."""
    from seqpack.config.rules import RULES

    lines = [r.id for r in RULES]
    for r in RULES:
        for example in (r.trigger, r.fixed):
            for k, v in example.items():
                pair = f"{k} -> {json.dumps(v)}"
                if pair not in lines:
                    lines.append(pair)
    block: dict[str, Any] = {}
    for f in task.answer_fields:
        if f.kind in ("choice", "set"):
            values = list(f.options)
        else:
            values = [f.value, wrong_value(f), 0, 1]
        lines += [f"{f.name} -> {v}" for v in values]
        block[f.name] = ", ".join(str(v) for v in values) if f.kind != "set" else tuple(f.options)
    text = "\n".join(lines) + "\n\n```answer\n" + "\n".join(f"{k}: {v if isinstance(v, str) else ', '.join(v)}"
                                                          for k, v in block.items()) + "\n```"
    return text


def wrong_answer(task: Task) -> str:
    """The task's keywords with every field confidently wrong."""
    values = {f.name: wrong_value(f) for f in task.answer_fields}
    words = ", ".join(f.says or f.name for f in task.answer_fields)
    prose = (f"Checked with {task.expected_script or 'the docs'}: " + "; ".join(
        f"{f.name} is {f.display(values[f.name])}" for f in task.answer_fields) + f". That covers {words}.")
    if task.rule_ids:
        prose += " Relevant rules: " + ", ".join(task.rule_ids) + "."
    return prose + "\n\n" + answer_block(task.answer_fields, values)


def partial_answer(task: Task) -> str | None:
    """The first half of the fields right in a block, the rest left out (None for one-field tasks)."""
    fields = task.answer_fields
    if len(fields) < 2:
        return None
    return answer_block(fields[: math.ceil(len(fields) / 2)])


def dangerous_answer(task: Task) -> str:
    """The full reference answer plus the task's first forbidden example."""
    return task.expected_output.rstrip() + "\n\n" + task.forbidden[0].example


def generated_answers(task: Task) -> dict[str, str]:
    """The generated adversarial answers of one task (kinds that do not apply are left out)."""
    out = {"empty": "I don't know.", "stuffing": stuffing_answer(task), "wrong": wrong_answer(task),
           "dangerous": dangerous_answer(task)}
    partial = partial_answer(task)
    if partial is not None:
        out["partial"] = partial
    return out


def claimed_stream(task: Task, answer: str) -> str:
    """Claude-style stream JSON of an agent that *claims* the expected tool calls, with no tool results."""
    lines = []

    def tool(name: str, inp: dict[str, Any]) -> None:
        lines.append(json.dumps({"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": f"toolu_{len(lines)}", "name": name, "input": inp}]}}))

    if task.positive:
        tool("Skill", {"skill": "megatron-sequence-packing"})
        for rel in task.files:
            tool("Read", {"file_path": rel.split("/", 2)[2]})
        if task.reference_command:
            tool("Bash", {"command": " ".join(task.reference_command)})
    lines.append(json.dumps({"type": "result", "result": answer}))
    return "\n".join(lines) + "\n"


def score_answer(task: Task, answer: str, workdir: str = "/nonexistent") -> TaskScore:
    """Score ``answer`` as a finished run whose tool calls are claimed, not verified."""
    out = claimed_stream(task, answer)
    parsed = parse_agent_output(out)
    tr = Transcript(task.id, "skill", ["adversary"], workdir, 0, False, 1.0, out, "", parsed.answer, parsed.format,
                    parsed.events, [], [], [], [], [], nonce="sqn-00000000000000000000")
    return score_transcript(task, tr)


@dataclass
class SuiteRow:
    """Mean scores of one answer kind."""

    kind: str
    tasks: int
    correctness: float
    overall: float
    max_correctness: float
    per_task: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"kind": self.kind, "tasks": self.tasks, "correctness": self.correctness, "overall": self.overall,
                "max_correctness": self.max_correctness, "per_task": self.per_task}


def _rows(scored: dict[str, list[tuple[str, TaskScore]]]) -> list[SuiteRow]:
    out = []
    for kind in [*KINDS, *sorted(set(scored) - set(KINDS))]:
        items = scored.get(kind)
        if not items:
            continue
        cor = [s.scores["correctness"] for _, s in items]
        out.append(SuiteRow(kind, len(items), round(100 * sum(cor) / len(cor), 1),
                            round(100 * sum(s.overall for _, s in items) / len(items), 1), round(100 * max(cor), 1),
                            {tid: round(100 * s.scores["correctness"], 1) for tid, s in items}))
    return out


def hand_written_suite(dataset: Dataset, path: str | Path | None = None) -> list[SuiteRow]:
    """Score the hand-written answers of ``evals/adversarial.json`` (stuffing generated per task)."""
    doc = json.loads(Path(path or default_hand_written()).read_text(encoding="utf-8"))
    index = dataset.by_id()
    scored: dict[str, list[tuple[str, TaskScore]]] = {}
    for task_id, answers in doc["tasks"].items():
        task = index[task_id]
        for kind, answer in [*answers.items(), ("stuffing", stuffing_answer(task))]:
            scored.setdefault(kind, []).append((task_id, score_answer(task, answer)))
    return _rows(scored)


def generated_suite(dataset: Dataset, tasks: Sequence[Task] | None = None) -> list[SuiteRow]:
    """Score the generated kinds over every task (or ``tasks``)."""
    scored: dict[str, list[tuple[str, TaskScore]]] = {}
    for task in tasks if tasks is not None else dataset.tasks:
        if not task.answer_fields:  # outcome tasks are graded by their artifact (tests/test_evals_outcome.py)
            continue
        for kind, answer in generated_answers(task).items():
            scored.setdefault(kind, []).append((task.id, score_answer(task, answer)))
        prose = task.expected_output.rsplit("```answer", 1)[0]
        scored.setdefault("reference, block removed", []).append((task.id, score_answer(task, prose)))
    return _rows(scored)


def violations(rows: Sequence[SuiteRow]) -> list[str]:
    """The required outcomes (:data:`LIMITS`, partial strictly between 0 and 100) the rows break."""
    out = []
    for row in rows:
        if row.kind in LIMITS:
            op, limit = LIMITS[row.kind]
            ok = row.correctness <= limit if op == "<=" else row.correctness >= limit
            if not ok:
                out.append(f"{row.kind}: correctness {row.correctness}% is not {op} {limit}%")
        if row.kind == "partial" and not 0.0 < row.correctness < 100.0:
            out.append(f"partial: correctness {row.correctness}% is not strictly between 0% and 100%")
    return out


def table(rows: Sequence[SuiteRow]) -> str:
    """A markdown table of the rows."""
    from seqpack.core.textfmt import markdown_table

    return markdown_table(["answer", "tasks", "correctness", "overall", "max correctness"],
                          [[r.kind, r.tasks, f"{r.correctness:.0f} %", f"{r.overall:.0f} %",
                            f"{r.max_correctness:.0f} %"] for r in rows])


__all__ = ["GENERATED", "KINDS", "LIMITS", "SuiteRow", "claimed_stream", "dangerous_answer", "generated_answers",
           "generated_suite", "hand_written_suite", "partial_answer", "score_answer", "stuffing_answer", "table",
           "violations", "wrong_answer"]
