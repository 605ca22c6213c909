"""Outcome-verified tasks: every oracle artifact passes and every negative control fails, graded by running code,
the upstream checks through the lane (megatron-bridge 0.6.2 / megatron-core 0.19.2), batched into a few worker calls.

The fast tests cover the data (counts, coverage, every task ships both artifacts), the override parser and the
grader without a lane (its upstream checks are reported as skipped, never as passed)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from seqpack.core.errors import UsageError
from seqpack_evals.outcome import Artifact, grade_outcomes, pack_multiple, parse_override
from seqpack_evals.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]
EVALS = ROOT / "evals"


@pytest.fixture(scope="module")
def outcome_tasks():
    return [t for t in load_tasks(EVALS / "tasks.json").tasks if t.outcome]


def _workdir(task, side: str, base: Path) -> Path:
    """The task's input files plus the ``side`` artifact, as an agent would leave them."""
    work = base / task.id / side
    work.mkdir(parents=True)
    for rel in task.files:
        target = work / rel.split("/", 2)[2]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(EVALS / rel, target)
    Artifact.from_dict(task.outcome[side]).write(work)
    return work


def test_at_least_sixty_outcome_tasks_across_paths_models_and_buckets(outcome_tasks):
    assert len(outcome_tasks) >= 60
    assert set(Counter(t.bucket for t in outcome_tasks)) == {"explicit", "implicit", "contextual", "near_miss"}
    paths = {p for t in outcome_tasks for p in t.paths}
    assert {"offline", "in_batch", "energon", "global_batch", "context_parallel"} <= paths
    topics = {p for t in outcome_tasks for p in t.topics}
    assert {"vlm", "moe_mtp"} <= topics
    kinds = Counter(t.outcome["kind"] for t in outcome_tasks)
    assert set(kinds) == {"config", "recipe", "packs", "plan"}, kinds
    for t in outcome_tasks:
        assert t.outcome["oracle"] and t.outcome["negative"], t.id
        assert t.outcome["negative"].get("fails"), t.id  # which checks the wrong artifact must fail
        upstream = "bridge" in t.outcome["checks"] or t.outcome["kind"] in ("recipe", "packs")
        if upstream:
            assert t.source["package"] == "megatron-bridge==0.6.2", t.id
        else:  # graded by seqpack alone: the task says which unreleased upstream it rests on
            assert "rests_on" in t.source, t.id
    near = [t for t in outcome_tasks if t.bucket == "near_miss"]
    assert near and all(t.outcome["checks"].get("unchanged") for t in near)  # the input must not change


def test_override_parser_applies_assignments_and_refuses_code():
    text = 'def apply(cfg):\n    """doc"""\n    cfg.model.context_parallel_size = 2\n    cfg.ddp.x = [1, "a"]\n'
    assert parse_override(text) == [("model.context_parallel_size", 2), ("ddp.x", [1, "a"])]
    for bad in ("cfg.model.x = 2\n",  # no apply()
                "def apply(cfg):\n    import os\n",
                "def apply(cfg):\n    cfg.model.x = len('ab')\n",
                "def apply(cfg):\n    other.x = 1\n",
                "def apply(cfg):\n    for i in range(2):\n        cfg.x = i\n",
                "def apply(cfg:\n"):
        with pytest.raises(UsageError):
            parse_override(bad)


def test_pack_multiple():
    assert pack_multiple({"cp": 2}) == 4
    assert pack_multiple({"tp": 4, "cp": 2, "sp": True}) == 8  # what seqpack recommends (and inspect checks)
    assert pack_multiple({"tp": 4, "cp": 2, "sp": True, "alignment": "required"}) == 4  # SP splits rows
    assert pack_multiple({"tp": 8, "cp": 1, "sp": True}) == 8
    assert pack_multiple({"tp": 8, "cp": 1, "sp": True, "alignment": "required"}) == 1
    assert pack_multiple({"cp": 2, "eval_cp": 4}) == 8
    assert pack_multiple({"tp": 2, "sp": False}) == 1


