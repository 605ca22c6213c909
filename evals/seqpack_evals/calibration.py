"""Calibration of the answer reader on answers written unlike the reference answers (``evals/calibration/``).

``evals/calibration/answers.jsonl`` holds hand-written answers, one JSON object a line: ``task`` (a task id),
``style`` (terse, verbose, tabular, right_without_block, negation_right, severity_wording, hedged,
wrong_with_right_keywords, wrong_units, rule_id_digits, premise, swapped, stuffed, empty, prompt_echo,
invented_ids) and ``expect`` (``right``: every field is answered right; ``wrong``: the answer must not earn
correctness). Each answer is scored like a transcript (:func:`~seqpack_evals.adversarial.score_answer`);
:data:`LIMITS` are the required outcomes: wrong answers at most 20 % mean correctness, right paraphrases at
least 80 %. ``tests/test_evals_calibration.py`` checks them; :func:`table` is the per-class table of
``docs/evals.md``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from seqpack.core.errors import InputError
from seqpack_evals.tasks import Dataset, default_evals_dir

#: Required mean correctness per expectation: wrong answers at most 20 %, right ones at least 80 %.
LIMITS: dict[str, tuple[str, float]] = {"wrong": ("<=", 20.0), "right": (">=", 80.0)}


def calibration_path() -> Path:
    """``evals/calibration/answers.jsonl`` of the checkout."""
    return default_evals_dir() / "calibration" / "answers.jsonl"


def load_answers(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The calibration answers (each with ``task``, ``style``, ``expect``, ``answer``)."""
    file = Path(path) if path is not None else calibration_path()
    out = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if set(item) != {"task", "style", "expect", "answer"} or item["expect"] not in LIMITS:
            raise InputError("a calibration answer has task, style, expect (right|wrong) and answer", file=str(file),
                             line=n)
        out.append(item)
    return out


@dataclass
class Scored:
    """One calibration answer and the correctness it earned."""

    task: str
    style: str
    expect: str
    correctness: float
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def score_all(dataset: Dataset, answers: Sequence[dict[str, Any]]) -> list[Scored]:
    """Score every answer against its task."""
    from seqpack_evals.adversarial import score_answer

    index = dataset.by_id()
    out = []
    for item in answers:
        score = score_answer(index[item["task"]], item["answer"])
        reasons = [f"{f['name']}: {f['reason']}" for f in score.details["fields"] if not f["correct"]]
        reasons += [f"forbidden: {v}" for v in score.details["forbidden_found"].values()]
        out.append(Scored(item["task"], item["style"], item["expect"], score.scores["correctness"], reasons))
    return out


def summary(scored: Sequence[Scored]) -> list[dict[str, Any]]:
    """Per (expectation, style): answers, mean correctness (%), and the share fully right (%)."""
    groups: dict[tuple[str, str], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.expect, s.style), []).append(s)
    rows = []
    for (expect, style), items in sorted(groups.items()):
        rows.append({"expect": expect, "style": style, "answers": len(items),
                     "correctness": round(100 * sum(s.correctness for s in items) / len(items), 1),
                     "fully_right": round(100 * sum(s.correctness >= 0.999 for s in items) / len(items), 1)})
    for expect in LIMITS:
        items = [s for s in scored if s.expect == expect]
        if items:
            rows.append({"expect": expect, "style": "all", "answers": len(items),
                         "correctness": round(100 * sum(s.correctness for s in items) / len(items), 1),
                         "fully_right": round(100 * sum(s.correctness >= 0.999 for s in items) / len(items), 1)})
    return rows


def violations(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The :data:`LIMITS` the per-expectation totals break."""
    out = []
    for row in rows:
        if row["style"] != "all":
            continue
        op, limit = LIMITS[row["expect"]]
        ok = row["correctness"] <= limit if op == "<=" else row["correctness"] >= limit
        if not ok:
            out.append(f"{row['expect']} answers: mean correctness {row['correctness']}% is not {op} {limit}%")
    return out


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The per-class markdown table."""
    from seqpack.core.textfmt import markdown_table

    return markdown_table(["expected", "style", "answers", "mean correctness", "fully right"],
                          [[r["expect"], r["style"], r["answers"], f"{r['correctness']:.1f} %",
                            f"{r['fully_right']:.1f} %"] for r in rows])


__all__ = ["LIMITS", "Scored", "calibration_path", "load_answers", "score_all", "summary", "table", "violations"]
