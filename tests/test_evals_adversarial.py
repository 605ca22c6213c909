"""The adversarial suite: stuffing, empty and wrong answers fail; paraphrased right answers pass (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.faces.cli import main
from seqpack_evals.adversarial import (
    LIMITS,
    generated_suite,
    hand_written_suite,
    score_answer,
    stuffing_answer,
    violations,
)
from seqpack_evals.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset():
    return load_tasks(ROOT / "evals" / "tasks.json")


@pytest.fixture(scope="module")
def hand(dataset):
    return {r.kind: r for r in hand_written_suite(dataset)}


def test_hand_written_answers_cover_all_buckets_and_kinds(dataset):
    doc = json.loads((ROOT / "evals" / "adversarial.json").read_text())
    tasks = dataset.by_id()
    assert {tasks[t].bucket for t in doc["tasks"]} == {"explicit", "implicit", "contextual", "near_miss"}
    for answers in doc["tasks"].values():
        assert {"empty", "wrong", "paraphrased", "partial", "dangerous"} <= set(answers)


def test_required_outcomes_on_the_hand_written_answers(hand):
    assert hand["empty"].correctness <= 20 and hand["stuffing"].correctness <= 20 and hand["wrong"].correctness <= 20
    assert hand["paraphrased"].correctness >= 80
    assert 0 < hand["partial"].correctness < hand["paraphrased"].correctness
    assert hand["dangerous"].correctness <= 50  # a right answer with a dangerous extra loses half or more
    assert hand["tool_line"].correctness == 100  # seqpack align's own output line
    assert hand["spellings"].correctness == 100  # "set the micro batch size to 1 (MBS1)"
    assert violations(list(hand.values())) == []


@pytest.mark.slow
def test_required_outcomes_on_every_task(dataset):
    rows = {r.kind: r for r in generated_suite(dataset)}
    for kind in ("empty", "stuffing", "wrong"):
        assert rows[kind].max_correctness == 0, (kind, {k: v for k, v in rows[kind].per_task.items() if v})
    assert rows["dangerous"].max_correctness <= 50
    assert 0 < rows["partial"].correctness < 100
    assert rows["reference, block removed"].correctness >= 80  # the free-text fallback alone
    assert violations(list(rows.values())) == []


def test_the_limits_can_fail(dataset):
    """Negative control: the right answer scored as 'stuffing' would break the limit."""
    from seqpack_evals.adversarial import SuiteRow

    assert violations([SuiteRow("stuffing", 1, 100.0, 100.0, 100.0)]) != []
    assert violations([SuiteRow("paraphrased", 1, 50.0, 50.0, 50.0)]) != []
    assert set(LIMITS) == {"empty", "stuffing", "wrong", "paraphrased", "dangerous"}


def test_claimed_tools_earn_no_discoverability(dataset):
    task = dataset.by_id()["explicit-align-tp4-cp2-sp"]
    right = score_answer(task, task.expected_output)
    assert right.scores["correctness"] == 1.0 and right.scores["discoverability"] == 0.0
    assert right.details["unverified_tool_calls"] == 1
    stuffed = score_answer(task, stuffing_answer(task))
    assert stuffed.scores["correctness"] == 0.0


@pytest.mark.slow
def test_cli_prints_the_tables(capsys):
    assert main(["eval", "adversarial", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["violations"] == [] and {r["kind"] for r in out["hand_written"]} >= {"stuffing", "paraphrased"}
