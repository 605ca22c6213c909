"""seqpack's global-batch scheduling pieces against Megatron-Core 0.19.2's ``BalancedCPScheduler``, running
in the lane; and which scheduler the 0.19.2 release has at all.

Megatron-Core 0.19.2 has no ``DpBalancedScheduler`` (nor ``wrap_data_iterator``): the scheduler that
seqpack's ``dp_balanced`` follows exists only on Megatron-LM main (commit ``d98e8a64ddf3``,
2026-08-22), so it cannot be compared in the lane. What 0.19.2 has is the hybrid-context-parallel
``BalancedCPScheduler``, which seqpack does not implement (seqpack's CP size is fixed per run). Its
parts that have a seqpack equivalent are compared:

* ``gpus_needed(L)``: the CP size a sample of padded length ``L`` needs with
  ``max_seq_len_per_rank`` tokens per rank, vs the smallest power-of-two CP for which seqpack's
  capacity rule (PACK-GLOBAL-CAPACITY, ``L <= max_seqlen_per_dp_cp_rank * CP``) accepts it;
* ``get_total_workload(L, 1)``: the per-sample work estimate, vs seqpack's attention cost
  (``balanced.sample_costs(..., "attention")`` = ``L**2``);
* ``get_groups_and_subsamples`` on samples that each fit one rank: the GPU of every sample in the
  first group vs the LPT assignment that starts seqpack's ``balanced`` scheduler
  (``balanced.assign_ranks(..., improve=False)``), longest first to the least loaded rank.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import PackingError
from seqpack.packing.global_batch import check_capacity
from seqpack.packing.global_batch.balanced import assign_ranks, sample_costs
from seqpack_lane.differences import BCP_GPUS_NEEDED, BCP_GROUPS, BCP_WORKLOAD
from tests.upstream.thd_lane import ask

pytestmark = pytest.mark.slow

SETTINGS = dict(derandomize=True, database=None, deadline=None)
BIG = 1 << 40  # a pack capacity no sample reaches: LPT alone decides the ranks


def test_release_has_balanced_cp_scheduler_and_no_dp_balanced(upstream):
    """The docs say dp_balanced follows Megatron-LM main, not a release: 0.19.2 lacks every piece of it."""
    found = upstream.call("schedulers.available")
    assert found["megatron.core.pipeline_parallel.hybrid_cp_schedule"] == {"BalancedCPScheduler": True}
    schedule = found["megatron.core.datasets.data_schedule"]
    assert schedule.pop("HybridCPDataLoaderWrapper") is True
    assert schedule == dict.fromkeys(schedule, False) and "DpBalancedScheduler" in schedule
    assert found["megatron.core.datasets.data_schedule_utils"] is None  # the module is main-only too


def seqpack_cp_needed(length: int, per_rank: int) -> int:
    """The smallest power-of-two CP at which seqpack's capacity rule accepts a sample of ``length``."""
    cp = 1
    while True:
        try:
            check_capacity([length], capacity=per_rank * cp, cp_size=cp, rank_offsets=[0, 1])
            return cp
        except PackingError:
            cp *= 2


@st.composite
def scheduler_cases(draw) -> dict:
    per_rank = draw(st.sampled_from([16, 64, 100, 128, 512, 4096]))
    n = draw(st.integers(1, 24))
    fits = draw(st.integers(0, 4)) > 0  # mostly samples that fit one rank (the comparable schedule)
    top = per_rank if fits else 9 * per_rank
    return {"lengths": draw(st.lists(st.integers(1, top), min_size=n, max_size=n)),
            "max_seq_len_per_rank": per_rank, "total_gpus": draw(st.sampled_from([1, 2, 3, 4, 8]))}