def test_without_the_lane_upstream_checks_are_skipped_not_passed(outcome_tasks, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQPACK_UPSTREAM_VENV", str(tmp_path / "no-lane"))
    task = next(t for t in outcome_tasks if t.id == "out-offline-mbs4")
    (grade,) = grade_outcomes([(task, _workdir(task, "oracle", tmp_path))])
    assert not grade.ok and grade.skipped == ["bridge"]
    assert all(c.ok for c in grade.checks if c.name != "bridge")  # the local checks ran and passed


def test_a_missing_or_broken_artifact_fails_locally(outcome_tasks, tmp_path):
    task = next(t for t in outcome_tasks if t.id == "out-offline-mbs4")
    work = tmp_path / "w"
    work.mkdir()
    (grade,) = grade_outcomes([(task, work)])
    assert grade.failed == ["loads"]
    (work / "fixed.yaml").write_text("model: [unclosed\n")
    (grade,) = grade_outcomes([(task, work)])
    assert grade.failed == ["loads"]


@pytest.mark.slow
def test_every_oracle_passes_and_every_negative_fails_upstream(outcome_tasks, upstream, tmp_path):
    """The grader as CI runs it: all artifacts in one batch through the session's lane worker."""
    items = [(t, side, _workdir(t, side, tmp_path)) for t in outcome_tasks for side in ("oracle", "negative")]
    calls = upstream.calls
    grades = grade_outcomes([(t, work) for t, _, work in items], upstream)
    assert upstream.calls - calls <= 4  # batched: one call per lane op
    problems = []
    for (task, side, _), grade in zip(items, grades):
        assert not grade.skipped, (task.id, side)
        if side == "oracle" and not grade.ok:
            problems.append(f"{task.id}: oracle fails {grade.failed}: "
                            + "; ".join(c.detail for c in grade.checks if not c.ok))
        want = set(task.outcome["negative"].get("fails", []))
        if side == "negative" and (grade.ok or not want <= set(grade.failed)):
            problems.append(f"{task.id}: negative fails {grade.failed}, should fail {sorted(want)}")
    assert problems == [], "\n".join(problems)


@pytest.mark.slow
def test_every_degenerate_control_fails(outcome_tasks, upstream, tmp_path):
    """Empty, unchanged input, the bundled example, a valid-but-off-prompt artifact: none passes any task."""
    from seqpack_evals.controls import KINDS, controls, grade_controls, table

    built = {t.id: set(controls(t)) for t in outcome_tasks}
    assert all({"empty", "example"} <= kinds for kinds in built.values()), built
    assert sum("off_prompt" in k for k in built.values()) >= len(outcome_tasks) - 3  # off-prompt: almost every task
    assert sum("unchanged" in k for k in built.values()) >= 50
    rows = grade_controls(outcome_tasks, EVALS, tmp_path, upstream)
    assert {r["kind"] for r in rows} == set(KINDS)
    passing = [(r["task"], r["kind"]) for r in rows if r["ok"] or r["skipped"]]
    assert passing == [], table(rows)


@pytest.mark.slow
def test_seqpack_agrees_with_the_grader_on_every_oracle_and_negative(outcome_tasks, upstream, tmp_path):
    """seqpack's own verdict (validate for a config, plan or recipe, inspect for packs) is part of every grade: it
    passes every oracle, and wherever a negative control fails an upstream check (Bridge refuses it, Bridge's reader
    splits it wrong), seqpack's verdict fails too."""
    items = [(t, side, _workdir(t, side, tmp_path)) for t in outcome_tasks for side in ("oracle", "negative")]
    grades = grade_outcomes([(t, work) for t, _, work in items], upstream)
    disagree = []
    for (task, side, _), grade in zip(items, grades):
        verdicts = [c for c in grade.checks if c.name in ("seqpack", "inspect")]
        if not verdicts and "loads" not in grade.failed:
            disagree.append(f"{task.id} {side}: no seqpack verdict")
        upstream_failed = {"bridge", "packs"} & set(grade.failed)
        if side == "oracle" and not all(c.ok for c in verdicts):
            disagree.append(f"{task.id} oracle: seqpack says {[c.detail for c in verdicts if not c.ok]}")
        if side == "negative" and upstream_failed and all(c.ok for c in verdicts):
            disagree.append(f"{task.id} negative: upstream fails {sorted(upstream_failed)}, seqpack passes it")
    assert disagree == [], "\n".join(disagree)
