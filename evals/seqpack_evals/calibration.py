"""Calibration of the answer reader: hand-written answers in many styles, and answers written by LLM agents.

Two corpora, one JSON object a line:

* ``evals/calibration/answers.jsonl`` (hand-written): ``task`` (a task id), ``style`` (terse, verbose, tabular,
  right_without_block, negation_right, severity_wording, numbers_in_words, k_suffix, in_sentence,
  block_with_alternatives, hedged, wrong_with_right_keywords, wrong_units, rule_id_digits, premise, swapped,
  stuffed, empty, prompt_echo, echo, count_in_tokens, fraction_for_percent, paraphrased_wrong, invented_ids),
  ``expect`` (``right``: every field is answered right; ``wrong``: no field is; ``mixed``: only the fields of
  ``right_fields`` are) and ``answer``;
* ``evals/calibration/agents.jsonl`` (written by an LLM agent playing the harness's agent, with the skill and
  without it, from the task's prompt and input files only): ``task``, ``mode`` (``skill`` or ``baseline``),
  ``agent`` (who wrote it), ``answer`` and ``wrong_fields`` (the fields a person found wrong by hand, comparing
  the answer with the key).

Each hand-written answer is scored like a transcript (:func:`~seqpack_evals.adversarial.score_answer`);
:data:`LIMITS` are the required outcomes: right answers at least 85 % mean correctness, wrong answers at most 5 %
overall and at most 15 % in every style. Every field of every answer is also compared with its hand label
(:func:`field_agreement`; at least 95 %). ``tests/test_evals_calibration.py`` checks them; :func:`table` is the
per-class table of ``docs/evals.md``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from seqpack.core.errors import InputError
from seqpack_evals.tasks import Dataset, default_evals_dir

#: Required mean correctness per expectation: right answers at least 85 %, wrong ones at most 5 % (all styles
#: together) and at most 15 % in any one style.
LIMITS: dict[str, tuple[str, float]] = {"wrong": ("<=", 5.0), "right": (">=", 85.0)}
WRONG_STYLE_LIMIT = 15.0
#: Share of answer fields on which the reader agrees with the hand label, at least.
AGREEMENT_LIMIT = 95.0
EXPECTS = ("right", "wrong", "mixed")


def calibration_path() -> Path:
    """``evals/calibration/answers.jsonl`` of the checkout."""
    return default_evals_dir() / "calibration" / "answers.jsonl"


def agents_path() -> Path:
    """``evals/calibration/agents.jsonl`` of the checkout (answers written by LLM agents, checked by hand)."""
    return default_evals_dir() / "calibration" / "agents.jsonl"


def _lines(file: Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc.msg}", file=str(file), line=n) from None
    return out


def load_answers(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The hand-written calibration answers (``task``, ``style``, ``expect``, ``answer``; ``right_fields`` for a
    mixed one)."""
    file = Path(path) if path is not None else calibration_path()
    out = []
    for n, item in _lines(file):
        keys = {"task", "style", "expect", "answer"} | ({"right_fields"} if item.get("expect") == "mixed" else set())
        if not isinstance(item, dict) or set(item) != keys or item["expect"] not in EXPECTS:
            raise InputError("a calibration answer has task, style, expect (right|wrong|mixed), answer, and "
                             "right_fields when mixed", file=str(file), line=n)
        out.append(item)
    return out


