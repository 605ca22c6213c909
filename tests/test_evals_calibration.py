"""The answer reader on answers written unlike the reference answers: the hand-written calibration corpus
(``evals/calibration/answers.jsonl``, >= 300 answers in many styles) meets the required outcomes, the answers LLM
agents wrote with and without the skill (``evals/calibration/agents.jsonl``) are read as a person reads them, and each
failure class of issues 23 and 31 is pinned by an example."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from seqpack_evals.answers import grade_answer
from seqpack_evals.calibration import (
    AGREEMENT_LIMIT,
    field_agreement,
    load_agent_answers,
    load_answers,
    score_all,
    summary,
    table,
    violations,
)
from seqpack_evals.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset():
    return load_tasks(ROOT / "evals" / "tasks.json")


@pytest.fixture(scope="module")
def rows(dataset):
    return summary(score_all(dataset, load_answers()))


def test_corpus_is_large_varied_and_names_real_tasks(dataset):
    answers = load_answers()
    assert len(answers) >= 300
    styles = Counter(a["style"] for a in answers)
    assert {"terse", "verbose", "tabular", "hedged", "wrong_with_right_keywords", "right_without_block",
            "wrong_units", "stuffed", "empty"} <= set(styles)
    index = dataset.by_id()
    assert all(a["task"] in index and index[a["task"]].answer_fields for a in answers)
    # written by hand, not templated from the reference answers: no answer repeats its task's reference prose
    for a in answers:
        prose = index[a["task"]].expected_output.split("```answer")[0].strip()
        assert prose[:60] not in a["answer"], a


def test_wrong_answers_earn_little_and_right_ones_almost_everything(rows):
    assert violations(rows) == [], table(rows)
    by = {(r["expect"], r["style"]): r for r in rows}
    assert by[("wrong", "all")]["correctness"] <= 5.0
    assert by[("right", "all")]["correctness"] >= 85.0
    assert all(r["correctness"] <= 15.0 for r in rows if r["expect"] == "wrong"), table(rows)
    for style in ("empty", "stuffed", "rule_id_digits", "prompt_echo", "echo", "count_in_tokens",
                  "fraction_for_percent"):
        assert by[("wrong", style)]["correctness"] == 0.0, style
    assert by[("mixed", "all")]["agreement"] == 100.0  # a partly right answer earns exactly its right fields


def test_real_agents_answers_are_read_as_a_person_reads_them(dataset):
    """Answers an LLM agent wrote under the harness's rules (prompt, input files, skill and CLI; never evals/), with
    the skill and without it, >= 40 tasks each, every field labelled by hand against the key."""
    answers = load_agent_answers()
    assert {a["mode"] for a in answers} == {"skill", "baseline"}
    assert min(len({a["task"] for a in answers if a["mode"] == m}) for m in ("skill", "baseline")) >= 40
    scored = score_all(dataset, answers)
    agreement = field_agreement(scored)
    assert agreement["percent"] >= AGREEMENT_LIMIT, agreement["disagreements"]
    # a paired run never reads a right answer block as wrong
    assert not [d for d in agreement["disagreements"] if d["hand"]], agreement["disagreements"]
    # the negative control: the same answers graded against the wrong task's key are not read as right
    index = dataset.by_id()
    shifted = [dict(a, task=answers[(k + 2) % len(answers)]["task"]) for k, a in enumerate(answers)
               if index[answers[(k + 2) % len(answers)]["task"]].answer_fields != index[a["task"]].answer_fields]
    wrongly = score_all(dataset, [dict(a, wrong_fields=[]) for a in shifted])
    assert sum(s.correctness for s in wrongly) / len(wrongly) < 0.2


@pytest.mark.parametrize("task_id, answer, right", [
    # identifiers are never values: the digit of a rule id is no micro-batch size, either way
    ("explicit-rule-pack-offline-mbs1", "I don't know; maybe look at PACK-ENERGON-MBS1.", False),
    ("implicit-offline-mbs4", "It must be one, not 4 (rule PACK-OFFLINE-MBS1): micro_batch_size = 1.", True),
    # a premise is not the answer
    ("implicit-offline-mbs4", "micro_batch_size 1 is only required for Energon packing; with offline rows 4 rows per "
                              "micro-batch is fine.", False),
    # units: GPUs are not nodes, a global batch is not per GPU, tokens are not pixels
    ("implicit-world-size", "It will not start: you need a multiple of 4 nodes.", False),
    ("implicit-world-size", "It will not start: the world size must be a multiple of 4 GPUs.", True),
    ("implicit-gbs-dp", "The global batch must be 8 per GPU.", False),
    ("nm-llava-visual-tokens", "576 pixels.", False),
    ("nm-llava-visual-tokens", "576.", True),
])
def test_failure_classes_of_issue_23(dataset, task_id, answer, right):
    results = grade_answer(dataset.by_id()[task_id].answer_fields, answer)
    assert all(r.correct for r in results) is right, [(r.name, r.reason) for r in results]


def test_refusal_and_severity_wordings(dataset):
    task = dataset.by_id()["explicit-rule-pack-offline-mbs1"]
    severity = next(f for f in task.answer_fields if f.name == "severity")
    for text, right in [("It will be rejected at start-up.", True), ("A hard error, not a warning.", True),
                        ("It only warns; the run still starts.", False), ("It is probably a warning.", False)]:
        (result,) = grade_answer([severity], text)
        assert result.correct is right, (text, result.reason)
    up = dataset.by_id()["up-cp3-seq-32000"]
    accepted = next(f for f in up.answer_fields if f.name == "accepted")
    assert grade_answer([accepted], "Bridge refuses 32000.")[0].correct
    assert not grade_answer([accepted], "It is accepted.")[0].correct


def test_a_share_is_not_a_count(dataset):
    task = dataset.by_id()["ctx-packs-stats"]
    packs = next(f for f in task.answer_fields if f.name == "packs")
    (result,) = grade_answer([packs], "The packs are 92.9 % full, 15 packs in total.")
    assert result.correct, result.reason


def test_tables_are_read(dataset):
    task = dataset.by_id()["implicit-offline-mbs4"]
    answer = "| field | yours | required |\n|---|---|---|\n| train.micro_batch_size | 4 | 1 |"
    assert grade_answer(task.answer_fields, answer)[0].correct  # the "yours" column quotes the input
    wrong = "| field | required |\n|---|---|\n| train.micro_batch_size | 4 |"
    assert not grade_answer(task.answer_fields, wrong)[0].correct
