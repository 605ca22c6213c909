"""Ground truth from outside seqpack: every anchored fact re-derived from a fetched Megatron-Bridge snapshot and the
seed documents (skipped, with the reason, when they are not on this machine), and checked against seqpack."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reference_impl.alignment import derive_alignment, token_slots_per_step
from reference_impl.config.model_support import check_model_support
from reference_impl.config.rules import RULES_BY_ID
from reference_impl.evaluation.tasks import load_tasks
from reference_impl.evaluation.upstream import ANCHORS, ANCHORS_BY_ID, BRIDGE, derive, line_of, mirror_dir, read_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("anchor", ANCHORS, ids=[a.id for a in ANCHORS])
def test_anchor_is_rederived_from_its_source(anchor):
    text = read_source(anchor)
    if text is None:
        if anchor.kind == "upstream":
            pytest.skip(f"{anchor.path}: no snapshot of {BRIDGE} at {anchor.commit} in {mirror_dir(BRIDGE)} "
                        f"(fetch github:{BRIDGE}, or set SEQPACK_UPSTREAM_MIRRORS)")
        pytest.skip(f"seed {anchor.path} is not on this machine (set SEQPACK_SEEDS_DIR to the seeds folder)")
    assert derive(anchor, text) == anchor.value, anchor.id
    if anchor.kind == "upstream":
        assert line_of(anchor, text) == anchor.line, anchor.id
    # negative control: the text with every matching spot changed no longer yields the recorded value
    changed = text
    for _ in range(20):
        m = re.search(anchor.pattern, changed, re.S | re.M)
        if m is None:
            break
        span = m.span(1) if m.re.groups else m.span()
        changed = changed[:span[0]] + "CHANGED" + changed[span[1]:]
    assert derive(anchor, changed) != anchor.value, anchor.id


def test_tasks_record_their_anchors():
    dataset = load_tasks(ROOT / "evals" / "tasks.json")
    anchored = [t for t in dataset.tasks if t.source["kind"] in ("upstream", "seed")]
    assert len(anchored) >= 30
    used = set()
    for t in anchored:
        ids = t.source["anchors"]
        assert ids[0] == t.source["anchor"] and all(i in ANCHORS_BY_ID for i in ids), t.id
        assert t.ground_truth["anchors"] == {i: ANCHORS_BY_ID[i].value for i in ids}, t.id
        used.update(ids)
    assert used == set(ANCHORS_BY_ID), set(ANCHORS_BY_ID) - used


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
    from reference_impl.packing.algorithms import ALGORITHMS
    from reference_impl.packing.parquet import REQUIRED_COLUMNS

    assert set(a["bridge-packing-algos"].value) <= set(ALGORITHMS)
    assert sorted(REQUIRED_COLUMNS) == a["bridge-parquet-columns"].value
    assert check_model_support("glm45", "offline")[0].status == "opt_out"
    assert check_model_support("qwen3_next", "offline")[0].status == "opt_out"
    assert derive_alignment(1, 1, False).pad_seq_to_mult == a["seed-align-tp1-cp1"].value
    assert derive_alignment(4, 1, True).pad_seq_to_mult == a["seed-align-tp4-cp1-sp"].value
    assert {token_slots_per_step(n, g) for n, g in ((2048, 32), (4096, 16), (8192, 8))} == {a["seed-token-slots"].value}
