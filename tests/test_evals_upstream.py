"""Ground truth from outside seqpack: every upstream anchor re-derived from the installed megatron-bridge 0.6.2 in the
upstream lane (no machine-local snapshot: on a fresh clone the lane is what CI builds), main-only anchors shown absent
from the release, and seqpack checked against the anchored facts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seqpack.core.alignment import derive_alignment, token_slots_per_step
from seqpack.config.model_support import check_model_support
from seqpack.config.rules import RULES_BY_ID
from seqpack_evals.tasks import load_tasks
from seqpack_evals.upstream import ANCHORS, ANCHORS_BY_ID, derive, line_of

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = [a for a in ANCHORS if a.kind == "upstream"]


@pytest.fixture(scope="module")
def installed(upstream):
    """The installed text of every anchored file, from the lane's worker (one call)."""
    answer = upstream.call("grading.source_files", paths=sorted({a.path for a in UPSTREAM}))
    assert answer["versions"] == {"megatron-bridge": "0.6.2", "megatron-core": "0.19.2"}
    return answer["files"]


def _changed(anchor, text: str) -> str:
    for _ in range(20):
        m = re.search(anchor.pattern, text, re.S | re.M)
        if m is None:
            break
        span = m.span(1) if m.re.groups else m.span()
        text = text[:span[0]] + "CHANGED" + text[span[1]:]
    return text


@pytest.mark.slow
def test_release_anchors_hold_in_the_installed_release(installed):
    """Each 0.6.2 anchor yields its recorded value at its recorded line; the pattern fails once the value changes."""
    problems = []
    for a in (a for a in UPSTREAM if a.release):
        text = installed[a.path]
        if text is None:
            problems.append(f"{a.id}: {a.path} is not in megatron-bridge 0.6.2")
            continue
        if derive(a, text) != a.value or line_of(a, text) != a.line:
            problems.append(f"{a.id}: {derive(a, text)!r} at line {line_of(a, text)}, recorded {a.value!r} at {a.line}")
        if derive(a, _changed(a, text)) == a.value:  # negative control
            problems.append(f"{a.id}: the pattern still yields the value after it changed")
    assert problems == []


@pytest.mark.slow
def test_main_only_anchors_are_absent_from_the_release(installed):
    """What was read on Bridge main and is not in 0.6.2: the lane shows it is absent, so its tasks say main."""
    main_only = [a for a in UPSTREAM if not a.release]
    assert main_only
    for a in main_only:
        text = installed[a.path] or ""
        assert derive(a, text) != a.value, a.id


def test_tasks_record_their_anchors_and_versions():
    dataset = load_tasks(ROOT / "evals" / "tasks.json")
    anchored = [t for t in dataset.tasks if "anchors" in t.source]
    assert len(anchored) >= 30
    used = set()
    for t in anchored:
        ids = t.source["anchors"]
        assert all(i in ANCHORS_BY_ID for i in ids), t.id
        assert t.ground_truth["anchors"] == {i: ANCHORS_BY_ID[i].value for i in ids}, t.id
        used.update(ids)
        if any(ANCHORS_BY_ID[i].kind == "upstream" and not ANCHORS_BY_ID[i].release for i in ids):
            assert t.source["commit"] and "rests_on" in t.source and "Bridge build from main" in t.prompt, t.id
        elif t.source["kind"] == "upstream":
            assert t.source["package"] == "megatron-bridge==0.6.2", t.id
        else:  # a seed: the recorded value and the seed's id, no path on any machine
            assert t.source["kind"] == "seed" and "/" not in t.source["seed"], t.id
    assert used == set(ANCHORS_BY_ID), set(ANCHORS_BY_ID) - used


@pytest.mark.slow
def test_seqpack_agrees_with_the_anchored_facts():
    """Where seqpack computes the same thing, it must agree with upstream (or the disagreement is a seqpack bug)."""
    a = ANCHORS_BY_ID
    assert derive_alignment(cp=4).cp_multiple == a["bridge-cp-seq-divisible"].value * 4
    assert RULES_BY_ID["PACK-OFFLINE-MBS1"].fixed["train.micro_batch_size"] == a["bridge-offline-mbs1"].value
    assert RULES_BY_ID["PACK-ENERGON-MBS1"].fixed["train.micro_batch_size"] == a["bridge-energon-mbs1"].value
    assert RULES_BY_ID["PACK-ENERGON-PER-TOKEN-LOSS"].fixed["model.calculate_per_token_loss"] is \
        a["bridge-energon-per-token-loss"].value
    assert RULES_BY_ID["PACK-ENERGON-AVG-COLLECTIVE"].fixed["ddp.average_in_collective"] is \
        a["bridge-energon-avg-collective"].value
    from seqpack.packing.algorithms import ALGORITHMS
    from seqpack.packing.parquet import REQUIRED_COLUMNS

    assert set(a["bridge-packing-algos"].value) <= set(ALGORITHMS)
    assert sorted(REQUIRED_COLUMNS) == a["bridge-parquet-columns"].value
    assert check_model_support("glm45", "offline")[0].status == "opt_out"
    assert check_model_support("qwen3_next", "offline")[0].status == "opt_out"
    assert derive_alignment(1, 1, False).pad_seq_to_mult == a["seed-align-tp1-cp1"].value
    assert derive_alignment(4, 1, True).pad_seq_to_mult == a["seed-align-tp4-cp1-sp"].value
    assert {token_slots_per_step(n, g) for n, g in ((2048, 32), (4096, 16), (8192, 8))} == {a["seed-token-slots"].value}