def compare(compat, case: dict, answer: dict) -> None:
    lengths, per_rank, gpus = case["lengths"], case["max_seq_len_per_rank"], case["total_gpus"]
    ours_cp = [seqpack_cp_needed(n, per_rank) for n in lengths]
    compat.check(BCP_GPUS_NEEDED, answer["gpus_needed"] == ours_cp,
                 detail=f"{case}: {answer['gpus_needed']} != {ours_cp}")
    compat.check(BCP_WORKLOAD, answer["workload_cp1"] == [float(c) for c in sample_costs(lengths, "attention")],
                 detail=f"{case}: {answer['workload_cp1']}")
    if max(ours_cp) > 1:
        return  # a sample that needs several CP ranks: hybrid CP, which seqpack does not schedule
    assert "groups_raise" not in answer, answer
    lpt, _ = assign_ranks(lengths, gpus, capacity=BIG, improve=False)
    placed: dict[int, set[int]] = {}
    for g, group in enumerate(answer["sample_ids"]):
        for gpu, ids in enumerate(group):
            for sid in ids:
                placed.setdefault(sid, set()).add((g, gpu))
    groups_of = {sid: {g for g, _ in where} for sid, where in placed.items()}
    if sorted(placed) != list(range(len(lengths))) or any(len(gs) != 1 for gs in groups_of.values()):
        compat.check(BCP_GROUPS, False, detail=f"{case}: a sample is missing or in two groups: {answer['sample_ids']}")
        return
    if len(lengths) < gpus:  # idle GPUs: upstream widens samples over them, seqpack leaves ranks empty
        assert sorted(lpt) == list(range(len(lengths)))  # one sample per rank in seqpack
        compat.by_design(BCP_GROUPS, "bcp-fills-idle-gpus")
        return
    first = {sid: [gpu for g, gpu in where if g == 0] for sid, where in placed.items() if 0 in groups_of[sid]}
    if any(len(on) != 1 for on in first.values()):
        compat.check(BCP_GROUPS, False, detail=f"{case}: a first-group sample on several GPUs: {answer['sample_ids']}")
        return
    first = {sid: on[0] for sid, on in first.items()}
    same = all(lpt[sid] == gpu for sid, gpu in first.items())
    if len(answer["sample_ids"]) == 1:
        compat.check(BCP_GROUPS, same, detail=f"{case}: upstream {answer['sample_ids']}, LPT {lpt}")
    else:
        compat.check(BCP_GROUPS, False, difference="bcp-deferred-to-next-group" if same else None,
                     detail=f"{case}: first group {first}, LPT {lpt}")


@settings(max_examples=10, **SETTINGS)
@given(st.lists(scheduler_cases(), min_size=20, max_size=20))
def test_balanced_cp_scheduler_parts_equal_seqpacks(upstream, compat, cases):
    for case, answer in zip(cases, ask(upstream, "schedulers.balanced_cp", cases)):
        compare(compat, case, answer)


def test_balanced_cp_scheduler_fixed_cases(upstream, compat):
    cases = [
        {"lengths": [100, 90, 80, 70, 60, 10, 5], "max_seq_len_per_rank": 128, "total_gpus": 3},  # LPT, one group
        {"lengths": [128, 129, 256, 257, 512, 513], "max_seq_len_per_rank": 128, "total_gpus": 8},  # capacity edges
        {"lengths": [100, 90], "max_seq_len_per_rank": 128, "total_gpus": 4},  # idle GPUs
        {"lengths": [120, 10, 10, 10, 10, 10, 10, 10], "max_seq_len_per_rank": 128, "total_gpus": 2},
    ]
    answers = ask(upstream, "schedulers.balanced_cp", cases)
    assert answers[0]["sample_ids"] == [[[0, 5, 6], [1, 4], [2, 3]]]
    assert answers[1]["gpus_needed"] == [1, 2, 2, 4, 4, 8]
    assert answers[2]["sample_ids"] == [[[0], [0], [1], [1]]]
    before = dict(compat.counts[BCP_GROUPS])
    for case, answer in zip(cases, answers):
        compare(compat, case, answer)
    got = {k: v - before.get(k, 0) for k, v in compat.counts[BCP_GROUPS].items() if v != before.get(k, 0)}
    assert got.get("equal", 0) >= 1 and got.get("bcp-fills-idle-gpus") == 1, got


def test_comparison_catches_a_difference(upstream):
    """Negative control: LPT for another rank count, or plain ties broken the other way, is not upstream's."""
    case = {"lengths": [100, 90, 80, 70, 60, 10, 5], "max_seq_len_per_rank": 128, "total_gpus": 3}
    (answer,) = ask(upstream, "schedulers.balanced_cp", [case])
    first = {sid: gpu for gpu, ids in enumerate(answer["sample_ids"][0]) for sid in ids}
    assert [first[i] for i in range(7)] == assign_ranks(case["lengths"], 3, capacity=BIG, improve=False)[0]
    assert [first[i] for i in range(7)] != assign_ranks(case["lengths"], 2, capacity=BIG, improve=False)[0]
    assert [first[i] for i in range(7)] != [2 - r for r in assign_ranks(case["lengths"], 3, capacity=BIG,
                                                                         improve=False)[0]]
    assert answer["gpus_needed"] != [seqpack_cp_needed(n, 64) for n in case["lengths"]]
