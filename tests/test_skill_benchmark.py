"""The BENCHMARK page in the skill folder: `seqpack eval report` of the oracle run against the null baseline, with a
slot for live agent runs. Regenerate it (commands in docs/evals.md, section 6) when the task set or scoring changes."""

from __future__ import annotations

import re
from pathlib import Path

from seqpack_evals.report import LIVE_SLOT, REFERENCE_RUNS
from seqpack_evals.scoring import SCORING_VERSION
from seqpack_evals.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "skills" / "megatron-sequence-packing" / "BENCHMARK.md"


def test_page_is_a_report_of_the_reference_runs():
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Skill benchmark: megatron-sequence-packing")
    assert REFERENCE_RUNS in text and LIVE_SLOT.strip() in text
    assert f"| Scoring | version {SCORING_VERSION} |" in text
    # the oracle reaches every point; the null agent scores nothing on correctness
    assert "| Correctness | 0% → 100% (+100 points) | gain | PASS |" in text
    assert re.search(r"Tasks passed \(security, correctness and discoverability all 100%\): (\d+) of \1 ", text)


def test_page_lists_only_tasks_of_the_dataset():
    text = PAGE.read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([^`]+)` \| (explicit|implicit|contextual|near_miss) \|", text, re.M)
    ids = {t.id for t in load_tasks(ROOT / "evals" / "tasks.json").tasks}
    assert listed and {task_id for task_id, _ in listed} <= ids
    assert len(listed) >= 150
