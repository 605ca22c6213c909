"""plan_pack_length: exact tables on hand-made inputs, validity reasons, inputs, and properties.

Hand derivations use best-fit decreasing (longest first; each item into the fullest bin it fits).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import InputError, UsageError
from seqpack.verbs.planning import TIE_TOLERANCE, alignment_multiple, lengths_from_histogram, plan_pack_length

SMALL = [5, 3, 3, 2, 7]  # 20 tokens


def test_small_table_exact():
    # P=8:  7 -> b0 (free 1); 5 -> b1 (free 3); 3 -> b1 (free 0); 3 -> b2 (free 5); 2 -> b2 (free 3)
    #       3 packs, 20 tokens in 24 slots.
    # P=16: 7,5,3 -> b0 (15); 3 -> b1; 2 -> b1 -> 2 packs, 20 tokens in 32 slots.
    plan = plan_pack_length(SMALL, candidates=(16, 8), token_slots=32)
    assert [r.pack_size for r in plan.rows] == [8, 16]  # sorted
    r8, r16 = plan.rows
    assert (r8.global_batch_size, r8.packs, r8.lower_bound, r8.max_seqs_in_pack) == (4, 3, 3, 2)
    assert r8.token_efficiency == pytest.approx(20 / 24)
    assert r8.packing_efficiency == pytest.approx(20 / 24)
    assert r8.padding_waste_share == pytest.approx(4 / 24)
    assert r8.alignment_padding_share == 0.0
    assert r8.steps_per_epoch == 0.75 and r8.full_steps_per_epoch == 0
    assert r8.mean_seqs_per_pack == pytest.approx(5 / 3)
    assert any("less than one global batch of 4" in n for n in r8.notes)
    assert (r16.global_batch_size, r16.packs, r16.lower_bound, r16.max_seqs_in_pack) == (2, 2, 2, 3)
    assert r16.token_efficiency == pytest.approx(20 / 32)
    assert r16.steps_per_epoch == 1.0 and r16.full_steps_per_epoch == 1 and r16.notes == []
    assert all(r.valid and r.reasons == [] and r.too_long == 0 and r.packed_samples == 5 for r in plan.rows)
    assert plan.recommended_pack_size == 8
    s = plan.lengths
    assert (s.source, s.num_samples, s.total_tokens, s.min, s.p50, s.max) == ("lengths", 5, 20, 2, 3, 7)
    assert s.mean == 4.0


def test_alignment_padding_and_tie_goes_to_the_longer_pack():
    # m=4: aligned [8, 4, 4, 4, 8] = 28 tokens (20 real).
    # P=8: 8 | 8 | 4+4 | 4 -> 4 packs (32 slots); P=16: 8+8 | 4+4+4 -> 2 packs (32 slots).
    plan = plan_pack_length(SMALL, candidates=(8, 16), token_slots=32, pad_seq_to_mult=4)
    r8, r16 = plan.rows
    assert (r8.packs, r16.packs) == (4, 2)
    for r in (r8, r16):
        assert r.token_efficiency == pytest.approx(20 / 32)
        assert r.packing_efficiency == pytest.approx(28 / 32)
        assert r.alignment_padding_share == pytest.approx(8 / 32)
        assert r.tail_padding_share == pytest.approx(4 / 32)
    assert plan.recommended_pack_size == 16
    assert "tied with 8" in plan.recommendation
    assert plan.pad_seq_to_mult == 4


def test_candidates_that_cut_samples_lose_to_ones_that_keep_them_whole():
    # P=8: 9 is cut to 8 -> packs 8 | 7 | 7 = 22 real tokens in 24 slots (0.917), 1 token lost.
    # P=16: 9+7 | 7 -> 23 tokens in 32 slots (0.719), nothing lost -> recommended.
    plan = plan_pack_length([9, 7, 7], candidates=(8, 16), token_slots=16)
    r8, r16 = plan.rows
    assert (r8.sample_cap, r8.too_long, r8.truncated, r8.rejected, r8.tokens_lost) == (8, 1, 1, 0, 1)
    assert r8.packs == 3 and r8.token_efficiency == pytest.approx(22 / 24)
    assert r16.packs == 2 and r16.token_efficiency == pytest.approx(23 / 32)
    assert plan.recommended_pack_size == 16
    assert "8 would cut or drop samples" in plan.recommendation
    assert any("cut to 8 tokens" in n for n in r8.notes)

    rejected = plan_pack_length([9, 7, 7], candidates=(8, 16), token_slots=16, truncation="reject")
    r8 = rejected.rows[0]
    assert (r8.too_long, r8.truncated, r8.rejected, r8.tokens_lost, r8.packed_samples) == (1, 0, 1, 9, 2)
    assert r8.packs == 2 and r8.token_efficiency == pytest.approx(14 / 16)
    assert rejected.recommended_pack_size == 16


def test_all_candidates_cut_samples_then_the_best_still_wins_with_a_warning():
    plan = plan_pack_length([20, 3], candidates=(8, 16), token_slots=16)
    # P=8: 8 | 3 -> 11/16; P=16: 16 | 3 -> 19/32 (0.594) -> 8 wins on efficiency (0.6875)
    assert [r.too_long for r in plan.rows] == [1, 1]
    assert plan.recommended_pack_size == 8
    assert "every valid candidate truncates or drops" in plan.recommendation


def test_dp_makes_the_most_efficient_candidate_invalid():
    # 8192: one pack of 8000 (0.977) but GBS 8 < DP 16; 2048 cuts both 3000s; 4096: three packs (0.651).
    plan = plan_pack_length([3000, 3000, 2000], token_slots=65536, dp=16)
    r2k, r4k, r8k = plan.rows
    assert [r.global_batch_size for r in plan.rows] == [32, 16, 8]
    assert r8k.valid is False
    assert r8k.reasons == ["[BATCH-GBS-DIVISIBLE] global_batch_size 8 is smaller than DP=16"]
    assert r8k.token_efficiency == pytest.approx(8000 / 8192)
    assert r2k.valid and r2k.too_long == 2 and r2k.tokens_lost == 2 * (3000 - 2048)
    assert r4k.valid and r4k.packs == 3 and r4k.token_efficiency == pytest.approx(8000 / (3 * 4096))
    assert plan.recommended_pack_size == 4096


def test_slots_and_alignment_reasons():
    plan = plan_pack_length([100, 200], candidates=(4096, 3000), token_slots=12288, dp=2, pad_seq_to_mult=8)
    r3000, r4096 = plan.rows
    assert r3000.global_batch_size is None and r3000.steps_per_epoch is None and r3000.full_steps_per_epoch is None
    assert r3000.reasons == ["12288 is not a multiple of 3000"]
    assert not r4096.valid and r4096.global_batch_size == 3  # 12288/4096 = 3, odd: DP=2 breaks it
    assert r4096.reasons == ["[BATCH-GBS-DIVISIBLE] global_batch_size 3 is not divisible by DP=2"]
    assert plan.recommended_pack_size is None
    assert plan.recommendation.startswith("no candidate is valid")

    unaligned = plan_pack_length([5, 5], candidates=(8,), token_slots=8, pad_seq_to_mult=3)
    row = unaligned.rows[0]
    assert row.reasons == ["[PACK-OFFLINE-WIDTH-ALIGNED] pack_size 8 is not a multiple of pad_seq_to_mult=3"]
    assert row.sample_cap == 6  # floor(8/3)*3
    assert row.packs == 2  # aligned lengths 6 and 6 do not share an 8-token pack


def test_histogram_input_gives_the_same_plan_as_the_list():
    from_list = plan_pack_length(SMALL, candidates=(8, 16), token_slots=32).to_dict()
    from_hist = plan_pack_length(histogram={"7": 1, "2": 1, 3: 2, "5": 1}, candidates=(8, 16), token_slots=32).to_dict()
    assert from_hist["lengths"].pop("source") == "histogram"
    from_list["lengths"].pop("source")
    assert from_hist == from_list
    assert lengths_from_histogram([(3, 2), (1, 0), (2, 1)]).tolist() == [2, 3, 3]


def test_jsonl_input_counts_runtime_lengths_and_rejections(write_jsonl):
    # byte tokenizer, prompt/completion: ids = prompt + " " + completion + EOS; runtime = ids - 1
    path = write_jsonl([
        {"prompt": "ab", "completion": "cde"},  # 2 + 1 + 3 + 1 - 1 = 6
        {"prompt": "hello", "completion": "world!"},  # 5 + 1 + 6 + 1 - 1 = 12
        {"prompt": "x", "completion": ""},  # rejected: empty completion
    ])
    plan = plan_pack_length(jsonl=path, candidates=(8, 16), token_slots=16)
    s = plan.lengths
    assert (s.source, s.num_samples, s.total_tokens, s.max) == ("jsonl", 2, 18, 12)
    acc = s.details["accounting"]
    assert (acc["rows_in"], acc["packed"], acc["skipped"]["empty_completion"]["count"]) == (3, 2, 1)
    r8, r16 = plan.rows
    assert r8.too_long == 1 and r8.tokens_lost == 4  # 12 cut to 8
    assert r16.packs == 2 and r16.too_long == 0  # 6 + 12 > 16
    assert plan.recommended_pack_size == 16


def test_to_dict_is_json_and_complete():
    plan = plan_pack_length(SMALL, candidates=(8, 16), token_slots=32, seed=3, max_seqs_per_pack=2)
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["recommended_pack_size"] == plan.recommended_pack_size
    assert data["rule"] == plan.rule and str(TIE_TOLERANCE * 100) in data["rule"]
    assert data["max_seqs_per_pack"] == 2 and data["seed"] == 3
    assert [r["max_seqs_in_pack"] for r in data["rows"]] == [2, 2]  # the cap holds
    assert plan.row(16).packs == data["rows"][1]["packs"] == 3  # 7+5 | 3+3 | 2
    with pytest.raises(UsageError):
        plan.row(4096)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"lengths": [1], "histogram": {1: 1}}, UsageError, "exactly one of"),
        ({}, UsageError, "got none"),
        ({"lengths": [4, 0]}, InputError, "lengths[1] is 0"),
        ({"lengths": [4, -1]}, InputError, "lengths[1] is -1"),
        ({"lengths": []}, InputError, "no sample to plan with"),
        ({"histogram": {"5": -1}}, InputError, "count for length 5"),
        ({"histogram": {"x": 1}}, InputError, "must be an integer from 1 to"),
        ({"lengths": [4], "candidates": (4, 4)}, UsageError, "repeat"),
        ({"lengths": [4], "candidates": (2,), "pad_seq_to_mult": 4}, UsageError, "smaller than pad_seq_to_mult"),
        ({"lengths": [4], "algorithm": "worst_fit"}, UsageError, "unknown packing algorithm"),
        ({"lengths": [4], "truncation": "middle"}, UsageError, "unknown truncation"),
        ({"lengths": [4], "dp": 0}, UsageError, "dp must be a positive integer"),
        ({"lengths": [4], "max_seqs_per_pack": 0}, UsageError, "max_seqs_per_pack"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, error, text):
    with pytest.raises(error) as exc:
        plan_pack_length(**kwargs)
    assert text in str(exc.value)


def test_alignment_multiple():
    assert alignment_multiple(None, 4, 2, True) == 8
    assert alignment_multiple(16, 4, 2, True) == 16
    assert alignment_multiple(None) == 1
    with pytest.raises(UsageError) as exc:
        alignment_multiple(6, 4, 2, True)  # not a multiple of 2*CP = 4: the THD CP split fails
    assert exc.value.rule_id == "PACK-OFFLINE-PAD-MULT-TOPOLOGY" and "use pad_seq_to_mult=8" in str(exc.value)
    # 12 satisfies 2*CP and only misses the recommended SP term (CP*TP = 8): used, with a warning
    assert alignment_multiple(12, 4, 2, True) == 12
    assert alignment_multiple(1, 8, 1, True) == 1  # TP8 + SP, CP1: Bridge's Nemotron-3 Super recipe


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=60),
    candidates=st.lists(st.sampled_from([32, 64, 96, 128, 256]), min_size=1, max_size=4, unique=True),
    m=st.sampled_from([1, 2, 8, 16]),
    dp=st.sampled_from([1, 2, 4]),
    truncation=st.sampled_from(["right", "reject"]),
)
def test_plan_invariants(lengths, candidates, m, dp, truncation):
    plan = plan_pack_length(lengths, candidates=candidates, token_slots=1024, dp=dp, pad_seq_to_mult=m,
                            truncation=truncation)
    for r in plan.rows:
        assert r.packed_samples + r.rejected == len(lengths)  # every sample accounted for
        assert r.too_long == r.truncated + r.rejected
        assert r.packs >= r.lower_bound
        assert r.token_efficiency <= r.packing_efficiency + 1e-12 <= 1 + 1e-12
        if r.packs:
            assert r.token_efficiency + r.alignment_padding_share + r.tail_padding_share == pytest.approx(1.0)
        if r.global_batch_size is not None:
            assert r.steps_per_epoch * r.global_batch_size == pytest.approx(r.packs)
        assert r.valid == (not r.reasons)
    valid = [r for r in plan.rows if r.valid]
    if not valid:
        assert plan.recommended_pack_size is None
        return
    pick = plan.row(plan.recommended_pack_size)
    assert pick.valid
    pool = [r for r in valid if r.too_long == 0] or valid
    best = max(r.token_efficiency for r in pool)
    tied = [r for r in pool if r.token_efficiency >= best - TIE_TOLERANCE]
    assert pick.pack_size == max(r.pack_size for r in tied)