def load_agent_answers(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The LLM agents' answers with their hand labels (``task``, ``mode``, ``agent``, ``answer``, ``wrong_fields``)."""
    file = Path(path) if path is not None else agents_path()
    out = []
    for n, item in _lines(file):
        if not isinstance(item, dict) or set(item) != {"task", "mode", "agent", "answer", "wrong_fields"} \
                or item["mode"] not in ("skill", "baseline"):
            raise InputError("an agent answer has task, mode (skill|baseline), agent, answer and wrong_fields",
                             file=str(file), line=n)
        out.append(item)
    return out


@dataclass
class Scored:
    """One calibration answer, the correctness it earned and how each field was read against its hand label."""

    task: str
    style: str
    expect: str
    correctness: float
    reasons: list[str]
    fields: dict[str, dict[str, bool]] = field(default_factory=dict)  # name -> {"reader": .., "hand": ..}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def hand_labels(item: dict[str, Any], names: Sequence[str]) -> dict[str, bool]:
    """Per field: True when the hand label says the answer gives it right."""
    if "wrong_fields" in item:
        return {n: n not in item["wrong_fields"] for n in names}
    if item["expect"] == "mixed":
        return {n: n in item["right_fields"] for n in names}
    return {n: item["expect"] == "right" for n in names}


def score_all(dataset: Dataset, answers: Sequence[dict[str, Any]]) -> list[Scored]:
    """Score every answer against its task (hand-written or an agent's; an agent's style is its mode)."""
    from seqpack_evals.adversarial import score_answer

    index = dataset.by_id()
    out = []
    for item in answers:
        task = index.get(item["task"])
        if task is None:
            raise InputError(f"calibration answer for unknown task {item['task']!r}", field="task")
        score = score_answer(task, item["answer"])
        graded = score.details["fields"]
        hand = hand_labels(item, [f["name"] for f in graded])
        reasons = [f"{f['name']}: {f['reason']}" for f in graded if not f["correct"]]
        reasons += [f"forbidden: {v}" for v in score.details["forbidden_found"].values()]
        expect = item.get("expect") or ("right" if all(hand.values()) else "wrong" if not any(hand.values())
                                        else "mixed")
        out.append(Scored(item["task"], item.get("style") or item["mode"], expect, score.scores["correctness"],
                          reasons, {f["name"]: {"reader": bool(f["correct"]), "hand": hand[f["name"]]}
                                    for f in graded}))
    return out


def field_agreement(scored: Sequence[Scored]) -> dict[str, Any]:
    """How often the reader's verdict on a field equals the hand label: fields, agreeing, percent, and the
    disagreements (task, style, field, hand label)."""
    pairs = [(s, name, v) for s in scored for name, v in s.fields.items()]
    agree = sum(v["reader"] == v["hand"] for _s, _n, v in pairs)
    return {"fields": len(pairs), "agree": agree, "percent": round(100 * agree / len(pairs), 1) if pairs else 100.0,
            "disagreements": [{"task": s.task, "style": s.style, "field": name, "hand": v["hand"]}
                              for s, name, v in pairs if v["reader"] != v["hand"]]}


def summary(scored: Sequence[Scored]) -> list[dict[str, Any]]:
    """Per (expectation, style): answers, mean correctness (%), share fully right (%) and field agreement (%)."""
    groups: dict[tuple[str, str], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.expect, s.style), []).append(s)
    keys = sorted(groups) + [(e, "all") for e in EXPECTS if any(s.expect == e for s in scored)]
    rows = []
    for expect, style in keys:
        items = groups.get((expect, style)) or [s for s in scored if s.expect == expect]
        rows.append({"expect": expect, "style": style, "answers": len(items),
                     "correctness": round(100 * sum(s.correctness for s in items) / len(items), 1),
                     "fully_right": round(100 * sum(s.correctness >= 0.999 for s in items) / len(items), 1),
                     "agreement": field_agreement(items)["percent"]})
    return rows


def violations(rows: Sequence[dict[str, Any]], scored: Sequence[Scored] | None = None) -> list[str]:
    """The limits the table breaks: :data:`LIMITS` on the totals, :data:`WRONG_STYLE_LIMIT` per wrong style and,
    given ``scored``, :data:`AGREEMENT_LIMIT` on the field agreement."""
    out = []
    for row in rows:
        if row["expect"] == "wrong" and row["style"] != "all" and row["correctness"] > WRONG_STYLE_LIMIT:
            out.append(f"wrong answers in style {row['style']}: mean correctness {row['correctness']}% is above "
                       f"{WRONG_STYLE_LIMIT}%")
        if row["style"] != "all" or row["expect"] not in LIMITS:
            continue
        op, limit = LIMITS[row["expect"]]
        ok = row["correctness"] <= limit if op == "<=" else row["correctness"] >= limit
        if not ok:
            out.append(f"{row['expect']} answers: mean correctness {row['correctness']}% is not {op} {limit}%")
    if scored is not None:
        agreement = field_agreement(scored)["percent"]
        if agreement < AGREEMENT_LIMIT:
            out.append(f"the reader agrees with the hand labels on {agreement}% of the fields (< {AGREEMENT_LIMIT}%)")
    return out


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The per-class markdown table."""
    from seqpack.core.textfmt import markdown_table

    return markdown_table(["expected", "style", "answers", "mean correctness", "fully right", "field agreement"],
                          [[r["expect"], r["style"], r["answers"], f"{r['correctness']:.1f} %",
                            f"{r['fully_right']:.1f} %", f"{r['agreement']:.1f} %"] for r in rows])


__all__ = ["AGREEMENT_LIMIT", "LIMITS", "Scored", "WRONG_STYLE_LIMIT", "agents_path", "calibration_path",
           "field_agreement", "hand_labels", "load_agent_answers", "load_answers", "score_all", "summary", "table",
           "violations"]
