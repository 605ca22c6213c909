"""Global-batch schedulers, pure: Megatron-Core's dp_balanced reproduced (with its failure cases handled)
and seqpack's balanced scheduler. Expected packs come from the contract's verified outcomes and by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import PackingError, UsageError
from seqpack.packing.global_batch import get_scheduler, schedule_global_batch, scheduler_names
from seqpack.data.length_mixes import sample_lengths
from seqpack.packing.fit import first_fit_in_order
from seqpack.packing.global_batch.balanced import (
    BalancedScheduler,
    LPTScheduler,
    assign_ranks,
    cost_lower_bound,
    first_fit_decreasing,
    lpt_ranks,
)


def sched(per_rank, capacity, *, cp=1, scheduler="dp_balanced"):
    return schedule_global_batch(per_rank, max_seqlen_per_dp_cp_rank=capacity // cp, cp_size=cp, scheduler=scheduler)


def packs(s):
    return [list(p) for p in s.packs]


# ------------------------------------------------------------------------------------------------
# dp_balanced: upstream outcomes (contract table, upstream main run on CPU)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "per_rank, capacity, expected",
    [
        ([[300, 500, 200, 700], [100, 400, 600, 200]], 1024, [[0, 1, 2], [3, 4], [5, 6], [7]]),
        ([[300, 500, 200, 700], [100, 400, 600]], 1024, [[0, 1, 2], [3, 4], [5], [6]]),
        ([[100, 100], [100], [100], [100]], 256, [[0, 1], [2], [4], [3]]),
        ([[900, 100], [100], [100], [100]], 1000, [[0, 1], [2], [4], [3]]),
    ],
)
def test_dp_balanced_reproduces_upstream_outcomes(per_rank, capacity, expected):
    s = sched(per_rank, capacity)
    assert packs(s) == expected
    assert s.adjustments == ()  # upstream finishes these without an assertion


def test_worked_example_dp2_cp2():
    # DP0 loads 300,500,200,700 (gids 0-3), DP1 100,400,600,200 (gids 4-7); C = 512 * 2
    s = sched([[300, 500, 200, 700], [100, 400, 600, 200]], 1024, cp=2)
    assert s.num_micro_batches == 2 and s.capacity == 1024
    assert s.dcp_groups() == [[[0, 1, 2], [0, 1, 2], [3, 4], [3, 4]], [[5, 6], [5, 6], [7], [7]]]
    assert s.seqlen_sum == 3000 and s.seqlen_squared_sum == 1_440_000
    assert isinstance(s.seqlen_sum, int) and isinstance(s.seqlen_squared_sum, int)
    per_cp_rank = [s.pack_tokens(s.pack(k, d)) // 2 for k in range(2) for d in range(2)]
    assert per_cp_rank == [500, 400, 500, 100]
    assert s.rank_packs(1) == [(3, 4), (7,)]
    assert [s.source_rank(g) for g in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert s.destinations() == [0, 0, 0, 1, 1, 0, 0, 1]


def test_capacity_is_inclusive_and_next_fit_never_backfills():
    assert packs(sched([[512, 512]], 1024)) == [[0, 1]]
    # first fit would put 200 next to 700; next fit only looks at the open pack
    assert packs(sched([[700, 400, 200]], 1000)) == [[0], [1, 2]]


def test_several_pops_from_one_pack_appear_in_reverse_order():
    s = sched([[900, 100, 100], [100, 100, 100], [], []], 1000)
    assert packs(s) == [[0, 1], [2, 3], [5], [4]]


# ------------------------------------------------------------------------------------------------
# dp_balanced: inputs upstream asserts on
# ------------------------------------------------------------------------------------------------


def test_pack0_split_where_upstream_main_asserts():
    s = sched([[100], [100], [100], [100]], 1024)  # all four in pack 0; main asserts i > 0
    assert packs(s) == [[0], [3], [2], [1]]  # dev's result: pops 3, 2, 1 appended in pop order
    assert len(s.adjustments) == 1 and "pack 0 gave up 3 sample(s)" in s.adjustments[0]


def test_all_single_sample_packs_get_fillers():
    s = sched([[512, 512, 512], [512, 512, 512], [], []], 512)  # 6 singletons, DP=4: upstream asserts
    assert packs(s) == [[0], [1], [2], [3], [4], [5], [], []]
    assert s.num_micro_batches == 2 and s.num_filler_packs == 2
    assert s.rank_packs(2) == [(2,), ()] and s.rank_packs(3) == [(3,), ()]
    assert "added 2 filler pack(s)" in s.adjustments[0]
    assert s.rank_loads() == ([1024, 1024, 512, 512], [2 * 512**2, 2 * 512**2, 512**2, 512**2])


def test_fewer_samples_than_ranks():
    s = sched([[64], [], []], 128)
    assert packs(s) == [[0], [], []] and s.num_micro_batches == 1


@pytest.mark.parametrize("scheduler", ["dp_balanced", "balanced"])
def test_oversize_sample_is_rejected_with_the_capacity_rule(scheduler):
    with pytest.raises(PackingError) as err:
        sched([[100, 2000], [100]], 1024, scheduler=scheduler)
    e = err.value
    assert e.rule_id == "PACK-GLOBAL-CAPACITY" and e.field == "padded_seq_len"
    assert "sample 1 (DP rank 0, local index 1) has padded length 2000" in e.message
    assert "max_seqlen_per_dp_cp_rank*CP = 1024*1 = 1024" in e.message
    assert "at least ceil(2000/1) = 2000" in e.fix


def test_oversize_first_sample_names_every_offender_and_the_row():
    # upstream emits an empty pack here and crashes later
    with pytest.raises(PackingError) as err:
        schedule_global_batch([[2000, 100], [100, 1500]], max_seqlen_per_dp_cp_rank=512, cp_size=2,
                              row_indices_per_rank=[[40, 41], [42, 43]])
    e = err.value
    assert "sample 0 (DP rank 0, local index 0, dataset row 40) has padded length 2000" in e.message
    assert "1 more sample(s) are too long too (id:length 3:1500)" in e.message
    assert e.row == 40 and "ceil(2000/2) = 1000" in e.fix


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError):
        sched([], 100)
    with pytest.raises(UsageError):
        sched([[0, 5]], 100)
    with pytest.raises(UsageError) as err:
        sched([[5]], 100, scheduler="default_dynamic_cp")
    assert err.value.rule_id == "PACK-GLOBAL-SCHEDULER"
    assert set(scheduler_names()) == {"dp_balanced", "balanced"}
    assert get_scheduler(None).name == "dp_balanced"


# ------------------------------------------------------------------------------------------------
# balanced
# ------------------------------------------------------------------------------------------------


def test_balanced_worked_example():
    # by hand, costs P**2: LPT takes 700, 600, 500, 400, 300, 200, 200, 100, each to the rank with the
    # lower cost so far: rank 0 = {700, 400, 200, 200} (730,000), rank 1 = {600, 500, 300, 100}
    # (710,000). Both need 2 packs of 1024, the fewest possible; the gap of 20,000 is smaller than
    # any cost difference between the ranks' samples, so no exchange helps
    s = sched([[300, 500, 200, 700], [100, 400, 600, 200]], 1024, scheduler="balanced")
    lengths = [300, 500, 200, 700, 100, 400, 600, 200]
    assert lpt_ranks([x * x for x in lengths], 2) == assign_ranks(lengths, 2, capacity=1024)[0] == [1, 1, 0, 0, 1, 0, 1, 0]
    assert packs(s) == [[2, 3], [0, 4, 6], [5, 7], [1]]
    assert s.rank_loads() == ([1500, 1500], [730_000, 710_000])
    assert s.adjustments == ()
    dp = sched([[300, 500, 200, 700], [100, 400, 600, 200]], 1024)
    assert dp.rank_loads() == ([2000, 1000], [900_000, 540_000])  # same input, upstream's loads


def test_balanced_splits_a_pack_to_equalise_counts():
    # 700 (id 1) and 400 to rank 0: two packs; 700 (id 2) and 300 to rank 1: one pack of exactly C, split
    s = sched([[400, 700], [700, 300]], 1000, scheduler="balanced")
    assert packs(s) == [[1], [2], [0], [3]]
    assert s.num_micro_batches == 2 and s.adjustments == ("split 1 pack(s) so every DP rank runs 2 micro-batch(es)",)


def test_balanced_moves_a_short_sample_to_save_a_micro_batch():
    # LPT on P**2: rank 0 = {100, 60, 30, 20} (210 tokens: 3 packs of 100), rank 1 = {90, 80} (2 packs),
    # costs 14,900 and 14,500. 380 tokens fit 2 packs per rank if rank 0 sheds 10 tokens: its
    # cheapest sample, 20 (cost 400), moves to rank 1, whose cost becomes 14,900, not above the peak
    per_rank, capacity = [[20, 30, 90], [100, 60, 80]], 100
    lpt = sched(per_rank, capacity, scheduler=LPTScheduler())
    assert lpt.num_micro_batches == 3 and lpt.rank_loads()[1] == [14_900, 14_500]
    s = sched(per_rank, capacity, scheduler="balanced")
    assert s.num_micro_batches == 2 and s.num_filler_packs == 0
    assert s.destinations() == [1, 0, 1, 0, 0, 1]
    assert s.rank_loads() == ([190, 190], [14_500, 14_900])


def test_balanced_refinement_swaps_to_lower_the_peak():
    # every sample needs a pack of its own; LPT: rank 0 = {960, 800, 750} (2,124,100), rank 1 =
    # {940, 900} (1,693,600). Swapping 960 for 900 moves 111,600: 2,012,500 vs 1,805,200; then no
    # exchange with a cost difference below the new gap of 207,300 is left
    per_rank, capacity = [[800, 750, 940], [900, 960]], 1000
    assert sched(per_rank, capacity, scheduler=LPTScheduler()).rank_loads()[1] == [2_124_100, 1_693_600]
    s = sched(per_rank, capacity, scheduler="balanced")
    assert s.destinations() == [0, 0, 1, 0, 1]
    assert s.rank_loads()[1] == [2_012_500, 1_805_200] and s.num_micro_batches == 3


def test_balanced_token_cost_balances_tokens():
    per_rank = [[int(x) for x in sample_lengths("lognormal", 32, seed=d)] for d in range(4)]
    by_tokens = sched(per_rank, 8192, scheduler=BalancedScheduler(cost="tokens"))
    by_attention = sched(per_rank, 8192, scheduler="balanced")
    assert by_tokens.scheduler == "balanced"
    assert by_tokens.imbalance()["tokens"] < by_attention.imbalance()["tokens"]
    assert by_attention.imbalance()["attention"] < by_tokens.imbalance()["attention"]
    with pytest.raises(UsageError, match="unknown balanced cost 'flops'"):
        BalancedScheduler(cost="flops")


def test_balanced_fills_a_rank_without_samples():
    s = sched([[100, 100], [], []], 1000, scheduler="balanced")
    assert packs(s) == [[0], [1], []] and s.num_filler_packs == 1
    assert "added 1 filler pack(s)" in s.adjustments[-1]


def test_balanced_orders_micro_batches_by_attention_cost():
    s = sched([[64] * 6 + [512] * 2, [64] * 6 + [512] * 2], 640, scheduler="balanced")
    loads = s.micro_batch_loads()
    for d in range(2):
        costs = [loads[k][d][1] for k in range(s.num_micro_batches)]
        assert costs == sorted(costs, reverse=True)


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


def upstream(lengths, capacity, dp, *, first_may_donate):
    """Straight re-statement of Megatron-Core's steps (main: first_may_donate=False; dev: True).

    Returns None where upstream raises its assertion.
    """
    out, cur, total = [], [], 0
    for gid, n in enumerate(lengths):
        if total + n <= capacity:
            cur.append(gid)
            total += n
        else:
            out.append(cur)
            cur, total = [gid], n
    if cur:
        out.append(cur)
    need = (dp - len(out) % dp) % dp
    i = len(out) - 1
    while need > 0:
        if i < 0 or (i == 0 and not first_may_donate):
            return None
        if len(out[i]) > 1:
            out.append([out[i].pop()])
            need -= 1
        else:
            i -= 1
    return out


@st.composite
def global_batches(draw):
    capacity = draw(st.integers(1, 400))
    dp = draw(st.integers(1, 6))
    per_rank = [draw(st.lists(st.integers(1, capacity), max_size=10)) for _ in range(dp)]
    if not any(per_rank):
        per_rank[0] = [draw(st.integers(1, capacity))]
    return per_rank, capacity


@settings(max_examples=300, deadline=None)
@given(global_batches(), st.sampled_from(["dp_balanced", "balanced"]))
def test_every_sample_once_equal_counts_no_pack_over_capacity(batch, scheduler):
    per_rank, capacity = batch
    s = sched(per_rank, capacity, scheduler=scheduler)
    dp = len(per_rank)
    n = sum(len(r) for r in per_rank)
    assert sorted(g for p in s.packs for g in p) == list(range(n))
    assert len(s.packs) == s.num_micro_batches * dp and s.num_micro_batches >= 1
    assert all(len(s.rank_packs(d)) == s.num_micro_batches for d in range(dp))
    assert all(s.pack_tokens(p) <= capacity for p in s.packs)
    assert s.seqlen_sum == sum(map(sum, per_rank)) == sum(s.rank_loads()[0])
    assert s.seqlen_squared_sum == sum(x * x for r in per_rank for x in r) == sum(s.rank_loads()[1])
    if s.num_filler_packs:
        if scheduler == "dp_balanced":  # only when every real pack holds one sample
            assert all(len(p) <= 1 for p in s.packs) and s.num_filler_packs < dp
        else:  # only on ranks holding fewer samples than there are micro-batches
            for d in range(dp):
                if () in s.rank_packs(d):
                    assert sum(len(p) for p in s.rank_packs(d)) < s.num_micro_batches


@settings(max_examples=300, deadline=None)
@given(global_batches())
def test_dp_balanced_equals_upstream_wherever_upstream_succeeds(batch):
    per_rank, capacity = batch
    lengths = [x for r in per_rank for x in r]
    ours = packs(sched(per_rank, capacity))
    main = upstream(lengths, capacity, len(per_rank), first_may_donate=False)
    dev = upstream(lengths, capacity, len(per_rank), first_may_donate=True)
    if main is not None:
        assert ours == main
    if dev is not None:
        assert ours == dev
    else:  # both branches assert: every real pack holds one sample, fillers make up the rest
        assert all(len(p) <= 1 for p in ours)
        assert sum(1 for p in ours if not p) == (-len(lengths)) % len(per_rank)


@settings(max_examples=150, deadline=None)
@given(global_batches())
def test_balanced_never_worse_than_plain_lpt(batch):
    """Against plain LPT on the same input: the largest rank cost and the micro-batch count never grow;
    LPT itself ends with the most and least loaded ranks at most one sample's cost apart; no
    assignment beats the lower bound; packing never moves a sample to another rank."""
    per_rank, capacity = batch
    lengths = [x for r in per_rank for x in r]
    dp = len(per_rank)
    costs = [x * x for x in lengths]

    def loads(ranks):
        return [sum(c for c, r in zip(costs, ranks) if r == d) for d in range(dp)]

    lpt = loads(lpt_ranks(costs, dp))
    assert max(lpt) - min(lpt) <= max(costs)
    ranks, per_rank_packs = assign_ranks(lengths, dp, capacity=capacity)
    assert cost_lower_bound(costs, dp) <= max(loads(ranks)) <= max(lpt)
    plain = sched(per_rank, capacity, scheduler=LPTScheduler())
    s = sched(per_rank, capacity, scheduler="balanced")
    assert max(s.rank_loads()[1]) <= max(plain.rank_loads()[1]) == max(lpt)
    assert s.num_micro_batches <= plain.num_micro_batches
    assert s.destinations() == ranks
    assert s.num_micro_batches == max(len(p) for p in per_rank_packs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 400), max_size=40), st.integers(1, 400))
def test_first_fit_decreasing_matches_the_library_first_fit(lengths, capacity):
    lengths = [min(x, capacity) for x in lengths]
    ids = list(range(len(lengths)))
    ours = first_fit_decreasing(ids, lengths, capacity)
    order = sorted(ids, key=lambda g: (-lengths[g], g))
    bins, _, count = first_fit_in_order([lengths[g] for g in order], capacity)
    theirs = [[] for _ in range(count)]
    for g, b in zip(order, bins.tolist()):
        theirs[b].append(g)
    assert ours == theirs


@pytest.mark.parametrize("mix", ["lognormal", "bimodal"])
@pytest.mark.parametrize("batch", [64, 256])
def test_balanced_no_worse_than_plain_lpt_over_seeds(mix, batch):
    """The benchmark's setting (DP 8, capacity 8192, lengths aligned to 4) over 20 fixed seeds: on
    every seed, balanced's largest attention cost and micro-batch count are at most plain LPT's,
    every sample runs once and every rank runs the same number of micro-batches."""
    dp, better_counts = 8, 0
    for seed in range(20):
        lengths = [-(-int(x) // 4) * 4 for x in sample_lengths(mix, batch, seed=seed)]
        per_rank = [lengths[d::dp] for d in range(dp)]
        plain = sched(per_rank, 8192, cp=2, scheduler=LPTScheduler())
        s = sched(per_rank, 8192, cp=2, scheduler="balanced")
        assert sorted(g for p in s.packs for g in p) == list(range(batch))
        assert all(len(s.rank_packs(d)) == s.num_micro_batches for d in range(dp))
        assert s.imbalance()["attention"] <= plain.imbalance()["attention"]
        assert s.num_micro_batches <= plain.num_micro_batches
        better_counts += s.num_micro_batches < plain.num_micro_batches
    if (mix, batch) == ("bimodal", 64):
        assert better_counts >= 2  # where step 2 saves micro-batches on these seeds


def test_the_report_gives_the_other_schedulers_balance_and_a_hint(tmp_path):
    import json as _json

    from seqpack.packing.global_batch.report import inspect_global_batch

    # 16 short rows fit one pack; dp_balanced splits one sample off for the second DP rank
    rows = [{"prompt": "p " * (50 + 7 * i % 90), "completion": "c " * 40} for i in range(64)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    cfg = {"model": {"seq_length": 8192, "sequence_packing_scheduler": "dp_balanced", "calculate_per_token_loss": True,
                     "max_seqlen_per_dp_cp_rank": 8192},
           "dataset": {"seq_length": 8192, "enable_global_batch_packing": True, "dataloader_type": "single"},
           "train": {"micro_batch_size": 1, "global_batch_size": 16}, "dist": {"world_size": 2}}
    report = inspect_global_batch(data, cfg, num_steps=2)
    worst = report.balance["max_over_mean_tokens"]
    assert set(worst) == {"dp_balanced", "balanced"} and report.balance["scheduler"] == "dp_balanced"
    assert worst["dp_balanced"] == max(s.imbalance["tokens"] for s in report.steps) > 1.5
    assert worst["balanced"] < 1.1 and "--scheduler balanced gives 1.00x" in report.balance["hint"]
    assert "Megatron-Core does not have it" in report.balance["hint"]
    even = inspect_global_batch(data, {**cfg, "model": {**cfg["model"], "sequence_packing_scheduler": "balanced"}})
    assert even.balance["hint"] is None  # the negative control: nothing better to point to
